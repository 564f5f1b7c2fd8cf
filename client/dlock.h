/* dlock.h - libdlock, the client library of dlockd: sessions, fenced locks, semaphores and latches. */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Conventions of every function below:
 * - functions returning int return 0 (or a documented count >= 0) on success
 *   and a negative DLOCK_ERR_* code on failure; dlock_strerror() names it;
 * - a handle is thread-safe: any number of threads may call into one handle
 *   at once, and a call that waits for a lock blocks only its own thread;
 * - "owner": a hold belongs to (session, owner). Unless a function takes an
 *   explicit owner, the owner is the calling thread, so two threads sharing
 *   one handle exclude each other like two processes. Calls for one owner
 *   must not overlap (two threads passing the same explicit owner at once);
 * - wait_ms: 0 = do not wait (DLOCK_ERR_BUSY when not free), > 0 = wait up to
 *   that long (DLOCK_ERR_TIMEOUT), DLOCK_WAIT_INF = wait without limit.
 *   At most 2^31-1 ms.
 */

typedef struct dlock dlock_t;                 /* a connection with its session */
typedef struct dlock_options dlock_options_t; /* how to connect */

/* Error codes. -1 .. -99 mirror the protocol's `ERR CODE` one to one; -100 and
 * below are the library's own. */
enum dlock_err {
    DLOCK_OK = 0,
    DLOCK_ERR_SYNTAX = -1,     /* the server found the request malformed */
    DLOCK_ERR_UNKNOWN = -2,    /* the server does not know the verb */
    DLOCK_ERR_TOOBIG = -3,     /* request line too long */
    DLOCK_ERR_NOAUTH = -4,     /* password needed, or wrong */
    DLOCK_ERR_NOSESSION = -5,  /* the session to resume is gone */
    DLOCK_ERR_NOTHELD = -6,    /* release of something not held */
    DLOCK_ERR_WRONGTYPE = -7,  /* the name is in use as another type */
    DLOCK_ERR_MISMATCH = -8,   /* semaphore limit differs from the one in force */
    DLOCK_ERR_DEADLOCK = -9,   /* can never be granted (two upgraders) */
    DLOCK_ERR_LIMIT = -10,     /* a server limit is reached */
    DLOCK_ERR_BACKEND = -11,   /* the server could not reach Redis; nothing changed */
    DLOCK_ERR_BUSY = -100,     /* not free now, and the call did not wait */
    DLOCK_ERR_TIMEOUT = -101,  /* waited wait_ms and was not granted; nothing held */
    DLOCK_ERR_LOST = -102,     /* the hold was lost before this call (see dlock_event) */
    DLOCK_ERR_CONN = -103,     /* no connection, or no reply in time; see the call's contract */
    DLOCK_ERR_INVAL = -104,    /* invalid argument (bad name, owner, duration, ...) */
    DLOCK_ERR_NOMEM = -105,    /* out of memory */
    DLOCK_ERR_PROTO = -106,    /* the server sent something this library does not understand */
    DLOCK_ERR_CLOSED = -107,   /* the handle is being closed */
    DLOCK_ERR_SYSTEM = -108    /* a system call failed (errno tells which) */
};

#define DLOCK_SHARED 0x1u      /* shared (read) hold instead of exclusive */
#define DLOCK_ALL 0x2u         /* unlock: drop the whole reentrancy count */
#define DLOCK_WAIT_INF (-1LL)  /* wait without limit */

/* What a granted lock or semaphore acquire gives back. */
struct dlock_grant {
    unsigned long long token; /* fencing token of the hold: pass it to what the lock protects */
    int count;                /* lock: reentrancy count of this owner's hold in that mode;
                                 semaphore: permits this owner holds now */
    int free;                 /* semaphore: permits free after the grant; -1 for a lock */
};

/* Events delivered to the callback. */
enum dlock_event_type {
    DLOCK_EVENT_LOST = 1,  /* a hold is gone although the application did not release it */
    DLOCK_EVENT_JEOPARDY,  /* holds cannot be renewed right now; they may be lost soon */
    DLOCK_EVENT_SAFE       /* the jeopardy is over: holds that were not reported lost are safe */
};

struct dlock_event {
    enum dlock_event_type type;
    const char *name;         /* LOST: the lock or semaphore name; NULL otherwise */
    const char *owner;        /* LOST: the owner of the hold */
    unsigned flags;           /* LOST: DLOCK_SHARED for a shared hold */
    unsigned long long token; /* LOST: token of the lost hold */
    const char *reason;       /* LOST: "expired" (session ended), "jeopardy" (not confirmed in
                                 time, see dlock_connect), "lease", "backend", "admin", "shutdown";
                                 JEOPARDY: "connection", "heartbeat", "backend" */
};

