/* internal.h - libdlock internals shared by its files: the handle, requests, holds, the I/O thread. */
#ifndef DLOCK_INTERNAL_H
#define DLOCK_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "dlock.h"
#include "proto.h"

#define DL_MAX_ADDRS 16              /* addresses in one options object */
#define DL_REPLY_MAX (1u << 20)      /* longest reply line accepted (STATUS of a busy name) */
#define DL_LINE_MAX PROTO_LINE_DEFAULT /* longest request line sent: the server's default max-line */
#define DL_DEFAULT_ADDR "127.0.0.1:7411"
#define DL_DEFAULT_PORT "7411"
#define DL_HB_RING 16                /* heartbeats remembered for their send time */
#define DL_INF INT64_MAX             /* "no deadline" */
#define DL_NO_WAIT (-2LL)            /* a request that sends no wait= */

/* One server address. */
struct dl_addr {
    char text[300]; /* as given, for messages */
    char host[256]; /* TCP host ("" for a unix socket) */
    char port[16];  /* TCP port */
    char path[108]; /* unix socket path ("" for TCP) */
};

struct dlock_options {
    struct dl_addr addrs[DL_MAX_ADDRS]; /* tried in order */
    int naddrs;                         /* 0: $DLOCK_ADDR or the default */
    long long ttl_ms;                   /* HELLO ttl=, 0 = server default */
    char name[PROTO_STR_MAX + 1];       /* HELLO name=, "" = server default */
    char password[PROTO_STR_MAX + 1];   /* HELLO auth=, "" = none */
    long long connect_ms;               /* one connection attempt with HELLO */
    long long request_ms;               /* reply wait beyond a request's own wait */
    dlock_event_cb cb;                  /* event callback, may be NULL */
    void *cbarg;                        /* its argument */
};

enum dl_kind { K_LOCK, K_UNLOCK, K_ACQUIRE, K_RELEASE, K_LATCH, K_COUNTDOWN, K_AWAIT, K_STATUS, K_INFO, K_PING, K_QUIT };
enum dl_mode { M_EXCL, M_SHARED, M_SEM };

/* One request from the call that makes it to its reply (or failure). */
struct dl_req {
    struct dl_req *next, *prev;  /* in h->reqs while outstanding */
    char tag[24];                /* without '#' */
    enum dl_kind kind;
    char *body;                  /* the request without tag and wait=, e.g. "LOCK a shared owner=t1" */
    long long wait_ms;           /* DL_NO_WAIT, DLOCK_WAIT_INF or >= 0 */
    long long sent_wait;         /* the wait= of the last send */
    int64_t deadline;            /* monotonic ms when the caller gives up (DL_INF: never) */
    int64_t started;             /* monotonic ms at submit: what is left of wait after a reconnect */
    unsigned gen;                /* connection generation it was sent on; 0 = not sent yet */
    int dropped;                 /* it was on its way when the connection broke */
    int internal;                /* sent by the library itself (an undo): nobody waits for it */
    int abandoned;               /* the caller gave up: its I/O thread frees it; a late grant is undone */
    int done;                    /* finished: rc and the results are set */
    int rc;                      /* DLOCK_OK or a DLOCK_ERR_* */
    pthread_cond_t cv;           /* signalled when done */
    /* what the request is about, for the hold table and undo */
    enum dl_mode mode;           /* LOCK/UNLOCK: the mode; ACQUIRE/RELEASE: M_SEM */
    unsigned flags;              /* DLOCK_SHARED, DLOCK_ALL as asked */
    int permits;                 /* ACQUIRE/RELEASE */
    char owner[PROTO_STR_MAX + 1];
    int nnames;
    char *names[PROTO_MAX_NAMES];
    /* results */
    unsigned long long tokens[PROTO_MAX_NAMES];
    int counts[PROTO_MAX_NAMES]; /* count, counts, held, or a latch count */
    int free_permits;            /* ACQUIRE/RELEASE free= */
    char *json;                  /* STATUS/INFO: the JSON (malloc) */
};

/* One hold as this handle believes it is. */
struct dl_hold {
    struct dl_hold *next;        /* hash chain */
    char *name;
    char *owner;
    enum dl_mode mode;
    int count;                   /* reentrancy count, or permits of a semaphore */
    unsigned long long token;
    int lost;                    /* reported lost; kept until unlocked or taken again */
};

#define DL_HOLD_BUCKETS 256
struct dl_holds {
    struct dl_hold *b[DL_HOLD_BUCKETS];
};

/* An event waiting to be delivered to the callback. */
struct dl_event {
    struct dl_event *next;
    struct dlock_event ev;       /* points into the strings below */
    char *name, *owner, *reason;
};

#define J_CONN 1u     /* disconnected */
#define J_HB 2u       /* heartbeats late */
#define J_BACKEND 4u  /* the server said JEOPARDY */

