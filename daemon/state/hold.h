/* hold.h - the local view of the holds of this daemon's sessions, in step with Redis. */
#ifndef DLOCKD_HOLD_H
#define DLOCKD_HOLD_H

#include <stdint.h>
#include <sys/queue.h>

#include "deadline.h"
#include "contract.h"
#include "proto.h"

struct dlockd;
struct session;

#define HID_MAX (1 + 16 + 1 + PROTO_STR_MAX) /* mode, session, ':', owner */
#define TOKEN_MAX 20 /* a token with its NUL: Redis integers have at most 19 digits */

/* The lease= of a hold: it is released when the deadline fires. */
struct hold_lease {
    struct deadline dl;
    struct hold *h;
};

/* A hold of a session and owner on a name in one mode (x, s, or p for permits). */
struct hold {
    struct session *s;
    struct lname *ln;          /* the holds of this name here; ln->name is the hold's name */
    struct hold_lease *lease;  /* NULL without lease= */
    long long count;           /* reentry count, or permits */
    TAILQ_ENTRY(hold) in_session;
    TAILQ_ENTRY(hold) in_name;
    unsigned long long token;  /* fencing token of the grant */
    uint64_t since;            /* monotonic ms of the grant that created it, for the hold time histogram */
    int untold;                /* made by one slot of a LOCK across slots not answered yet (multi.c) */
    char hid[];                /* mode, session id, ':', owner */
};

/* The holds of one name on this daemon, found by name in d->names. */
struct lname {
    TAILQ_HEAD(, hold) holds;
    const char *name;          /* d->names' copy of the key */
};

/*
 * Runs operation op of the batch script on names, with a deadline: see
 * batch_op, which it calls.
 */
int hold_script(struct dlockd *d, enum op_id op, int nnames, const char *const *names,
                const struct contract_args *args, contract_cb *cb, contract_cb *late, void *arg);

/* Records a grant: a new hold, or a new count of one. */
void hold_set(struct session *s, const char *name, const char *hid, const char *token, long long count,
              int64_t lease);
struct hold *hold_find(struct dlockd *d, const char *name, const char *hid);
/* Forgets h locally (Redis is not told). */
void hold_remove(struct dlockd *d, struct hold *h);
/* Sets a hold's count from Redis's answer; 0 forgets it (unindexed: Redis took it out of its session's record). */
void hold_count(struct dlockd *d, const char *name, const char *hid, long long count, int unindexed);
/* The renewal found a hold gone from Redis: unless it has been granted
 * again since (another token), tells its session * LOST and forgets it. */
void hold_lost(struct dlockd *d, const char *name, const char *hid, const char *token, const char *reason);
/* The holds on name here, or NULL. */
struct lname *hold_name(struct dlockd *d, const char *name);

/*
 * Drops a hold in Redis and hands the name on, with nobody to answer:
 * every count when all, else k counts; token "" skips the token check.
 * With delay > 0 the hold stays, ownerless, that long (lock-delay).
 */
void hold_release(struct dlockd *d, const char *name, const char *hid, const char *token, int all, long long k,
                  int64_t delay);
/* Whether the hold hid on name is here with token: not ended, nor granted again, since. */
int hold_has(struct dlockd *d, const char *name, const char *hid, const char *token);
/*
 * Takes back the k counts a grant (token) added that was never answered:
 * here, unless the hold ended since, and in Redis (hold_release), then
 * cb(arg) once Redis answered or failed to (cb may be NULL). Returns -1,
 * cb not called, when the link is down.
 */
int hold_undo(struct dlockd *d, const char *name, const char *hid, const char *token, long long k, contract_cb *cb,
              void *arg);
/* Releases every hold of s (forgetting them), with lock-delay when it expired. */
void hold_release_session(struct session *s, int expired);

#endif
