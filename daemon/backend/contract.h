/* contract.h - the C side of the contract with the Lua scripts: the Redis keys of a name, the ARGV of each
 * operation, and every reply decoded into typed structs (scripts/common.lua is the Lua side). */
#ifndef DLOCKD_CONTRACT_H
#define DLOCKD_CONTRACT_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "proto.h"
#include "scripts.h"

struct dlockd;

#define CONTRACT_SUFFIXES "hxqwtmlk"     /* the keys of a name, in the order of KEYS, see scripts/common.lua */
#define CONTRACT_NAME_KEYS 8             /* letters in CONTRACT_SUFFIXES */
#define CONTRACT_RENEW_SUFFIXES "hxqwmk" /* the keys of a name a renewal moves on, see scripts/renew.lua */
#define CONTRACT_RENEW_KEYS 6            /* letters in CONTRACT_RENEW_SUFFIXES */
#define CONTRACT_KEY_MAX (PROTO_NAME_MAX + 64)   /* a key with its NUL */
#define CONTRACT_LIST_MAX (PROTO_MAX_NAMES * 24) /* a comma-separated list of one number per name */
#define CONTRACT_ARGS_MAX 12                     /* ARGV of one operation, at most (acquire.lua's) */

/*
 * Formats the Redis key of name with suffix (a letter of CONTRACT_SUFFIXES)
 * under prefix into buf. Returns its length.
 */
size_t contract_key(char *buf, size_t len, const char *prefix, const char *name, char suffix);

/* Formats the key of the record of session sid (scripts/session.lua) into buf. Returns its length. */
size_t contract_session_key(char *buf, size_t len, const char *prefix, const char *sid);

/* Formats the key that daemon id writes before each WAIT of min-replicas-ack (ack.c) into buf. Returns its length. */
size_t contract_ack_key(char *buf, size_t len, const char *prefix, const char *id);

/* --- ARGV of the batch script and of its operations */

#define CONTRACT_HEAD 4 /* the batch's own arguments, before its operations' */

/*
 * Fills head[0..CONTRACT_HEAD) with the batch's own ARGV: key prefix, the
 * calling daemon's id, deadline (Redis time in ms, "0" for none), number of
 * operations.
 */
void contract_batch_head(const char **head, const char *prefix, const char *id, const char *deadline,
                         const char *nops);

/* An operation's part of the batch's ARGV; v points into the caller's strings and the counts. */
struct contract_frame {
    int n;                                              /* strings in v */
    const char *v[4 + PROTO_MAX_NAMES + CONTRACT_ARGS_MAX]; /* in the batch script's order */
    char nnames[16], nargs[16];                         /* the counts, formatted */
};

/* The ARGV of one operation; v points into the caller's strings and num. */
struct contract_args {
    int n;                                /* strings in v */
    const char *v[CONTRACT_ARGS_MAX];     /* the arguments, in the script's order */
    char num[CONTRACT_ARGS_MAX][24];      /* the numbers among them, formatted */
    const char *record;                   /* the key of the session's record it carries (LOCK, UNLOCK), or NULL */
};

/* What a LOCK or ACQUIRE asks of Redis. */
struct contract_lock {
    const char *who;       /* session:owner */
    char mode;             /* x or s (LOCK only) */
    const char *client;    /* its session's name */
    const char *wid;       /* the waiter it is, should it queue */
    int wait;              /* 1 to queue when refused */
    long long ttl;         /* Redis lease of a grant now, ms */
    long long lease;       /* lease recorded with the hold, ms */
    int bounded;           /* 1 with lease= */
    long long qttl;        /* lease of the queue entries, ms */
    long long permits;     /* ACQUIRE only */
    long long limit;       /* ACQUIRE only */
    const char *known;     /* per name '1' when the daemon knows of a hold or wait of who on it, else '0' */
    long long ends;        /* Redis time (ms) its wait ends, 0 for never: its queue entries end by then */
};

/*
 * Fills f with operation op's part of the batch's ARGV: its name, the
 * number of its names (PROTO_MAX_NAMES at most), the names, 1 when it
 * carries its session's record (args->record, declared in KEYS after its
 * names' keys) else 0, the number of its arguments and the arguments (args
 * NULL for none). An operation that carries its record indexes there what
 * it grants, queues and releases (scripts/common.lua): never with Redis
 * Cluster, where the record is in a slot of its own.
 */
void contract_op_frame(struct contract_frame *f, enum op_id op, int nnames, const char *const *names,
                       const struct contract_args *args);