/*
 * The event callback. It runs on the handle's I/O thread, one event at a
 * time, with no library lock held; it must return quickly and may call only
 * dlock_held(), dlock_held_ex(), dlock_session() and dlock_strerror() on h
 * (blocking calls made from it fail with DLOCK_ERR_INVAL). The strings are
 * valid during the call only. No callback runs after dlock_close() returned.
 *
 * What to do on DLOCK_EVENT_LOST: stop touching the resource the lock
 * protected at once - another process may hold the lock now - and do not
 * write anything based on what you read under it. dlock_held() says
 * DLOCK_ERR_LOST and dlock_unlock() returns DLOCK_ERR_LOST (and forgets the
 * hold) until you take the lock again. Writes that carry the fencing token
 * are refused by a resource that saw a newer token, which covers the time
 * before the event reached you.
 * On DLOCK_EVENT_JEOPARDY: do not start new work that relies on the holds;
 * finish or pause until DLOCK_EVENT_SAFE or DLOCK_EVENT_LOST.
 */
typedef void (*dlock_event_cb)(dlock_t *h, const struct dlock_event *ev, void *arg);

/* ---- connecting */

/* A new options object with defaults; NULL when out of memory. */
dlock_options_t *dlock_options_new(void);
void dlock_options_free(dlock_options_t *o);
/*
 * Adds server addresses: "HOST:PORT", "HOST" (port 7411), "[IPV6]:PORT" or
 * "unix:PATH"; a comma-separated list adds several. They are tried in order
 * on connect. Without any, $DLOCK_ADDR is used, else 127.0.0.1:7411.
 */
int dlock_options_add_address(dlock_options_t *o, const char *addrs);
/* Session ttl asked for in HELLO (the server clamps it); 0 = server default. */
int dlock_options_set_ttl(dlock_options_t *o, long long ttl_ms);
/* Client name shown by STATUS and BUSY; 1-200 printable bytes without space. */
int dlock_options_set_name(dlock_options_t *o, const char *name);
/* Password for servers with requirepass. */
int dlock_options_set_password(dlock_options_t *o, const char *password);
/*
 * connect_ms: limit for one connection attempt with its HELLO (default 5000);
 * request_ms: how long a call waits for a reply beyond its own wait_ms
 * (default 5000), during which the library also reconnects. 0 keeps a value.
 */
int dlock_options_set_timeouts(dlock_options_t *o, long long connect_ms, long long request_ms);
/* The event callback (see dlock_event_cb). */
int dlock_options_set_event_callback(dlock_options_t *o, dlock_event_cb cb, void *arg);

/*
 * Connects to the first address that answers, says HELLO and starts the
 * handle's I/O thread, which sends heartbeats and reconnects after a
 * dropped connection, resuming the session (with the secret HELLO gave)
 * while its ttl lasts: holds and waiting calls carry on. If the session is
 * gone by then, every hold is reported lost and a new session starts.
 * When the server tells its lock-lease, holds are trusted for 2/3 of it
 * less a margin after the last answer that confirmed them, and heartbeats
 * go out three times within that (else every ttl/3); once it runs out (the
 * connection down, the server silent or in jeopardy) they are reported
 * lost ("jeopardy") and the session is ended, before another client could
 * be granted them (libdlock(3), HOLDS IN JEOPARDY). o may be NULL
 * (defaults) and may be freed after the call. On success *hp is the handle.
 * Errors: DLOCK_ERR_CONN (no address answered), DLOCK_ERR_NOAUTH, DLOCK_ERR_INVAL, ...
 */
int dlock_connect(dlock_t **hp, const dlock_options_t *o);
/*
 * Ends the session (QUIT: every hold is released at once). Calls blocked in
 * other threads return DLOCK_ERR_CLOSED, and so does every later call; h
 * stays valid until dlock_close(). Any thread may call it, more than once.
 * Use it to cancel a wait from another thread (say, on a signal).
 */
void dlock_shutdown(dlock_t *h);
/*
 * dlock_shutdown(), then waits until no call is running on h, stops the I/O
 * thread and frees h. No call may start on h once dlock_close() has begun
 * (use dlock_shutdown() first when other threads might still call). Not from
 * the callback.
 */
void dlock_close(dlock_t *h);

/* ---- locks (LOCK / UNLOCK) */

/*
 * Takes the lock name, exclusive or with DLOCK_SHARED shared, waiting up to
 * wait_ms. Reentrant: the same owner asking again gets the same token and a
 * higher count. On success fills *g (may be NULL).
 * Errors: DLOCK_ERR_BUSY, DLOCK_ERR_TIMEOUT, DLOCK_ERR_DEADLOCK, DLOCK_ERR_CONN
 * (no reply within wait_ms + request timeout: nothing is held, a late grant
 * is given back), any server error.
 */
