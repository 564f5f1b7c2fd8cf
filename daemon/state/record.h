/* record.h - a session's record in Redis, so that any daemon sharing the Redis can resume it. */
#ifndef DLOCKD_RECORD_H
#define DLOCKD_RECORD_H

#include "contract.h"

struct dlockd;
struct session;

/* What record_fetch found: rec is NULL when there is no record, or Redis did not answer (rep NULL). */
typedef void record_cb(struct dlockd *d, const struct contract_record *rec, int answered, void *arg);

/* What became of a record_put. */
enum record_put_result {
    RECORD_WRITTEN, /* the record is this daemon's */
    RECORD_REFUSED, /* another daemon has it, or ended it: nothing written */
    RECORD_UNKNOWN, /* Redis did not answer */
};
/* back: with a takeover written, the index entries with a token that the record has and the
 * put did not write (contract_record_next), else NULL. */
typedef void record_put_cb(struct dlockd *d, int result, const struct contract_record *back, void *arg);

/*
 * Writes s's record whole (daemon, client name, ttl, hash of its secret,
 * peer, and the index of its holds and waits) and makes it this daemon's: a
 * daemon that had it before is told to let go. For a session with a secret
 * only. With from NULL, only a record there is none of or this daemon's is
 * written (a refusal means another daemon has the session: it goes from
 * here); when Redis does not answer, the next renewal writes it again. With
 * from, a takeover: only a live record that names from (or this daemon
 * already) is. done (may be NULL) is called with arg and the result once
 * Redis answered or gave up; returns 0 then, or -1 when nothing was sent
 * (no secret, no link): done is not called.
 */
int record_put(struct session *s, const char *from, record_put_cb *done, void *arg);
/* Reads the record of session sid; cb is called once, never before this returns. Returns 0, or -1 (no link). */
int record_fetch(struct dlockd *d, const char *sid, record_cb *cb, void *arg);
/*
 * Notes that s may hold hid on name (add) or no longer does: sent with
 * the next call of the batch script, before it (record_flush), so that a
 * hold is in the record before Redis can grant it.
 */
void record_index(struct session *s, const char *hid, const char *name, int add);
/*
 * The key of s's record, in buf, for a LOCK or UNLOCK to carry (contract_args
 * record): Redis then indexes what it grants, queues and releases in the same
 * call. NULL when s has no record (no secret), or with Redis Cluster, where
 * the record is in a slot of its own: the changes are noted as below then.
 */
const char *record_carried(const struct session *s, char *buf, size_t len);
/* Notes the waiter queued for hid on name, so that a resume elsewhere can take it out of the queue. */
void record_waiting(struct session *s, const char *hid, const char *name, const char *wid);
/* Notes the token of a hold granted to s, so that a resume elsewhere can report it lost. */
void record_granted(struct session *s, const char *hid, const char *name, const char *token);
/* s's client heard the events kept for it here: the index entries of the holds they report go. */
void record_told(struct session *s);
/* Sends the index changes noted since the last call, in one call. */
void record_flush(struct dlockd *d);
/* Ends s's record: for a few seconds only its daemon is left, which a daemon
 * still holding a copy of s reads as "moved" (and nobody can resume it). */
void record_delete(struct session *s);
/* Moves on the expiry of the records of every session here with a secret (the renewal's cycle);
 * one Redis lost or never got is written again whole. */
void record_renew(struct dlockd *d);
/* Drops the index changes not sent (shutdown). */
void record_free_all(struct dlockd *d);

#endif
