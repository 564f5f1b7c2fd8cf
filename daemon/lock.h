/* lock.h - locks: the local view of this daemon's holds and waits, kept in
 * step with Redis, where every change is one script. */
#ifndef DLOCKD_LOCK_H
#define DLOCKD_LOCK_H

#include <stdint.h>
#include <sys/queue.h>

#include "deadline.h"
#include "proto.h"

struct dlockd;
struct req;
struct session;
struct conn;

#define HID_MAX (1 + 16 + 1 + PROTO_STR_MAX) /* mode, session, ':', owner */
#define HOLD_KEY_MAX (PROTO_NAME_MAX + HID_MAX + 8)

/* A hold of a session on a name in one mode. */
struct hold {
    struct session *s;
    char key[HOLD_KEY_MAX];   /* name "\n" hid: key in d->holds */
    char name[PROTO_NAME_MAX + 1];
    char hid[HID_MAX + 1];
    char token[24];
    long long count;
    uint64_t since;           /* monotonic ms */
    uint64_t lease_end;       /* monotonic ms; 0 without lease= */
    struct deadline lease_dl; /* fires at lease_end */
    TAILQ_ENTRY(hold) in_session;
};

/* A request waiting in a name's queue in Redis. */
struct wait {
    struct dlockd *d;
    char wid[64];             /* key in d->waits and member of the queue */
    struct req *req;          /* the waiting request; NULL once abandoned */
    struct session *s;        /* NULL once abandoned */
    char name[PROTO_NAME_MAX + 1];
    char hid[HID_MAX + 1];
    char client[PROTO_STR_MAX + 1];
    int64_t lease;            /* lease= in ms, 0 for none */
    struct deadline timeout;  /* end of wait= */
    struct deadline retry;    /* when another daemon's lease in the way runs out */
    int queued;               /* lock.lua put it in the queue */
    int cancelling;           /* a cancel script is in flight */
    int timed_out;            /* wait= ran out, or nobody waits any more */
    int resubmit;             /* the cancel checks a lapsed entry: queue again */
    TAILQ_ENTRY(wait) in_session;
};

void lock_lock(struct req *r);
void lock_unlock(struct req *r);
void lock_status(struct req *r);

/* Releases every hold of s and abandons its waits; s is freed after. */
void lock_session_end(struct session *s, const char *lost_reason);
/* Abandons the waits that requests of c started. */
void lock_conn_closed(struct conn *c);
/* A grant published by another daemon for one of our waiters. */
void lock_on_message(struct dlockd *d, const char *msg);
/* The renewal found the hold gone from Redis. */
void lock_hold_lost(struct dlockd *d, const char *key, const char *reason);
/* The renewal found the queue entry of a wait gone: it may have been granted. */
void lock_wait_lapsed(struct dlockd *d, const char *wid);

/* Redis keys of a name: fills keys[0..4] (each KEY_MAX bytes). */
#define KEY_MAX (PROTO_NAME_MAX + 64)
void lock_keys(struct dlockd *d, const char *name, char keys[5][KEY_MAX]);

#endif