struct dlock {
    pthread_mutex_t mu;           /* guards everything below but the fields marked I/O */
    struct dlock_options opt;     /* copy of the options */
    pthread_t io;                 /* the I/O thread */
    int io_started;               /* io is valid */
    int wake[2];                  /* pipe that wakes the I/O thread */
    int fd;                       /* the socket, -1 while disconnected */
    int up;                       /* connected and HELLO done: requests go out at once */
    unsigned gen;                 /* connection generation, bumped per connection */
    int cur;                      /* index of the address the session lives on */
    char session[PROTO_STR_MAX + 1]; /* session id; "" before the first HELLO */
    char secret[PROTO_STR_MAX + 1];  /* its secret, from the last HELLO; resumes it */
    int session_dead;             /* the session is gone: the next HELLO starts a new one */
    int64_t ttl;                  /* session ttl granted by the server, ms */
    int64_t safe_until;           /* send time of the last acknowledged heartbeat + ttl */
    int64_t next_hb;              /* when to send the next heartbeat */
    uint64_t hb_seq;              /* heartbeat tags */
    int64_t hb_sent[DL_HB_RING];  /* send time of heartbeat hb_seq % DL_HB_RING */
    unsigned jeopardy;            /* J_* reasons in force */
    int stop;                     /* the I/O thread must end */
    int closing;                  /* dlock_close() has begun */
    int active;                   /* API calls running on the handle */
    pthread_cond_t cv;            /* first connection done; active calls left */
    int first_rc;                 /* result of the first connection; 1 while pending */
    uint64_t seq;                 /* request tags */
    struct dl_req *reqs;          /* outstanding requests */
    struct dl_holds holds;        /* the hold table */
    char *out;                    /* bytes to send */
    size_t outlen, outcap;
    struct dl_event *evq;         /* events for the callback */
    struct dl_event **evtail;
    struct proto_lines lines;     /* I/O: received bytes split into lines */
    char *line;                   /* I/O: one received line */
};

/* ---- util.c */
int64_t dl_now(void);                             /* CLOCK_MONOTONIC in ms */
void dl_deadline_ts(int64_t ms, struct timespec *ts); /* ms on the monotonic clock as a timespec */
int dl_cond_init(pthread_cond_t *cv);             /* a condition variable on the monotonic clock */
int dl_valid_owner(const char *s);                /* 0-200 bytes of 0x21-0x7E */
int dl_valid_value(const char *s);                /* 1-200 bytes of 0x21-0x7E */
const char *dl_thread_owner(void);                /* the calling thread's owner string */
int dl_err_from_proto(enum proto_err e);          /* ERR code -> DLOCK_ERR_* */
/* Appends formatted text to *buf (malloc'd, length *len, size *cap). 0 or -1. */
int dl_appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int dl_parse_ull(const char *s, unsigned long long *v); /* decimal; 0 or -1 */
int dl_parse_int(const char *s, int *v);          /* decimal >= 0 fitting an int; 0 or -1 */

/* ---- options.c */
int dl_addr_parse(const char *text, struct dl_addr *a);
void dl_options_defaults(struct dlock_options *o);

/* ---- holds.c (caller holds h->mu) */
struct dl_hold *holds_find(struct dl_holds *t, const char *name, const char *owner, enum dl_mode mode);
/* Sets the count and token of a hold, creating it; count 0 removes it. 0, or -1 out of memory. */
int holds_set(struct dl_holds *t, const char *name, const char *owner, enum dl_mode mode, int count,
              unsigned long long token);
void holds_remove(struct dl_holds *t, struct dl_hold *hd);
/* Calls fn for every hold (fn may not add or remove holds). */
void holds_foreach(struct dl_holds *t, void (*fn)(struct dl_hold *hd, void *arg), void *arg);
void holds_clear(struct dl_holds *t);
int holds_count(const struct dl_hold *hd);        /* count, or DLOCK_ERR_LOST */

/* ---- req.c (caller holds h->mu unless said otherwise) */
/* A new request of kind with body (copied); NULL out of memory. Not locked. */
struct dl_req *req_new(enum dl_kind kind, const char *body, long long wait_ms);
void req_free(struct dl_req *r);
/* Sets the names and owner the request is about (copies them). 0 or -1. Not locked. */
int req_set_subject(struct dl_req *r, const char *const *names, int n, const char *owner);
/* Queues r and sends it when connected. */
void req_submit(struct dlock *h, struct dl_req *r);
/* Sends r on the current connection (h->up). */
void req_send(struct dlock *h, struct dl_req *r);
/* Waits until r is done or its deadline passed; returns its rc (r stays the caller's unless abandoned). */
int req_wait(struct dlock *h, struct dl_req *r);
/* Finishes r with rc: unlinks it and wakes its caller (or frees an abandoned one). */
void req_finish(struct dlock *h, struct dl_req *r, int rc);
/* The I/O thread got r's reply (line is parsed into rp). */
void req_on_reply(struct dlock *h, struct dl_req *r, const struct proto_reply *rp);
/* The connection broke while r was on its way. */
void req_on_drop(struct dlock *h, struct dl_req *r);
/* A new connection is up: send r again (resumed: on the same session). */
void req_on_reconnect(struct dlock *h, struct dl_req *r, int resumed);
struct dl_req *req_find(struct dlock *h, const char *tag);

/* ---- io.c */
/* Starts the I/O thread with every signal blocked. 0 or a DLOCK_ERR_*. */
int io_start(struct dlock *h);
/* Wakes the I/O thread (any thread, any lock state). */
void io_wake(struct dlock *h);
/* Queues bytes for the I/O thread to send (caller holds h->mu). 0 or -1. */
int io_queue(struct dlock *h, const char *data, size_t len);
/* Queues an event for the callback (caller holds h->mu). */
void io_event(struct dlock *h, enum dlock_event_type type, const char *name, const char *owner,
              enum dl_mode mode, unsigned long long token, const char *reason);
/* Marks a hold lost and queues its event (caller holds h->mu); no-op if it already was. */
void io_hold_lost(struct dlock *h, struct dl_hold *hd, const char *reason);

#endif
