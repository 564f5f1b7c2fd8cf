/* dlockd.h - the daemon context that every module receives. */
#ifndef DLOCKD_H
#define DLOCKD_H

#include <stdint.h>
#include <sys/queue.h>

#include "config.h"
#include "deadline.h"
#include "stats.h"

#define DLOCKD_ID_LEN 16 /* hex characters of daemon and session ids */

struct event_base;
struct event;
struct dict;
struct deadlock;
struct redis;
struct server;
struct conn;
struct admin;
struct args;
struct idrec;
struct hooks;
struct batch_listener;
struct ack;
struct share;

TAILQ_HEAD(conn_list, conn);
TAILQ_HEAD(idrec_list, idrec);

struct dlockd {
    struct event_base *base;
    const struct hooks *hooks;  /* calls from the lower layers up (hooks.h) */
    struct config cfg;
    char id[DLOCKD_ID_LEN + 1]; /* this daemon, in wids and its pub/sub channel */
    struct server *server;      /* listeners */
    struct redis *redis;        /* the Redis link */
    struct batcher *batcher;    /* script operations of this turn of the loop (batch.c) */
    const struct batch_listener *batch_listener; /* what the layers above hear of each batch */
    struct ack *ack;            /* answers held for min-replicas-ack (ack.c); NULL before the first */
    struct deadlines *deadlines;
    struct event *renew_timer;  /* one timer renews every lease */
    struct event *watchdog;     /* feeds systemd's watchdog, when asked */
    struct admin *admin;        /* the admin endpoint (admin.c), or NULL */
    int ready;                  /* systemd was told READY=1 */
    struct args *args;          /* the command line, for reloads */
    struct dict *sessions;      /* session id -> struct session */
    struct dict *waits;         /* wid -> struct wait */
    struct deadlock *deadlock;  /* the waits of each owner: the wait-for graph */
    struct dict *names;         /* name -> struct lname: the holds, by name */
    uint64_t nholds;            /* holds of all sessions */
    uint64_t nreserved;         /* names that waits here may still be granted (wait.c) */
    uint64_t nwaiting;          /* LOCK, ACQUIRE and AWAIT requests that may wait (wait.c, latch.c) */
    uint64_t nlatches;          /* latches created here that have not ended (latch.c) */
    int64_t redis_offset;       /* Redis time minus monotonic ms, a lower bound (hold.c) */
    uint64_t redis_offset_at;   /* monotonic ms it was last learnt; 0 before the first reply */
    struct dict *latches;       /* name -> struct latch: its awaiters here, its creator if created here */
    struct dict *latch_peers;   /* client address -> struct latch_peer: its latches created here (latch.c) */
    struct idrec_list ids;      /* remembered id= replies of all sessions, oldest first (reqid.c) */
    int64_t nids;               /* in ids */
    struct conn_list conns;     /* open connections */
    int nconns;
    struct conn_list advancing; /* connections whose next step is due (conn.c) */
    struct conn_list reaping;   /* connections to free on the next turn of the loop */
    struct event *advance;      /* runs d->advancing */
    struct event *reap;         /* frees d->reaping */
    int censuses;               /* LIST and /locks collections running (census.c) */
    uint64_t next_wait;         /* numbers waits for their wid */
    uint64_t nreqs;             /* requests being served */
    uint64_t nqueued;           /* lines of all connections waiting their turn (max-requests) */
    struct share *share;        /* the turns of STATUS, LIST and SESSIONS (share.c) */
    const char *silence;        /* while batch.c answers operations that waited gate-wait: why; else NULL */
    uint64_t reqs_peak;         /* the most at once since the heap was last trimmed */
    uint64_t started;           /* monotonic ms */
    struct stats stats;
};

/* The text of an ERR BACKEND for a call Redis did not answer: the one place it is written. */
#define NO_ANSWER "Redis did not answer in time"

/* Why an operation had no answer from Redis, for its ERR BACKEND (d->silence, else NO_ANSWER). */
static inline const char *dlockd_silence(const struct dlockd *d)
{
    return d->silence ? d->silence : NO_ANSWER;
}

#endif