/* Fills a with the ARGV of a LOCK (scripts/lock.lua) of l. */
void contract_lock_args(struct contract_args *a, const struct contract_lock *l);
/* Fills a with the ARGV of an ACQUIRE (scripts/acquire.lua) of l. */
void contract_acquire_args(struct contract_args *a, const struct contract_lock *l);
/*
 * Fills a with the ARGV of an UNLOCK (scripts/unlock.lua): who drops count
 * counts (every one when all) of its hold in mode (x, s, p, or '\0' for
 * exclusive if held, else shared); token "" skips the token check; with
 * delay > 0 the hold stays, ownerless, that long. known has one '1' or
 * '0' per name: whether the daemon knows of the hold (a hold it does not
 * know of was granted to a request not answered yet: not the client's to
 * release). unindex (NULL for none) likewise: whether a hold that ends
 * leaves the record a->record, set after this.
 */
void contract_unlock_args(struct contract_args *a, const char *who, char mode, int all, const char *token,
                          long long count, long long delay, const char *known, const char *unindex);
/* Fills a with the ARGV of a CANCEL (scripts/cancel.lua) of waiter wid for hid; check only confirms a grant. */
void contract_cancel_args(struct contract_args *a, const char *wid, const char *hid, int check);
/*
 * Fills a with the ARGV of an ADOPT (scripts/adopt.lua): lease ms, the hids
 * of its names, and the waiters the session had queued for them ("-" for
 * none), both space-separated, to: "" to make the holds this daemon's,
 * else the daemon to hand back those that are this daemon's, and from: the
 * daemon the session's record named (a hold another one has fails it all).
 */
void contract_adopt_args(struct contract_args *a, long long lease, const char *hids, const char *wids,
                         const char *to, const char *from);
/*
 * Fills a with the ARGV of a REASSERT (scripts/reassert.lua): the hold hid
 * with its token and count, its Redis lease from now and the lease recorded
 * with it (ms), bounded (1 with lease=), its client. The strings are not copied.
 */
void contract_reassert_args(struct contract_args *a, const char *hid, const char *token, long long count,
                            long long ttl, long long lease, int bounded, const char *client);
/* Fills a with the ARGV of a LATCH (scripts/latch.lua): op create, countdown or read, with n and ttl ms. */
void contract_latch_args(struct contract_args *a, const char *op, long long n, long long ttl);

/* --- replies */

enum contract_status {
    CONTRACT_OK,
    CONTRACT_BUSY,
    CONTRACT_WAIT,
    CONTRACT_WRONGTYPE,
    CONTRACT_MISMATCH,
    CONTRACT_DEADLOCK,
    CONTRACT_NOTHELD,
    CONTRACT_CANCELLED,
    CONTRACT_QUEUED,
    CONTRACT_GRANTED,
    CONTRACT_GONE,
    CONTRACT_LATE,    /* the batch started after its deadline and changed nothing */
    CONTRACT_UNKNOWN, /* anything else */
};

/* A grant: of a waiter in a batch's grants, or of the operation that answers it. */
struct contract_grant {
    char wid[64];                      /* the waiter granted; "" in an operation's reply */
    char tokens[CONTRACT_LIST_MAX];    /* fencing token of each name */
    char counts[CONTRACT_LIST_MAX];    /* count of each name (permits held) */
    long long free;                    /* permits left free, of a semaphore */
    long long left;                    /* ms its queue entry had left (-1: none); batch grants only */
};

/* One holder of a STATUS reply, valid while its reply is. */
struct contract_holder {
    const char *hid;       /* mode, session id, ':', owner */
    const char *client;    /* its session's name */
    long long count;       /* reentry count, or permits */
    long long token;
    long long held_ms;
    int orphaned;          /* an expired session's hold kept for lock-delay */
};

/* An operation's reply. Which fields are set depends on the operation and status. */
struct contract_reply {
    redisReply view;                   /* the operation's part of the batch's reply: its status, then its fields */
    enum contract_status status;
    char text[16];                     /* the status as Redis sent it */
    union {
        struct contract_grant grant;   /* LOCK, ACQUIRE: OK; CANCEL: GRANTED */
        struct {
            char holder[PROTO_STR_MAX + 1]; /* LOCK: client of the hold in the way, "-" when none or orphaned */
            long long ttl;             /* LOCK: ms its lease has left */
            long long free;            /* ACQUIRE: permits free */
        } busy;                        /* LOCK, ACQUIRE: BUSY */
        long long retry_ms;            /* LOCK, ACQUIRE: WAIT; POKE: OK; -1 when nothing of another daemon is in the way */
        char name[PROTO_NAME_MAX + 1]; /* WRONGTYPE, NOTHELD: the name */
        long long limit;               /* ACQUIRE: MISMATCH, the semaphore's limit */
        struct {
            char counts[CONTRACT_LIST_MAX]; /* count left of each name */
            char modes[CONTRACT_LIST_MAX];  /* mode of each hold, comma-separated */
            long long free;            /* permits free, of a semaphore */
        } unlock;                      /* UNLOCK: OK */
        struct {
            long long count;
            long long ttl;             /* ms, -1 without a latch */
            int created;               /* 1 when this call made it */
        } latch;                       /* LATCH: OK */
        struct {
            char kind[16];             /* "lock", "semaphore", "latch" or "" for nothing */
            long long waiters, limit, free, latch_count;
            long long more;            /* holds not listed */
            int nholders;              /* listed: see contract_holder */
            const redisReply *rep;     /* where they are */
            size_t first;
        } state;                       /* STATUS: OK, what the name is */
        struct {
            const redisReply *rep;     /* see contract_adopted */
            size_t first;
        } adopt;                       /* ADOPT: OK */
        struct {
            char outcome[16];          /* "kept", "restored" or "lost" */
        } reassert;                    /* REASSERT: OK */
        struct {
            long long count;           /* holds freed: see contract_forced */
            int more;                  /* 1 when holds are left (FORCE_MAX in force.lua) */
            const redisReply *rep;     /* where they are */
            size_t first;
        } force;                       /* FORCE: OK */
    };
};

