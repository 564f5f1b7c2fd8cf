/* check_contract.c - daemon/backend/contract.c against the batch script in a real redis-server: the keys,
 * each operation's ARGV and the decoded replies agree with the Lua side. */
#include <check.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract.h"
#include "scripts.h"
#include "harness.h"

#define PREFIX "t:"
#define DAEMON "d1"
#define WHO_A "0123456789abcdef:a"
#define WHO_B "fedcba9876543210:b"
#define MAX_NAMES 2

static redisContext *rc;
static redisReply *last; /* the reply the decoded structs point into */

static void setup(void)
{
    h_setup_redis();
    rc = redisConnect("127.0.0.1", R->port);
    ck_assert_ptr_nonnull(rc);
    ck_assert_int_eq(rc->err, 0);
}

static void teardown(void)
{
    if (last)
        freeReplyObject(last);
    last = NULL;
    redisFree(rc);
    h_teardown();
}

/* Loads the batch library into this test's Redis, as redis.c does when it connects. */
static void load_library(void)
{
    redisReply *r = redisCommand(rc, "FUNCTION LOAD REPLACE %s", scripts[SCRIPT_BATCH].body);

    ck_assert_ptr_nonnull(r);
    ck_assert_msg(r->type == REDIS_REPLY_STRING && strcmp(r->str, scripts[SCRIPT_BATCH].function) == 0,
                  "FUNCTION LOAD: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
}

/*
 * Runs one operation on names as batch.c sends it: KEYS from contract_key,
 * ARGV the batch's head and the operation's frame. Decodes the batch's
 * reply into *head and returns the operation's reply in *r.
 */
static const struct contract_reply *run_at(const char *deadline, enum op_id op, int nnames, const char *const *names,
                                           const struct contract_args *a, struct contract_batch *head,
                                           struct contract_reply *r)
{
    char keys[MAX_NAMES * CONTRACT_NAME_KEYS][CONTRACT_KEY_MAX], nk[16];
    const char *argv[4 + MAX_NAMES * CONTRACT_NAME_KEYS + CONTRACT_HEAD + MAX_NAMES + 4 + CONTRACT_ARGS_MAX];
    struct contract_frame f;
    int argc = 0;

    ck_assert_int_le(nnames, MAX_NAMES);
    load_library();
    argv[argc++] = "FCALL";
    argv[argc++] = scripts[SCRIPT_BATCH].function;
    snprintf(nk, sizeof(nk), "%d", nnames * CONTRACT_NAME_KEYS + (a && a->record));
    argv[argc++] = nk;
    for (int i = 0; i < nnames; i++)
        for (int j = 0; j < CONTRACT_NAME_KEYS; j++) {
            char *key = keys[i * CONTRACT_NAME_KEYS + j];
            contract_key(key, CONTRACT_KEY_MAX, PREFIX, names[i], CONTRACT_SUFFIXES[j]);
            argv[argc++] = key;
        }
    if (a && a->record)
        argv[argc++] = a->record;
    contract_batch_head(argv + argc, PREFIX, DAEMON, deadline, "1");
    argc += CONTRACT_HEAD;
    contract_op_frame(&f, op, nnames, names, a);
    for (int i = 0; i < f.n; i++)
        argv[argc++] = f.v[i];
    if (last)
        freeReplyObject(last);
    last = redisCommandArgv(rc, argc, argv, NULL);
    ck_assert_ptr_nonnull(last);
    ck_assert_msg(last->type == REDIS_REPLY_ARRAY, "reply type %d: %s", last->type,
                  last->type == REDIS_REPLY_ERROR ? last->str : "");
    contract_batch(head, last);
    return contract_op_reply(head, 0, op, r);
}

static const struct contract_reply *run(enum op_id op, const char *name, const struct contract_args *a,
                                        struct contract_batch *head, struct contract_reply *r)
{
    return run_at("0", op, 1, &name, a, head, r);
}

/* The LOCK of name by who, as wait.c fills it. */
static void lock_args(struct contract_args *a, const char *who, char mode, const char *wid, int wait)
{
    struct contract_lock l = {
        .who = who, .mode = mode, .client = who[0] == '0' ? "client-a" : "client-b", .wid = wid, .wait = wait,
        .ttl = 30000, .lease = 30000, .bounded = 0, .qttl = 30000, .known = "0",
    };

    contract_lock_args(a, &l);
}

static void acquire_args(struct contract_args *a, const char *who, const char *wid, long long permits,
                         long long limit)
{
    struct contract_lock l = {
        .who = who, .client = "client-a", .wid = wid, .ttl = 30000, .lease = 30000, .qttl = 30000,
        .permits = permits, .limit = limit, .known = "0",
    };

    contract_acquire_args(a, &l);
}

START_TEST(test_key)
{
    char buf[CONTRACT_KEY_MAX];

    ck_assert_uint_eq(contract_key(buf, sizeof(buf), "p:", "name", 'h'), strlen("p:{name}:h"));
    ck_assert_str_eq(buf, "p:{name}:h");
    ck_assert_int_eq((int)strlen(CONTRACT_SUFFIXES), CONTRACT_NAME_KEYS);
    ck_assert_int_eq((int)strlen(CONTRACT_RENEW_SUFFIXES), CONTRACT_RENEW_KEYS);
}
END_TEST

START_TEST(test_lock_busy_wait_unlock_grant)
{
    struct contract_args a;
    struct contract_batch head;
    struct contract_reply r;
    const struct contract_reply *p;
    char token[CONTRACT_LIST_MAX];

    lock_args(&a, WHO_A, 'x', DAEMON ".1", 0);
    p = run(OP_LOCK, "n", &a, &head, &r);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(head.status, CONTRACT_OK);
    ck_assert_int_gt(head.now, 0);
    ck_assert_int_eq(p->status, CONTRACT_OK);
    ck_assert_int_gt(atoll(p->grant.tokens), 0);
    ck_assert_str_eq(p->grant.counts, "1");
    snprintf(token, sizeof(token), "%s", p->grant.tokens);

    lock_args(&a, WHO_B, 'x', DAEMON ".2", 0);
    p = run(OP_LOCK, "n", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_BUSY);
    ck_assert_str_eq(p->busy.holder, "client-a");
    ck_assert_int_gt(p->busy.ttl, 0);
    ck_assert_int_le(p->busy.ttl, 30000);

    lock_args(&a, WHO_B, 'x', DAEMON ".3", 1);
    p = run(OP_LOCK, "n", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_WAIT);
    ck_assert_int_ge(p->retry_ms, -1);

    contract_unlock_args(&a, WHO_B, '\0', 0, "", 1, 0, "1", NULL);
    p = run(OP_UNLOCK, "n", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_NOTHELD);
    ck_assert_str_eq(p->name, "n");

    contract_unlock_args(&a, WHO_A, '\0', 0, token, 1, 0, "1", NULL);
    p = run(OP_UNLOCK, "n", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_OK);
    ck_assert_str_eq(p->unlock.counts, "0");
    ck_assert_str_eq(p->unlock.modes, "x");
    /* the unlock handed the name to the waiter: its grant is in the batch's head */
    ck_assert_int_eq(head.ngrants, 1);
    {
        struct contract_grant g;
        contract_batch_grant(&head, 0, &g);
        ck_assert_str_eq(g.wid, DAEMON ".3");
        ck_assert_int_gt(atoll(g.tokens), atoll(token));
        ck_assert_str_eq(g.counts, "1");
        /* -1, or what its queue entry had left of its lease when it took it over */
        ck_assert_int_ge(g.left, -1);
        ck_assert_int_le(g.left, 30000);
        snprintf(token, sizeof(token), "%s", g.tokens);
    }

    contract_cancel_args(&a, DAEMON ".3", "x" WHO_B, 1);
    p = run(OP_CANCEL, "n", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_GRANTED);
    ck_assert_str_eq(p->grant.tokens, token);
    ck_assert_str_eq(p->grant.counts, "1");
}
END_TEST

/* The value of index entry "i<hid> <name>" of record key, as a new string ("" when absent). */
static char *index_entry(const char *key, const char *hid, const char *name)
{
    char field[CONTRACT_KEY_MAX * 2];
    redisReply *r;
    char *v;

    snprintf(field, sizeof(field), "i%s %s", hid, name);
    r = redisCommand(rc, "HGET %s %s", key, field);

    ck_assert_ptr_nonnull(r);
    v = strdup(r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    return v;
}

static long long redis_int(const char *cmd, const char *key)
{
    redisReply *r = redisCommand(rc, "%s %s", cmd, key);
    long long n;

    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
    n = r->integer;
    freeReplyObject(r);
    return n;
}

/* A session record of this daemon at key, as HELLO writes it (only what the scripts look at). */
static void make_record(const char *key)
{
    freeReplyObject(redisCommand(rc, "HSET %s d " DAEMON, key));
    freeReplyObject(redisCommand(rc, "PEXPIRE %s 60000", key));
}

/* A LOCK or UNLOCK that carries its session's record indexes what it grants, queues and releases
 * there in the same call; a record that is gone stays gone. */
START_TEST(test_record_carried)
{
    const char *rec_a = PREFIX "{0123456789abcdef}:session", *rec_b = PREFIX "{fedcba9876543210}:session";
    struct contract_args a;
    struct contract_batch head;
    struct contract_reply r;
    const struct contract_reply *p;
    char token[CONTRACT_LIST_MAX], *v;

    make_record(rec_a);
    lock_args(&a, WHO_A, 'x', DAEMON ".1", 0);
    a.record = rec_a;
    p = run(OP_LOCK, "n", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_OK);
    snprintf(token, sizeof(token), "%s", p->grant.tokens);
    v = index_entry(rec_a, "x" WHO_A, "n");
    ck_assert_str_eq(v, token);
    free(v);

    /* B has no record: its queue entry is not indexed, and no record is made */
    lock_args(&a, WHO_B, 'x', DAEMON ".2", 1);
    a.record = rec_b;
    p = run(OP_LOCK, "n", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_WAIT);
    ck_assert_int_eq(redis_int("EXISTS", rec_b), 0);
    make_record(rec_b);
    lock_args(&a, WHO_B, 's', DAEMON ".3", 1);
    a.record = rec_b;
    p = run(OP_LOCK, "n", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_WAIT);
    v = index_entry(rec_b, "s" WHO_B, "n");
    ck_assert_str_eq(v, "w" DAEMON ".3");
    free(v);
    ck_assert_int_gt(redis_int("PTTL", rec_b), 0);

    /* on name m, nobody waits: unindex "0" keeps the entry (something else of the owner's is known
     * there), unindex "1" takes it out with the release */
    for (int drop = 0; drop < 2; drop++) {
        lock_args(&a, WHO_A, 'x', drop ? DAEMON ".6" : DAEMON ".4", 0);
        a.record = rec_a;
        p = run(OP_LOCK, "m", &a, &head, &r);
        ck_assert_int_eq(p->status, CONTRACT_OK);
        snprintf(token, sizeof(token), "%s", p->grant.tokens);
        a.v[a.n - 2] = "1"; /* known: a reentry, as the daemon sends it */
        p = run(OP_LOCK, "m", &a, &head, &r);
        ck_assert_str_eq(p->grant.counts, "2");
        contract_unlock_args(&a, WHO_A, 'x', 1, "", 1, 0, "1", drop ? "1" : "0");
        a.record = rec_a;
        p = run(OP_UNLOCK, "m", &a, &head, &r);
        ck_assert_int_eq(p->status, CONTRACT_OK);
        ck_assert_str_eq(p->unlock.counts, "0");
        v = index_entry(rec_a, "x" WHO_A, "m");
        ck_assert_str_eq(v, drop ? "" : token);
        free(v);
    }
}
END_TEST

START_TEST(test_two_names_and_cancel)
{
    const char *names[] = { "m1", "m2" };
    struct contract_args a;
    struct contract_batch head;
    struct contract_reply r;
    const struct contract_reply *p;
    struct contract_lock l = {
        .who = WHO_A, .mode = 's', .client = "client-a", .wid = DAEMON ".1", .ttl = 30000, .lease = 30000,
        .qttl = 30000, .known = "00",
    };

    contract_lock_args(&a, &l);
    p = run_at("0", OP_LOCK, 2, names, &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_OK);
    ck_assert_ptr_nonnull(strchr(p->grant.tokens, ','));
    ck_assert_str_eq(p->grant.counts, "1,1");

    lock_args(&a, WHO_B, 'x', DAEMON ".2", 1);
    p = run(OP_LOCK, "m1", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_WAIT);
    contract_cancel_args(&a, DAEMON ".2", "x" WHO_B, 1);
    p = run(OP_CANCEL, "m1", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_QUEUED);
    contract_cancel_args(&a, DAEMON ".2", "x" WHO_B, 0);
    p = run(OP_CANCEL, "m1", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_CANCELLED);

    p = run(OP_POKE, "m1", NULL, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_OK);
    ck_assert_int_ge(p->retry_ms, -1);
}
END_TEST

START_TEST(test_semaphore_and_status)
{
    struct contract_args a;
    struct contract_batch head;
    struct contract_reply r;
    const struct contract_reply *p;
    struct contract_holder h;

    acquire_args(&a, WHO_A, DAEMON ".1", 2, 3);
    p = run(OP_ACQUIRE, "sem", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_OK);
    ck_assert_int_gt(atoll(p->grant.tokens), 0);
    ck_assert_str_eq(p->grant.counts, "2");
    ck_assert_int_eq(p->grant.free, 1);

    acquire_args(&a, WHO_B, DAEMON ".2", 2, 3);
    p = run(OP_ACQUIRE, "sem", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_BUSY);
    ck_assert_int_eq(p->busy.free, 1);

    acquire_args(&a, WHO_B, DAEMON ".3", 1, 5);
    p = run(OP_ACQUIRE, "sem", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_MISMATCH);
    ck_assert_int_eq(p->limit, 3);

    p = run(OP_STATUS, "sem", NULL, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_OK);
    ck_assert_str_eq(p->state.kind, "semaphore");
    ck_assert_int_eq(p->state.limit, 3);
    ck_assert_int_eq(p->state.free, 1);
    ck_assert_int_eq(p->state.waiters, 0);
    ck_assert_int_eq(p->state.more, 0);
    ck_assert_int_eq(p->state.nholders, 1);
    h = contract_holder(p, 0);
    ck_assert_str_eq(h.hid, "p" WHO_A);
    ck_assert_str_eq(h.client, "client-a");
    ck_assert_int_eq(h.count, 2);
    ck_assert_int_gt(h.token, 0);
    ck_assert_int_ge(h.held_ms, 0);
    ck_assert_int_eq(h.orphaned, 0);

    contract_unlock_args(&a, WHO_A, 'p', 0, "", 1, 0, "1", NULL);
    p = run(OP_UNLOCK, "sem", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_OK);
    ck_assert_str_eq(p->unlock.counts, "1");
    ck_assert_str_eq(p->unlock.modes, "p");
    ck_assert_int_eq(p->unlock.free, 2);
}
END_TEST

START_TEST(test_latch)
{
    struct contract_args a;
    struct contract_batch head;
    struct contract_reply r;
    const struct contract_reply *p;

    contract_latch_args(&a, "create", 3, 60000);
    p = run(OP_LATCH, "l", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_OK);
    ck_assert_int_eq(p->latch.count, 3);
    ck_assert_int_gt(p->latch.ttl, 0);
    ck_assert_int_eq(p->latch.created, 1);

    contract_latch_args(&a, "countdown", 1, 0);
    p = run(OP_LATCH, "l", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_OK);
    ck_assert_int_eq(p->latch.count, 2);
    ck_assert_int_eq(p->latch.created, 0);

    p = run(OP_STATUS, "l", NULL, &head, &r);
    ck_assert_str_eq(p->state.kind, "latch");
    ck_assert_int_eq(p->state.latch_count, 2);
    ck_assert_int_eq(p->state.nholders, 0);

    lock_args(&a, WHO_A, 'x', DAEMON ".1", 0);
    p = run(OP_LOCK, "l", &a, &head, &r);
    ck_assert_int_eq(p->status, CONTRACT_WRONGTYPE);
    ck_assert_str_eq(p->name, "l");
}
END_TEST

START_TEST(test_late_batch)
{
    const char *name = "n";
    struct contract_args a;
    struct contract_batch head;
    struct contract_reply r;

    lock_args(&a, WHO_A, 'x', DAEMON ".1", 0);
    ck_assert_ptr_null(run_at("1", OP_LOCK, 1, &name, &a, &head, &r));
    ck_assert_int_eq(head.status, CONTRACT_LATE);
    ck_assert_int_gt(head.now, 0);
    ck_assert_int_eq(head.ngrants, 0);
}
END_TEST

/* renew.lua reports the pairs whose member is gone, counting from 1. */
START_TEST(test_renew_gone)
{
    char keys[CONTRACT_RENEW_KEYS][CONTRACT_KEY_MAX];
    const char *argv[3 + CONTRACT_RENEW_KEYS + 5];
    struct contract_args a;
    struct contract_batch head;
    struct contract_reply r;
    long long item;
    int argc = 0;
    char nk[16];

    lock_args(&a, WHO_A, 'x', DAEMON ".1", 0);
    ck_assert_int_eq(run(OP_LOCK, "n", &a, &head, &r)->status, CONTRACT_OK);
    argv[argc++] = "EVAL";
    argv[argc++] = scripts[SCRIPT_RENEW].body;
    snprintf(nk, sizeof(nk), "%d", CONTRACT_RENEW_KEYS);
    argv[argc++] = nk;
    for (int j = 0; j < CONTRACT_RENEW_KEYS; j++) {
        contract_key(keys[j], sizeof(keys[j]), PREFIX, "n", CONTRACT_RENEW_SUFFIXES[j]);
        argv[argc++] = keys[j];
    }
    argv[argc++] = "2";
    argv[argc++] = "x" WHO_B;
    argv[argc++] = "30000";
    argv[argc++] = "x" WHO_A;
    argv[argc++] = "60000";
    freeReplyObject(last);
    last = redisCommandArgv(rc, argc, argv, NULL);
    ck_assert_ptr_nonnull(last);
    ck_assert_int_eq(contract_renew_gone(last, 0, &item), 0);
    ck_assert_int_eq(item, 0);
    ck_assert_int_eq(contract_renew_gone(last, 1, &item), -1);
    /* A's hold, in the one-key form, has its lease and expiry moved on */
    ck_assert_int_gt(redis_int("PTTL", PREFIX "{n}:k"), 50000);
}
END_TEST

/* session.lua put by daemon me, taking over from from ("" for none), with the secret's hash
 * k: the reply, 1 for a string (written), 0 for a refusal. */
static long long session_put(const char *key, const char *from, const char *me)
{
    const char *argv[] = { "EVAL", scripts[SCRIPT_SESSION].body, "1", key, "put", PREFIX, "0123456789abcdef",
                           "30000", from, CONTRACT_REC_DAEMON, me, CONTRACT_REC_HASH, "aa" };
    long long v;

    freeReplyObject(last);
    last = redisCommandArgv(rc, sizeof(argv) / sizeof(argv[0]), argv, NULL);
    ck_assert_ptr_nonnull(last);
    if (from[0]) /* a takeover: "d", the old daemon, then index entries; or a refusal */
        ck_assert_msg(last->type == REDIS_REPLY_ARRAY || last->type == REDIS_REPLY_INTEGER, "put: type %d",
                      last->type);
    else
        ck_assert_msg(last->type == REDIS_REPLY_STRING || last->type == REDIS_REPLY_INTEGER, "put: type %d",
                      last->type);
    v = last->type == REDIS_REPLY_INTEGER ? last->integer : 1;
    return v;
}

static long long session_del(const char *key, const char *me)
{
    const char *argv[] = { "EVAL", scripts[SCRIPT_SESSION].body, "1", key, "del", me, "10000", "" };

    freeReplyObject(last);
    last = redisCommandArgv(rc, sizeof(argv) / sizeof(argv[0]), argv, NULL);
    ck_assert_ptr_nonnull(last);
    ck_assert_int_eq(last->type, REDIS_REPLY_INTEGER);
    return last->integer;
}

/* A takeover's put writes only a live record of the daemon it read (or its own already: a try
 * again); a plain put only a new record or its own. Whichever of a takeover and its old
 * daemon's delete (a QUIT) comes second changes nothing. */
START_TEST(test_session_claim)
{
    const char *key = PREFIX "s:{0123456789abcdef}";

    ck_assert_int_eq(session_put(key, "", "A"), 1); /* new */
    ck_assert_int_eq(session_put(key, "", "A"), 1); /* its own */
    ck_assert_int_eq(session_put(key, "", "B"), 0); /* another daemon's */
    ck_assert_int_eq(session_put(key, "C", "B"), 0); /* not the daemon read */
    ck_assert_int_eq(session_put(key, "A", "B"), 1); /* the takeover */
    ck_assert_int_eq(session_put(key, "A", "B"), 1); /* tried again */
    ck_assert_int_eq(session_del(key, "A"), 0);      /* A's QUIT after it: nothing */
    ck_assert_int_eq(session_put(key, "B", "C"), 1);
    ck_assert_int_eq(session_del(key, "C"), 1);      /* C's QUIT before B's takeover back */
    ck_assert_int_eq(session_put(key, "C", "B"), 0); /* ended: nothing */
    ck_assert_int_eq(session_put(key, "C", "C"), 0);
    ck_assert_int_eq(session_put(key, "", "B"), 0);
}
END_TEST

/* A takeover's put returns the record's index entries with a token that it does not write
 * itself (written back by the old daemon after the record was read): not a wait's, nor one
 * it writes. An index change with a token for a record another daemon has is told to that
 * daemon, not written. */
START_TEST(test_session_claim_back)
{
    const char *key = PREFIX "{0123456789abcdef}:session";
    const char *put[] = { "EVAL", scripts[SCRIPT_SESSION].body, "1", key, "put", PREFIX, "0123456789abcdef",
                          "30000", "A", CONTRACT_REC_DAEMON, "B", CONTRACT_REC_HASH, "aa", "ixs:o kept", "7" };
    const char *index[] = { "EVAL", scripts[SCRIPT_SESSION].body, "1", key, "index", "A", PREFIX, "1",
                            "=42 ixs:o late" };
    struct contract_record rec;
    char hid[64], name[64], wid[64];
    unsigned long long token;
    size_t pos = 0;
    redisContext *sc;
    redisReply *m;
    char *v;

    ck_assert_int_eq(session_put(key, "", "A"), 1);
    freeReplyObject(redisCommand(rc, "HSET %s k x %s 41 %s w7.1 %s 3 %s 0", key, "ixs:o back", "ixs:o waits",
                                 "ixs:o kept", "ixs:o zero"));
    freeReplyObject(last);
    last = redisCommandArgv(rc, sizeof(put) / sizeof(put[0]), put, NULL);
    ck_assert_ptr_nonnull(last);
    ck_assert_int_eq(contract_record(last, &rec), 0);
    ck_assert_str_eq(rec.daemon, "A");
    ck_assert_int_eq(rec.nindex, 1);
    ck_assert_int_eq(contract_record_next(&rec, &pos, hid, sizeof(hid), name, sizeof(name), &token, wid, sizeof(wid)),
                     0);
    ck_assert_str_eq(hid, "xs:o");
    ck_assert_str_eq(name, "back");
    ck_assert_int_eq(token, 41);
    ck_assert_int_eq(contract_record_next(&rec, &pos, hid, sizeof(hid), name, sizeof(name), &token, wid, sizeof(wid)),
                     -1);
    v = index_entry(key, "xs:o", "kept");
    ck_assert_str_eq(v, "7");
    free(v);

    /* A writes a token back into B's record: B hears of it on its channel */
    sc = redisConnect("127.0.0.1", R->port);
    ck_assert_ptr_nonnull(sc);
    freeReplyObject(redisCommand(sc, "SUBSCRIBE " PREFIX "B"));
    freeReplyObject(last);
    last = redisCommandArgv(rc, sizeof(index) / sizeof(index[0]), index, NULL);
    ck_assert_ptr_nonnull(last);
    ck_assert_int_eq(redisGetReply(sc, (void **)&m), REDIS_OK);
    ck_assert_int_eq(m->type, REDIS_REPLY_ARRAY);
    ck_assert_str_eq(m->element[2]->str, "L ixs:o late 42");
    freeReplyObject(m);
    redisFree(sc);
    v = index_entry(key, "xs:o", "late");
    ck_assert_str_eq(v, "");
    free(v);
}
END_TEST

static Suite *contract_suite(void)
{
    Suite *s = suite_create("contract");
    TCase *tc = tcase_create("scripts");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_key);
    tcase_add_test(tc, test_lock_busy_wait_unlock_grant);
    tcase_add_test(tc, test_record_carried);
    tcase_add_test(tc, test_two_names_and_cancel);
    tcase_add_test(tc, test_semaphore_and_status);
    tcase_add_test(tc, test_latch);
    tcase_add_test(tc, test_late_batch);
    tcase_add_test(tc, test_renew_gone);
    tcase_add_test(tc, test_session_claim);
    tcase_add_test(tc, test_session_claim_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return h_run_suite(contract_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