int dlock_lock(dlock_t *h, const char *name, unsigned flags, long long wait_ms, struct dlock_grant *g);
/* dlock_lock() with wait_ms 0. */
int dlock_trylock(dlock_t *h, const char *name, unsigned flags, struct dlock_grant *g);
/*
 * Drops one count of the calling thread's hold (the whole hold with
 * DLOCK_ALL): its exclusive hold if it has one, else its shared one (only the
 * shared one with DLOCK_SHARED). Returns the count left (0: released).
 * Errors: DLOCK_ERR_NOTHELD, DLOCK_ERR_LOST (the hold had been lost; it is
 * forgotten now), DLOCK_ERR_CONN, ...
 */
int dlock_unlock(dlock_t *h, const char *name, unsigned flags);
/*
 * The general forms: n names (1-64) all or nothing, an explicit owner (NULL
 * for the calling thread, "" for the protocol's empty owner), and a lease
 * (lease_ms > 0: the server releases the hold after that long and reports it
 * lost with reason "lease"; 0: none). g has n entries (may be NULL).
 * dlock_unlock_ex() stores the counts left in counts (n entries, may be NULL);
 * when some of the holds had been lost it releases the others and returns
 * DLOCK_ERR_LOST.
 */
int dlock_lock_ex(dlock_t *h, const char *const *names, int n, unsigned flags, long long wait_ms,
                  long long lease_ms, const char *owner, struct dlock_grant *g);
int dlock_unlock_ex(dlock_t *h, const char *const *names, int n, unsigned flags, const char *owner,
                    int *counts);

/* ---- semaphores (ACQUIRE / RELEASE) */

/*
 * Takes permits (>= 1) of the semaphore name, which allows limit permits
 * out at once, waiting up to wait_ms. On success fills *g (count = permits
 * this owner holds, free = permits left). Errors as dlock_lock(), and
 * DLOCK_ERR_MISMATCH when the semaphore is in force with another limit.
 */
int dlock_acquire(dlock_t *h, const char *name, int limit, int permits, long long wait_ms,
                  struct dlock_grant *g);
int dlock_acquire_ex(dlock_t *h, const char *name, int limit, int permits, long long wait_ms,
                     long long lease_ms, const char *owner, struct dlock_grant *g);
/* Gives back permits; returns the permits this owner still holds.
 * Errors: DLOCK_ERR_NOTHELD (more than held), DLOCK_ERR_LOST, DLOCK_ERR_CONN, ... */
int dlock_release(dlock_t *h, const char *name, int permits);
int dlock_release_ex(dlock_t *h, const char *name, int permits, const char *owner);

/* ---- count-down latches (LATCH / COUNTDOWN / AWAIT); not tied to the session */

/* Creates the latch with count (>= 0) unless it exists; ttl_ms 0 = server default.
 * Returns its current count. */
int dlock_latch(dlock_t *h, const char *name, int count, long long ttl_ms);
/* Counts down by n (>= 1); returns the count left. DLOCK_ERR_CONN when the
 * connection broke while the request was on the way (outcome unknown). */
int dlock_countdown(dlock_t *h, const char *name, int n);
/* Waits until the latch is at 0 (or does not exist): 0, or DLOCK_ERR_TIMEOUT. */
int dlock_await(dlock_t *h, const char *name, long long wait_ms);

/* ---- introspection */

/* STATUS name: *json is a malloc'd JSON object (free it with free()). */
int dlock_status(dlock_t *h, const char *name, char **json);
/* INFO: *json is a malloc'd JSON object with the server's counters. */
int dlock_info(dlock_t *h, char **json);
/* PING: a round trip to the server. */
int dlock_ping(dlock_t *h);

/*
 * What this handle believes about the calling thread's hold of name: its
 * count (> 0) - the exclusive hold if there is one, else the shared hold,
 * else the permits of a semaphore -, 0 when not held, DLOCK_ERR_LOST when it
 * was lost and not yet unlocked or taken again. Asks nothing of the server.
 */
int dlock_held(dlock_t *h, const char *name);
/* As dlock_held() for owner (NULL: the calling thread); DLOCK_SHARED: only the shared hold. */
int dlock_held_ex(dlock_t *h, const char *name, const char *owner, unsigned flags);

/* Copies the current session id (16 hex characters) into buf; DLOCK_ERR_INVAL when len < 17. */
int dlock_session(dlock_t *h, char *buf, size_t len);
/* Copies the calling thread's default owner string into buf (at least 32 bytes). */
int dlock_owner(char *buf, size_t len);
/* A static English text for an error code. */
const char *dlock_strerror(int err);
/* The library version, e.g. "0.1.0". */
const char *dlock_version(void);

/* For tests: breaks the connection as a network failure would (the handle reconnects). */
void dlock_debug_drop_connection(dlock_t *h);

#ifdef __cplusplus
}
#endif

#endif
