/* session.h - client sessions: ttl, heartbeat, expiry, resume. */
#ifndef DLOCKD_SESSION_H
#define DLOCKD_SESSION_H

#include <stdint.h>
#include <sys/queue.h>

#include "dlockd.h"
#include "hooks.h"
#include "proto.h"

struct conn;
struct hold;
struct wait;
struct idrec;
struct dict;

#define SESSION_SECRET_LEN 32 /* hex characters of a secret: 128 bits */
#define SESSION_HASH_LEN 32   /* bytes of its SHA-256 */

struct session {
    struct dlockd *d;
    char id[DLOCKD_ID_LEN + 1];
    char *name;                   /* client name, shown to others */
    int64_t ttl;                  /* ms */
    uint64_t last_seen;           /* monotonic ms of the last request */
    struct deadline expiry;
    struct conn *conn;            /* attached connection, or NULL */
    TAILQ_HEAD(, hold) holds;
    TAILQ_HEAD(, wait) waits;
    int nholds;
    int nreserved;                /* names its waits may still be granted (wait.c) */
    int nwaits;                   /* its LOCK, ACQUIRE and AWAIT requests that may wait (wait.c, latch.c) */
    int nlatches;                 /* latches it created that have not ended (latch.c) */
    int hello;                    /* opened or named by HELLO: its end is logged */
    int has_secret;               /* HELLO gave it a secret: it can be resumed */
    int record_dirty;             /* its record in Redis may be missing or stale: written whole at the next renewal */
    int killed;                   /* ended by an operator's KILL: its record says so to the daemon that had it */
    int claiming;                 /* taken over, its record not yet this daemon's (resume.c): the
                                   * daemon the record names still has it, so it neither expires
                                   * here nor is written or dropped as a copy of it */
    unsigned char secret_hash[SESSION_HASH_LEN]; /* SHA-256 of that secret, never the secret */
    struct dict *ids;             /* id= -> struct idrec; NULL until the first id= */
    TAILQ_HEAD(, idrec) idlist;   /* the answered ones, oldest first */
    int64_t nids;                 /* in idlist */
    char *missed;                 /* event lines its client may not have read, for its next connection */
    size_t missed_len;
    int nmissed;
    char *untold;                 /* "hid name\n" of holds that ended while it had no connection: their
                                   * index entries stay in its record, so a resume elsewhere tells the LOST */
    size_t untold_len;
    struct dict *told;            /* "name token" of the holds its resume here told LOST, NULL for none:
                                   * the daemon it came from may write one back (daemon.c lost_elsewhere),
                                   * which is not told again; an "L" message adds none */
};

/* A new session with the given name and ttl (clamped), not attached. */
struct session *session_new(struct dlockd *d, const char *name, int64_t ttl);
struct session *session_find(struct dlockd *d, const char *id);
/*
 * A session resumed from its record in Redis: id, name, ttl and the hash
 * of its secret as the record has them (hash: hex), not attached. NULL when
 * the hash is malformed or a session with that id is here already.
 */
struct session *session_resume(struct dlockd *d, const char *id, const char *name, int64_t ttl, const char *hash);
/* 1 when secret hashes to hash (hex), compared in constant time. */
int session_secret_matches(const char *secret, const char *hash);
/* Remembers that a resume here told s LOST of name's hold with token (at most one per index entry
 * of its record), and whether it did. */
void session_remember_lost(struct session *s, const char *name, unsigned long long token);
int session_lost_told(const struct session *s, const char *name, unsigned long long token);
/* Frees s here only, leaving its holds and record in Redis (it moved to another daemon). */
void session_drop(struct session *s);
/*
 * The live session id when secret is its secret (compared in constant time,
 * after hashing whatever the answer will be), else NULL.
 */
struct session *session_check(struct dlockd *d, const char *id, const char *secret);
/*
 * Gives s a new secret (128 random bits), keeping only its SHA-256; the old
 * one no longer resumes s. The secret, in hex, goes to out and nowhere else.
 */
void session_new_secret(struct session *s, char out[SESSION_SECRET_LEN + 1]);
void session_set_name(struct session *s, const char *name);
/* Clamps ttl to session-ttl-min..session-ttl-max. */
int64_t session_clamp_ttl(struct dlockd *d, int64_t ttl);
/*
 * How long, in ms from now, the Redis keys of s's holds and waits must live
 * unrenewed: lock-lease, or to the end of s's ttl when that is later and s
 * can be resumed on another daemon (it has a secret). s may be NULL.
 */
long long session_redis_lease(const struct dlockd *d, const struct session *s);
/* Records a request: the session lives another ttl from now. */
void session_touch(struct session *s);
/* Sets the ttl (clamped), counted from the last request. */
void session_set_ttl(struct session *s, int64_t ttl);
/* Frees every session and its holds here, leaving Redis as it is (shutdown). */
void session_free_all(struct dlockd *d);
/* Notes that the hold hid on name ended while s had no connection (its record keeps it). */
void session_untold(struct session *s, const char *hid, const char *name);
/* Releases every hold, cancels every wait and frees s. */
void session_end(struct session *s, enum session_end why);

#endif