/* The batch script's reply, valid while its redisReply is. */
struct contract_batch {
    enum contract_status status;       /* OK, or LATE */
    long long now;                     /* Redis time, ms; 0 when not known */
    const char *more;                  /* names with more to hand on, space-separated */
    long long ngrants;
    const redisReply *rep;
    size_t next;                       /* where the reply of operation next_op starts in rep */
    int next_op;
};

/* What an operation's caller gets: its reply, or NULL when there was none. */
typedef void contract_cb(struct dlockd *d, const struct contract_reply *rep, void *arg);

/* Decodes the head of the batch script's reply rep into b. */
void contract_batch(struct contract_batch *b, const redisReply *rep);
/* Decodes grant i (from 0, below b->ngrants) of b into g. */
void contract_batch_grant(const struct contract_batch *b, long long i, struct contract_grant *g);
/* Decodes the reply of operation i of b, which ran op, into r (fastest in the order of i). Returns r, or
 * NULL when it is malformed. */
const struct contract_reply *contract_op_reply(struct contract_batch *b, int i, enum op_id op,
                                               struct contract_reply *r);
/* Holder i (from 0, below r->state.nholders) of a STATUS reply. */
struct contract_holder contract_holder(const struct contract_reply *r, int i);
/* A hold an ADOPT found, valid while its reply is. */
struct contract_adopted {
    const char *token;     /* "" when the hold is gone */
    long long count;
    long long left;        /* ms to the end of its lease=, -1 without one */
};

/* The hold of name i (from 0) of an ADOPT reply. */
struct contract_adopted contract_adopted(const struct contract_reply *r, int i);

/* A session's record, as scripts/session.lua "get" returns it; strings valid while its reply is. */
struct contract_record {
    const char *daemon;    /* the daemon that has it */
    const char *client;    /* client name */
    const char *hash;      /* SHA-256 of its secret, hex */
    long long ttl;         /* ms */
    int nindex;            /* entries: see contract_record_next */
    int killed;            /* ended by an operator's KILL on the daemon it names */
    const redisReply *rep;
};

/* Record field names: one letter each; index entries are "i<hid> <name>". */
#define CONTRACT_REC_DAEMON "d"
#define CONTRACT_REC_CLIENT "n"
#define CONTRACT_REC_TTL "t"
#define CONTRACT_REC_HASH "k"
#define CONTRACT_REC_PEER "p"
#define CONTRACT_REC_INDEX 'i'
#define CONTRACT_REC_KILLED "x" /* ended by an operator's KILL */

/* Decodes rep into rec. Returns 0, or -1 when there is no record (or it names no daemon). A
 * record that ended has a daemon and nothing else: hash "" and ttl 0 (session.lua del). */
int contract_record(const redisReply *rep, struct contract_record *rec);
/*
 * Copies the first index entry of rec at or after *pos (0 for the first) and
 * moves *pos past it: the hold id into hid, the name into name, the token of
 * its hold (0: not granted when it was written) into *token and the wid of
 * its waiter, if it waited, into wid ("" for none). Returns 0, 1 when that
 * entry is malformed (skipped), or -1 when none is left.
 */
int contract_record_next(const struct contract_record *rec, size_t *pos, char *hid, size_t hidlen, char *name,
                         size_t namelen, unsigned long long *token, char *wid, size_t widlen);
/*
 * Formats a change of an index entry for scripts/session.lua into buf:
 * added ("+i<hid> <name>"), deleted (token NULL: "-i<hid> <name>") or
 * given a value ("=<token> i<hid> <name>": a token, or "w" and a wid).
 */
void contract_record_change(char *buf, size_t len, int add, const char *token, const char *hid, const char *name);

/* Hold i (from 0, below r->force.count) that a FORCE reply freed: its hid and token, valid while r is. */
void contract_forced(const struct contract_reply *r, long long i, const char **hid, const char **token);

/*
 * Sets *item to the index (from 0) of the pair of ARGV of the j-th lease
 * (from 0) that a renewal's reply rep reports gone (scripts/renew.lua).
 * Returns 0, or -1 when it reports fewer.
 */
int contract_renew_gone(const redisReply *rep, size_t j, long long *item);

#endif
