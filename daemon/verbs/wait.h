/* wait.h - a LOCK or ACQUIRE from the moment it is sent to Redis until it is
 * answered: granted, refused, queued and then granted, timed out or cancelled. */
#ifndef DLOCKD_WAIT_H
#define DLOCKD_WAIT_H

#include <stdint.h>
#include <sys/queue.h>

#include "contract.h"
#include "deadline.h"
#include "deadlock.h"
#include "hold.h"
#include "proto.h"

struct dlockd;
struct req;
struct session;

enum wait_kind { WAIT_LOCK, WAIT_SEM };

/* Where the wait is in Redis (wait.c `phase_moves` lists the moves). */
enum wait_phase {
    WAIT_SENDING,    /* the script that grants, refuses or queues it is (about to be) in flight */
    WAIT_QUEUED,     /* that script put it in the queues */
    WAIT_CANCELLING, /* queued, and a cancel script is in flight */
};

/* What is to become of it when Redis answers (wait.c `intent_moves` lists the moves).
 * Apart from the phase: a client can give up, or a renewal find the entry
 * lapsed, at any phase, and the answer in flight decides what that means. */
enum wait_intent {
    WAIT_WANTED,    /* its request waits for the grant */
    WAIT_RECHECK,   /* the renewal found its queue entry lapsed: the cancel checks it, then it queues again */
    WAIT_QUITTING,  /* its connection QUITs: cancel, keeping the request until answered */
    WAIT_ABANDONED, /* timed out, or nobody waits any more */
};

/*
 * What answers a wait's request in its place: a LOCK across cluster slots
 * (multi.c), of which the wait is one slot. granted is told tokens and
 * counts in the wait's order; failed, once, that the request fails or goes
 * (r NULL when nobody waits), before r's answer.
 */
struct wait_parent {
    void (*granted)(void *arg, struct req *r, char *const *tokens, char *const *counts);
    void (*failed)(void *arg, struct req *r);
};

/* Who writes a wait's names into its session's record (record.h). */
enum wait_index {
    WAIT_INDEX_DAEMON,  /* this daemon, before it is sent and once granted */
    WAIT_INDEX_REDIS,   /* its LOCK carries the record: Redis indexes a grant or queue entry with it */
    WAIT_INDEX_GRANTED, /* the same, and its LOCK was granted at once: the record has the token */
    WAIT_INDEX_NONE,    /* the same, and its LOCK was refused: nothing was written */
};

struct wait {
    struct dlockd *d;
    enum wait_kind kind;
    char wid[64];             /* key in d->waits and member of the queues */
    struct req *req;          /* the request to answer; NULL once nobody waits */
    struct session *s;        /* NULL once abandoned */
    const char *hid;          /* the hold it asks for */
    const char *client;       /* its session's name */
    int64_t lease;            /* lease= in ms, 0 for none */
    int64_t wait_ms;          /* wait=: 0 never queues; PROTO_WAIT_INF */
    long long k;              /* counts asked: 1, or permits */
    long long limit;          /* semaphore limit */
    struct deadline timeout;  /* end of wait= */
    struct deadline retry;    /* when a lease nobody here releases runs out */
    enum wait_phase phase;    /* in Redis; moved only by wait_phase */
    enum wait_intent intent;  /* of its client; moved only by wait_intend */
    uint64_t submitted;       /* monotonic ms it was last sent to Redis */
    uint64_t ends;            /* monotonic ms its wait= ends, 0 for never */
    uint64_t cancel_until;    /* a cancel went unanswered: tried again until then (monotonic ms), else 0 */
    enum wait_index index;    /* who writes its names into its session's record */
    struct deadlock_edges edges; /* its edges in the wait-for graph, when a LOCK that may wait */
    const struct wait_parent *parent; /* answers instead of it, or NULL */
    void *parent_arg;
    TAILQ_ENTRY(wait) in_session;
    int nnames;
    char *names[];            /* then the strings of hid, client and names */
};

/* The Redis time (ms) at which w stops waiting, by the clock offset learnt from Redis; 0 for never or not known. */
long long wait_redis_ends(const struct wait *w);

/*
 * Checks max-waits and max-waiters for r (of session s) when it may wait
 * (LOCK, ACQUIRE or AWAIT with wait= other than 0). Returns 0, or -1 after
 * answering ERR LIMIT.
 */
int wait_within_limits(struct req *r, const struct session *s);
/* A wait for r's names (hid mode: x, s or p), added to r's session. */
struct wait *wait_new(struct req *r, struct session *s, enum wait_kind kind, char mode);
/* The same, for nnames of r's names. */
struct wait *wait_new_names(struct req *r, struct session *s, enum wait_kind kind, char mode, int nnames,
                            const char *const *names);
/*
 * Whether this daemon knows of a hold of session s and owner who
 * (session:owner) on name, or of a wait of theirs for it other than skip:
 * any, or with sending_only one whose script is in flight and may grant it
 * before a script sent now runs (and no hold the client was not told of).
 */
int wait_owner_knows(struct dlockd *d, const struct session *s, const char *who, const char *name,
                     const struct wait *skip, int sending_only);
/* The same, of waits only. */
int wait_owner_waits(const struct session *s, const char *who, const char *name, const struct wait *skip,
                     int sending_only);
/* Sends the wait to Redis; the reply answers its request. */
void wait_submit(struct wait *w);

/* Hands out the grants of a batch's reply: only batch.c calls it, once a reply. */
void wait_apply_grants(struct dlockd *d, const struct contract_batch *head);
/* A message on this daemon's channel: a grant, or a lease end to wait for. */
void wait_on_message(struct dlockd *d, const char *msg);
/* The renewal found the queue entry of a wait gone: it may have been granted. */
void wait_lapsed(struct dlockd *d, const char *wid);
/* Frees every wait left (shutdown, after the Redis link is gone). */
void wait_free_all(struct dlockd *d);
/* Cancels every wait of s. */
void wait_abandon_session(struct session *s);

#endif
