/* check_cluster.c - daemon/backend/cluster.c: key slots, CLUSTER SLOTS tables and redirects on their own, then the
 * router against a real 3-master cluster: tables from every seed, commands on the right node, and calls that
 * still succeed through a timeout, a CLUSTER FAILOVER, a slot migration (ASK, then MOVED), a kill -9 of a master
 * and with AUTH. */
#include <check.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "dlockd.h"
#include "harness.h"

#define NKEYS 600        /* keys written through the router: some 200 per master */
#define CALL_MS 5000     /* the longest a batch of calls may take */
#define KILL_MS 20000    /* the longest a killed master's slots may stay unwritable */

static struct h_cluster *C; /* formed once for the integration tests, in the parent process */
static struct dlockd *dd;   /* the context the router is given: a loop, deadlines, a config */
static int nrefreshed, last_ok;

/* --- the loop */

static void on_refreshed(struct dlockd *d, int ok)
{
    (void)d;
    nrefreshed++;
    last_ok = ok;
}

static const struct cluster_owner owner = {on_refreshed};

static void setup_loop(void)
{
    dd = calloc(1, sizeof(*dd));
    dd->base = event_base_new();
    dd->deadlines = deadlines_new(dd->base);
    dd->cfg.backend_timeout = 2000;
    log_set_level(LEVEL_NOTICE);
    nrefreshed = last_ok = 0;
}

static void teardown_loop(void)
{
    deadlines_free(dd->deadlines);
    event_base_free(dd->base);
    free(dd);
}

/* Runs the loop for about ms. */
static void spin(int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};

    event_base_loopexit(dd->base, &tv);
    event_base_dispatch(dd->base);
}

/* Runs the loop until *n >= want or timeout_ms passed; returns 1 when it got there. */
static int spin_until(const int *n, int want, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    while (*n < want && h_now_ms() < deadline)
        spin(10);
    return *n >= want;
}

/* A router on the one seed at port, refreshed once. */
static struct cluster *router_on(int port)
{
    struct addr seed = {.host = "127.0.0.1", .port = port};
    struct cluster *c = cluster_new(dd, &owner, &seed, 1);
    int before = nrefreshed;

    cluster_refresh(c);
    ck_assert_int_eq(nrefreshed, before); /* never before cluster_refresh returns */
    ck_assert_msg(spin_until(&nrefreshed, before + 1, CALL_MS), "no refresh from %d", port);
    ck_assert_msg(last_ok, "refresh from %d: %s", port, cluster_error(c));
    return c;
}

/* --- calls */

struct reply {
    int done;       /* cb was called */
    int type;       /* of the reply; 0 for none (NULL) */
    char str[128];  /* its text */
};

static void on_reply(struct dlockd *d, redisReply *r, void *arg)
{
    struct reply *rep = arg;

    (void)d;
    rep->done = 1;
    rep->type = r ? r->type : 0;
    snprintf(rep->str, sizeof(rep->str), "%s", r && r->str ? r->str : "");
}

/* Sends argv (argv[1] is the key) through c into rep; counts the call in *pending. Returns cluster_send's result. */
static int send_argv(struct cluster *c, struct reply *rep, int argc, const char **argv)
{
    sds cmd;

    memset(rep, 0, sizeof(*rep));
    ck_assert_int_ge(redisFormatSdsCommandArgv(&cmd, argc, argv, NULL), 0);
    return cluster_send(c, cluster_slot(argv[1], strlen(argv[1])), cmd, on_reply, NULL, rep);
}

static int count_done(const struct reply *reps, int n)
{
    int done = 0;

    for (int i = 0; i < n; i++)
        done += reps[i].done;
    return done;
}

/* Runs the loop until every one of reps[0..n) is answered. */
static void wait_all(struct reply *reps, int n)
{
    int64_t deadline = h_now_ms() + CALL_MS;

    while (count_done(reps, n) < n && h_now_ms() < deadline)
        spin(10);
    ck_assert_int_eq(count_done(reps, n), n);
}

static void key_of(char *buf, size_t len, const char *prefix, int i)
{
    snprintf(buf, len, "%s:%d", prefix, i);
}

/* SETs prefix:i to "v<i>" for every i through c, once; returns how many were answered OK. */
static int set_all_once(struct cluster *c, const char *prefix, int n, struct reply *reps, const int *skip)
{
    char key[64], val[64];
    int ok = 0;

    for (int i = 0; i < n; i++) {
        const char *argv[] = {"SET", key, val};

        if (skip && skip[i])
            continue;
        key_of(key, sizeof(key), prefix, i);
        snprintf(val, sizeof(val), "v%d", i);
        ck_assert_int_eq(send_argv(c, &reps[i], 3, argv), 0);
    }
    for (int64_t deadline = h_now_ms() + CALL_MS; h_now_ms() < deadline; spin(10)) {
        int done = 0;

        for (int i = 0; i < n; i++)
            done += (skip && skip[i]) || reps[i].done;
        if (done == n)
            break;
    }
    for (int i = 0; i < n; i++)
        ok += !(skip && skip[i]) && reps[i].type == REDIS_REPLY_STATUS && strcmp(reps[i].str, "OK") == 0;
    return ok;
}

/* GETs every key through c and checks each value, then on the master that serves it, asked directly. */
static void check_all(struct cluster *c, const char *prefix, int n, int any_port)
{
    static struct reply reps[NKEYS];
    static int slot_port[H_CLUSTER_SLOTS];
    char key[64], val[64];

    for (int i = 0; i < n; i++) {
        const char *argv[] = {"GET", key};

        key_of(key, sizeof(key), prefix, i);
        ck_assert_int_eq(send_argv(c, &reps[i], 2, argv), 0);
    }
    wait_all(reps, n);
    ck_assert_int_eq(h_cluster_slot_map(any_port, slot_port), 3);
    for (int i = 0; i < n; i++) {
        char *direct;
        int port;

        key_of(key, sizeof(key), prefix, i);
        snprintf(val, sizeof(val), "v%d", i);
        ck_assert_msg(reps[i].type == REDIS_REPLY_STRING && strcmp(reps[i].str, val) == 0, "GET %s: type %d '%s'",
                      key, reps[i].type, reps[i].str);
        port = slot_port[cluster_slot(key, strlen(key))];
        direct = h_redis_cmd(port, "GET", key, NULL);
        ck_assert_msg(direct && strcmp(direct, val) == 0, "GET %s on %d: %s", key, port, direct ? direct : "nil");
        free(direct);
    }
}

/* --- the slot of a key */

START_TEST(test_slot_known_values)
{
    /* CRC16/XMODEM's check value: 0x31C3 for "123456789". */
    ck_assert_int_eq(cluster_slot("123456789", 9), 0x31C3);
    ck_assert_int_eq(cluster_slot("foo", 3), 12182);
    ck_assert_int_eq(cluster_slot("bar", 3), 5061);
    ck_assert_int_eq(cluster_slot("", 0), 0);
    /* Hash tags: the first '{', the first '}' after it, and only when the tag is not empty. */
    ck_assert_int_eq(cluster_slot("{user1000}.following", 21), cluster_slot("user1000", 8));
    ck_assert_int_eq(cluster_slot("{user1000}.followers", 20), cluster_slot("user1000", 8));
    ck_assert_int_eq(cluster_slot("foo{}{bar}", 10), 8363); /* the empty tag counts: the whole key */
    ck_assert_int_eq(cluster_slot("foo{{bar}}zap", 13), cluster_slot("{bar", 4));
    ck_assert_int_eq(cluster_slot("foo{bar}{zap}", 13), cluster_slot("bar", 3));
    ck_assert_int_eq(cluster_slot("{bar", 4), cluster_slot("{bar", 4));
    ck_assert_int_ne(cluster_slot("a{b", 3), cluster_slot("b", 1));
    ck_assert_int_eq(cluster_slot("x}{y}", 5), cluster_slot("y", 1));
    /* Only len bytes count: a NUL and what follows are part of the key. */
    ck_assert_int_ne(cluster_slot("a\0b", 3), cluster_slot("a", 1));
}
END_TEST

/* --- redirects */

START_TEST(test_redirect_parse)
{
    static const char *const not_redirects[] = {
        "MOVED", "MOVED ", "MOVED 1", "MOVED 1 ", "MOVED 16384 h:1", "MOVED -1 h:1", "MOVED 99999999999999999999 h:1",
        "MOVED x h:1", "MOVED 1 h", "MOVED 1 h:0", "MOVED 1 h:65536", "MOVED 1 h:12a", "MOVED 1 h:", "MOVED  1 h:1",
        "MOVED 1  h:1", "MOVED 1 h:1 x", "MOVEDX 1 h:1", "moved 1 h:1", "ASK", "ASK 1", "ASKING 1 h:1",
        "ERR unknown command", "CLUSTERDOWN The cluster is down", "TRYAGAIN Multiple keys request", "",
    };
    struct cluster_node to;
    char longhost[400];
    int slot = -1;

    ck_assert_int_eq(cluster_redirect_parse("MOVED 3999 127.0.0.1:6381", &slot, &to), CLUSTER_MOVED);
    ck_assert_int_eq(slot, 3999);
    ck_assert_str_eq(to.host, "127.0.0.1");
    ck_assert_int_eq(to.port, 6381);
    ck_assert_int_eq(cluster_redirect_parse("ASK 0 redis-2.example:7000", &slot, &to), CLUSTER_ASK);
    ck_assert_int_eq(slot, 0);
    ck_assert_str_eq(to.host, "redis-2.example");
    ck_assert_int_eq(to.port, 7000);
    ck_assert_int_eq(cluster_redirect_parse("MOVED 16383 ::1:6379", &slot, &to), CLUSTER_MOVED);
    ck_assert_int_eq(slot, 16383);
    ck_assert_str_eq(to.host, "::1");
    ck_assert_int_eq(to.port, 6379);
    /* No host: the node that answered. */
    ck_assert_int_eq(cluster_redirect_parse("MOVED 12 :7001", &slot, &to), CLUSTER_MOVED);
    ck_assert_str_eq(to.host, "");
    ck_assert_int_eq(to.port, 7001);
    for (size_t i = 0; i < sizeof(not_redirects) / sizeof(not_redirects[0]); i++) {
        slot = -7;
        ck_assert_msg(cluster_redirect_parse(not_redirects[i], &slot, &to) == CLUSTER_NO_REDIRECT, "'%s'",
                      not_redirects[i]);
        ck_assert_int_eq(slot, -7);
    }
    ck_assert_int_eq(cluster_redirect_parse(NULL, &slot, &to), CLUSTER_NO_REDIRECT);
    memcpy(longhost, "MOVED 1 ", 8);
    memset(longhost + 8, 'h', CLUSTER_HOST_MAX); /* one byte too long */
    snprintf(longhost + 8 + CLUSTER_HOST_MAX, sizeof(longhost) - 8 - CLUSTER_HOST_MAX, ":1");
    ck_assert_int_eq(cluster_redirect_parse(longhost, &slot, &to), CLUSTER_NO_REDIRECT);
}
END_TEST

/* --- CLUSTER SLOTS tables */

/* The reply hiredis reads from raw RESP text; NULL when the text is not one whole RESP value. */
static redisReply *resp(const char *text, size_t len)
{
    redisReader *rd = redisReaderCreate();
    void *r = NULL;

    redisReaderFeed(rd, text, len);
    if (redisReaderGetReply(rd, &r) != REDIS_OK)
        r = NULL;
    redisReaderFree(rd);
    return r;
}

/* Parses RESP text as a CLUSTER SLOTS reply into t; returns cluster_table_parse's result, err its reason. */
static int parse_text(const char *text, struct cluster_table *t, char *err, size_t len)
{
    redisReply *r = resp(text, strlen(text));
    int ret;

    ck_assert_ptr_nonnull(r);
    ret = cluster_table_parse(r, "10.0.0.9", t, err, len);
    freeReplyObject(r);
    return ret;
}

/* Two masters: 0-99 and 200-16383 on A (with one replica), 100-199 on B (one replica unknown: "?"). */
#define A "$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
#define GOOD                                                                                                          \
    "*3\r\n"                                                                                                          \
    "*4\r\n:0\r\n:99\r\n*3\r\n" A "*3\r\n$9\r\n127.0.0.1\r\n:7003\r\n$2\r\nid\r\n"                                    \
    "*4\r\n:100\r\n:199\r\n*3\r\n$0\r\n\r\n:7001\r\n$2\r\nid\r\n*3\r\n$1\r\n?\r\n:7004\r\n$2\r\nid\r\n"               \
    "*3\r\n:200\r\n:16383\r\n*3\r\n" A

START_TEST(test_table_parse)
{
    struct cluster_table t;
    const struct cluster_shard *s;
    char err[256];

    ck_assert_int_eq(parse_text(GOOD, &t, err, sizeof(err)), 0);
    ck_assert_int_eq(t.nshards, 2);
    s = cluster_table_shard(&t, 0);
    ck_assert_ptr_nonnull(s);
    ck_assert_str_eq(s->master.host, "127.0.0.1");
    ck_assert_int_eq(s->master.port, 7000);
    ck_assert_int_eq(s->nreplicas, 1);
    ck_assert_int_eq(s->replicas[0].port, 7003);
    ck_assert_ptr_eq(cluster_table_shard(&t, 16383), s); /* two ranges, one master */
    ck_assert_ptr_eq(cluster_table_shard(&t, 200), s);
    s = cluster_table_shard(&t, 150);
    ck_assert_str_eq(s->master.host, "10.0.0.9"); /* "": the node that answered */
    ck_assert_int_eq(s->master.port, 7001);
    ck_assert_int_eq(s->nreplicas, 0); /* "?": unknown, left out */
    ck_assert_ptr_null(cluster_table_shard(&t, -1));
    ck_assert_ptr_null(cluster_table_shard(&t, 16384));
    cluster_table_clear(&t);
    ck_assert_int_eq(t.nshards, 0);
    ck_assert_ptr_null(cluster_table_shard(&t, 0));

    /* Slots no node serves are allowed (the cluster is down there), and have no shard. */
    ck_assert_int_eq(parse_text("*1\r\n*3\r\n:10\r\n:20\r\n*3\r\n" A, &t, err, sizeof(err)), 0);
    ck_assert_ptr_null(cluster_table_shard(&t, 9));
    ck_assert_ptr_nonnull(cluster_table_shard(&t, 10));
    ck_assert_ptr_nonnull(cluster_table_shard(&t, 20));
    ck_assert_ptr_null(cluster_table_shard(&t, 21));
    cluster_table_clear(&t);
}
END_TEST

START_TEST(test_table_parse_malformed)
{
    static const char nul_host[] = "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$3\r\na\0b\r\n:7000\r\n"; /* strlen stops at the NUL */
    static const char *const bad[] = {
        "-ERR This instance has cluster support disabled\r\n",
        "*0\r\n",                                              /* no slot served */
        "+OK\r\n",
        ":1\r\n",
        "*1\r\n:0\r\n",                                        /* a range that is no array */
        "*1\r\n*2\r\n:0\r\n:1\r\n",                            /* no master */
        "*1\r\n*3\r\n$1\r\n0\r\n:1\r\n*2\r\n" A,               /* start as a string */
        "*1\r\n*3\r\n:5\r\n:4\r\n*3\r\n" A,                    /* start after end */
        "*1\r\n*3\r\n:-1\r\n:4\r\n*3\r\n" A,
        "*1\r\n*3\r\n:0\r\n:16384\r\n*3\r\n" A,
        "*1\r\n*3\r\n:0\r\n:1\r\n:7\r\n",                      /* master no array */
        "*1\r\n*3\r\n:0\r\n:1\r\n*1\r\n$1\r\nh\r\n",           /* master without port */
        "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n:1\r\n:7000\r\n",       /* host an integer */
        "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:0\r\n",     /* port 0 */
        "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:65536\r\n",
        "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n$4\r\n7000\r\n", /* port a string */
        "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\n?\r\n:7000\r\n",  /* master with no known endpoint */
        nul_host,                                              /* a NUL in the host */
        "*1\r\n*4\r\n:0\r\n:1\r\n*3\r\n" A "$1\r\nx\r\n",      /* a replica no array */
        "*1\r\n*4\r\n:0\r\n:1\r\n*3\r\n" A "*-1\r\n",          /* a nil replica */
        "*2\r\n*3\r\n:0\r\n:10\r\n*3\r\n" A "*3\r\n:10\r\n:20\r\n*2\r\n$1\r\nh\r\n:1\r\n", /* overlap */
        "*2\r\n*3\r\n:0\r\n:10\r\n*3\r\n" A "*-1\r\n",         /* a nil range */
    };
    struct cluster_table t;
    char err[256];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        redisReply *r = resp(bad[i], bad[i] == nul_host ? sizeof(nul_host) - 1 : strlen(bad[i]));

        ck_assert_msg(r != NULL, "case %zu is no RESP", i);
        err[0] = '\0';
        ck_assert_msg(cluster_table_parse(r, "h", &t, err, sizeof(err)) == -1, "case %zu parsed", i);
        ck_assert_msg(strncmp(err, "CLUSTER SLOTS: ", 15) == 0 && strlen(err) > 15, "case %zu: '%s'", i, err);
        ck_assert_int_eq(t.nshards, 0);
        ck_assert_ptr_null(cluster_table_shard(&t, 0));
        freeReplyObject(r);
    }
    ck_assert_int_eq(cluster_table_parse(NULL, "h", &t, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "CLUSTER SLOTS: no reply");
}
END_TEST

/* Every byte of a good reply changed in turn to each of a few values: whatever hiredis still reads is parsed or
 * refused, never crashes, and a parsed table only points at its own shards. */
START_TEST(test_table_parse_mutated)
{
    static const char good[] = GOOD;
    static const char subst[] = {'*', ':', '$', '0', '9', '-', '?', '\0', '\r', 'x'};
    int parsed = 0, refused = 0;

    for (size_t i = 0; i < sizeof(good) - 1; i++) {
        for (size_t k = 0; k < sizeof(subst); k++) {
            char text[sizeof(good)];
            struct cluster_table t;
            redisReply *r;
            char err[256];

            memcpy(text, good, sizeof(good));
            text[i] = subst[k];
            if ((r = resp(text, sizeof(good) - 1)) == NULL)
                continue;
            if (cluster_table_parse(r, "h", &t, err, sizeof(err)) == 0) {
                int stray = 0;

                parsed++;
                for (int s = 0; s < CLUSTER_SLOTS; s++) /* not ck_assert: each one writes to Check's pipe */
                    stray += t.shard_of[s] >= t.nshards;
                ck_assert_int_eq(stray, 0);
                cluster_table_clear(&t);
            } else {
                refused++;
            }
            freeReplyObject(r);
        }
    }
    ck_assert_int_gt(parsed, 0);
    ck_assert_int_gt(refused, 0);
}
END_TEST

/* --- against a real cluster */

static void form_cluster(void)
{
    C = h_cluster_start(NULL);
}

static void drop_cluster(void)
{
    h_cluster_stop(C);
    C = NULL;
}

/* cluster_slot agrees with CLUSTER KEYSLOT on plain keys, tags, odd braces and binary keys. */
START_TEST(test_slot_matches_redis)
{
    redisContext *rc = redisConnect("127.0.0.1", C->port[0]);
    int n = 0;

    ck_assert_msg(rc && !rc->err, "connect");
    for (int i = 0; i < 400; i++) {
        char key[64];
        size_t len;
        redisReply *r;

        switch (i % 8) {
        case 0: len = (size_t)snprintf(key, sizeof(key), "key:%d", i); break;
        case 1: len = (size_t)snprintf(key, sizeof(key), "{user%d}.following", i); break;
        case 2: len = (size_t)snprintf(key, sizeof(key), "a{}b%d", i); break;
        case 3: len = (size_t)snprintf(key, sizeof(key), "x{{%d}}y", i); break;
        case 4: len = (size_t)snprintf(key, sizeof(key), "}{%d{z}", i); break;
        case 5: len = (size_t)snprintf(key, sizeof(key), "{%d", i); break;
        case 6: len = (size_t)snprintf(key, sizeof(key), "p%d{t}{u}", i); break;
        default:
            len = 1 + (size_t)(i % 17);
            for (size_t j = 0; j < len; j++)
                key[j] = (char)((i * 131 + (int)j * 71) & 0xff); /* any byte, NUL included */
        }
        r = redisCommand(rc, "CLUSTER KEYSLOT %b", key, len);
        ck_assert_msg(r && r->type == REDIS_REPLY_INTEGER, "CLUSTER KEYSLOT");
        ck_assert_msg(cluster_slot(key, len) == r->integer, "key %d (%.*s): %d, Redis says %lld", i, (int)len, key,
                      cluster_slot(key, len), r->integer);
        freeReplyObject(r);
        n++;
    }
    ck_assert_int_eq(n, 400);
    redisFree(rc);
}
END_TEST

/* Every range of CLUSTER SLOTS at port, as hiredis reads it, has its master and replicas in c's table. */
static void same_as_cluster_slots(const struct cluster *c, int port)
{
    redisContext *rc = redisConnect("127.0.0.1", port);
    redisReply *r = redisCommand(rc, "CLUSTER SLOTS");

    ck_assert_msg(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 3, "CLUSTER SLOTS on %d", port);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        const struct cluster_shard *s = cluster_table_shard(cluster_table(c), (int)e->element[0]->integer);

        ck_assert_ptr_eq(s, cluster_table_shard(cluster_table(c), (int)e->element[1]->integer));
        ck_assert_int_eq(s->master.port, e->element[2]->element[1]->integer);
        ck_assert_int_eq(s->nreplicas, (int)e->elements - 3);
        for (size_t j = 3; j < e->elements; j++)
            ck_assert_int_eq(s->replicas[j - 3].port, e->element[j]->element[1]->integer);
    }
    freeReplyObject(r);
    redisFree(rc);
}

/* The table the router reads from each node, a replica included, is the one CLUSTER NODES shows there. */
START_TEST(test_table_from_every_seed)
{
    static int slot_port[H_CLUSTER_SLOTS];

    for (int i = 0; i < H_CLUSTER_NODES; i++) {
        struct cluster *c = router_on(C->port[i]);
        const struct cluster_table *t = cluster_table(c);

        ck_assert_int_eq(h_cluster_slot_map(C->port[i], slot_port), 3);
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->nshards, 3);
        for (int s = 0; s < CLUSTER_SLOTS; s++) {
            const struct cluster_node *n = cluster_node_for_slot(c, s);

            ck_assert_msg(n && n->port == slot_port[s], "seed %d, slot %d: %d, not %d", C->port[i], s,
                          n ? n->port : 0, slot_port[s]);
            ck_assert_str_eq(n->host, "127.0.0.1");
        }
        for (int k = 0; k < t->nshards; k++) {
            ck_assert_int_eq(t->shards[k].nreplicas, 1);
            ck_assert_int_eq(t->shards[k].replicas[0].port, h_cluster_replica_of(C->port[i], t->shards[k].master.port));
        }
        same_as_cluster_slots(c, C->port[i]);
        ck_assert_int_eq(cluster_stats(c)->refreshes, 1);
        ck_assert_str_eq(cluster_error(c), "");
        cluster_free(c);
    }
}
END_TEST

/* Seeds that do not answer are passed over; when none answers the refresh fails, once, saying why. */
START_TEST(test_refresh_seeds)
{
    struct addr seeds[2] = {{.host = "127.0.0.1"}, {.host = "127.0.0.1"}};
    int dead = h_free_port();
    struct cluster *c;

    seeds[0].port = dead;
    seeds[1].port = C->port[4]; /* a replica */
    c = cluster_new(dd, &owner, seeds, 2);
    ck_assert_ptr_null(cluster_table(c));
    ck_assert_int_eq(cluster_send(c, 0, sdsnew("PING"), on_reply, NULL, NULL), -1); /* no table yet */
    cluster_refresh(c);
    cluster_refresh(c); /* joins the first */
    ck_assert(cluster_refreshing(c));
    ck_assert(spin_until(&nrefreshed, 1, CALL_MS));
    spin(100);
    ck_assert_int_eq(nrefreshed, 1);
    ck_assert(last_ok);
    ck_assert_int_eq(cluster_table(c)->nshards, 3);
    ck_assert(!cluster_refreshing(c));
    cluster_free(c);

    seeds[1].port = h_free_port();
    c = cluster_new(dd, &owner, seeds, 2);
    cluster_refresh(c);
    ck_assert(spin_until(&nrefreshed, 2, CALL_MS));
    ck_assert(!last_ok);
    ck_assert_ptr_null(cluster_table(c));
    ck_assert_int_eq(cluster_stats(c)->failures, 1);
    ck_assert_msg(strstr(cluster_error(c), "127.0.0.1:") != NULL, "error: %s", cluster_error(c));
    cluster_free(c);
}
END_TEST

/* A node that answers neither CLUSTER SLOTS nor anything: the try ends at backend-timeout, the next seed answers. */
START_TEST(test_refresh_silent_seed)
{
    struct addr seeds[2] = {{.host = "127.0.0.1"}, {.host = "127.0.0.1"}};
    struct h_redis *mute = h_redis_start(NULL);
    struct cluster *c;
    int64_t t0;

    seeds[0].port = mute->port;
    seeds[1].port = C->port[1];
    dd->cfg.backend_timeout = 300;
    h_redis_pause(mute);
    c = cluster_new(dd, &owner, seeds, 2);
    t0 = h_now_ms();
    cluster_refresh(c);
    ck_assert(spin_until(&nrefreshed, 1, CALL_MS));
    ck_assert(last_ok);
    ck_assert_int_ge(h_now_ms() - t0, 300);
    cluster_free(c);
    h_redis_resume(mute);

    /* A plain Redis answers CLUSTER SLOTS with an error: the refresh fails naming it. */
    seeds[1].port = mute->port;
    c = cluster_new(dd, &owner, seeds, 1);
    cluster_refresh(c);
    ck_assert(spin_until(&nrefreshed, 2, CALL_MS));
    ck_assert(!last_ok);
    ck_assert_msg(strstr(cluster_error(c), "cluster support disabled") != NULL, "error: %s", cluster_error(c));
    cluster_free(c);
}
END_TEST

/* Keys of every master's slots land on that master, one connection each, without a redirect. */
START_TEST(test_routing)
{
    static struct reply reps[NKEYS];
    struct cluster *c = router_on(C->port[0]);

    ck_assert_int_eq(set_all_once(c, "route", NKEYS, reps, NULL), NKEYS);
    check_all(c, "route", NKEYS, C->port[0]);
    ck_assert_int_eq(cluster_stats(c)->conns, 3);
    ck_assert_int_eq(cluster_stats(c)->moved, 0);
    ck_assert_int_eq(cluster_stats(c)->asked, 0);
    /* An error reply that is no redirect is the answer. */
    {
        const char *argv[] = {"INCR", "route:1"};
        struct reply rep;

        ck_assert_int_eq(send_argv(c, &rep, 2, argv), 0);
        ck_assert(spin_until(&rep.done, 1, CALL_MS));
        ck_assert_int_eq(rep.type, REDIS_REPLY_ERROR);
        ck_assert_msg(strstr(rep.str, "not an integer") != NULL, "%s", rep.str);
    }
    cluster_free(c);
}
END_TEST

static int nlate;
static struct reply late_rep;

static void on_late(struct dlockd *d, redisReply *r, void *arg)
{
    (void)arg;
    on_reply(d, r, &late_rep);
    nlate++;
}

/* A master that stops answering: the call is answered NULL at backend-timeout, its late reply comes when the
 * master answers again, and a refresh was started. */
START_TEST(test_timeout_late)
{
    const char *argv[] = {"SET", "late:1", "v"};
    struct cluster *c = router_on(C->port[0]);
    struct h_redis *master = C->node[h_cluster_index(C, cluster_node_for_slot(c, cluster_slot("late:1", 6))->port)];
    struct reply rep;
    sds cmd;
    int64_t t0;

    dd->cfg.backend_timeout = 300;
    nlate = 0;
    h_redis_pause(master);
    ck_assert_int_ge(redisFormatSdsCommandArgv(&cmd, 3, argv, NULL), 0);
    memset(&rep, 0, sizeof(rep));
    t0 = h_now_ms();
    ck_assert_int_eq(cluster_send(c, cluster_slot("late:1", 6), cmd, on_reply, on_late, &rep), 0);
    ck_assert(spin_until(&rep.done, 1, CALL_MS));
    ck_assert_int_eq(rep.type, 0);
    ck_assert_int_ge(h_now_ms() - t0, 300);
    ck_assert_int_eq(nlate, 0);
    h_redis_resume(master); /* long before the node timeout of 2 s: no failover */
    ck_assert(spin_until(&nlate, 1, CALL_MS));
    ck_assert_int_eq(late_rep.type, REDIS_REPLY_STATUS);
    ck_assert_str_eq(late_rep.str, "OK");
    ck_assert(spin_until(&nrefreshed, 2, CALL_MS));
    spin(50);
    ck_assert_int_eq(nlate, 1);
    cluster_free(c);
}
END_TEST

/* After a CLUSTER FAILOVER, a router with the old table follows MOVED to the new master and refreshes. */
START_TEST(test_failover)
{
    static struct reply reps[NKEYS];
    struct cluster *c = router_on(C->port[1]);
    const struct cluster_node *old = cluster_node_for_slot(c, cluster_slot("route:0", 7));
    int old_port = old->port, replica = h_cluster_replica_of(C->port[1], old_port);

    ck_assert_int_ne(replica, 0);
    ck_assert_int_eq(set_all_once(c, "fo", NKEYS, reps, NULL), NKEYS);
    h_cluster_failover(C, replica);
    ck_assert_int_eq(set_all_once(c, "fo", NKEYS, reps, NULL), NKEYS);
    ck_assert_int_ge(cluster_stats(c)->moved, 1);
    /* the refresh a MOVED starts may end after the redirected calls (they go at once) */
    for (int64_t end = h_now_ms() + CALL_MS; cluster_stats(c)->refreshes < 2 && h_now_ms() < end;)
        spin(10);
    ck_assert_int_ge(cluster_stats(c)->refreshes, 2);
    ck_assert_int_eq(cluster_node_for_slot(c, cluster_slot("route:0", 7))->port, replica);
    check_all(c, "fo", NKEYS, C->port[1]);
    check_all(c, "route", NKEYS, C->port[1]);
    ck_assert_int_eq(cluster_stats(c)->conns, 3); /* the old master's connection was closed */
    cluster_free(c);
}
END_TEST

static char *node_id(int port)
{
    char *id = h_redis_cmd(port, "CLUSTER", "MYID", NULL);

    ck_assert_msg(id && strlen(id) == 40, "CLUSTER MYID on %d", port);
    return id;
}

static void setslot(int port, int slot, const char *how, const char *id)
{
    char s[16];
    char *r;

    snprintf(s, sizeof(s), "%d", slot);
    r = h_redis_cmd(port, "CLUSTER", "SETSLOT", s, how, id, NULL);
    ck_assert_msg(r && strcmp(r, "OK") == 0, "SETSLOT %d %s on %d: %s", slot, how, port, r ? r : "no reply");
    free(r);
}

/* Sends one command through c and returns its reply text. */
static const char *call1(struct cluster *c, struct reply *rep, const char *verb, const char *key, const char *val)
{
    const char *argv[] = {verb, key, val};

    ck_assert_int_eq(send_argv(c, rep, val ? 3 : 2, argv), 0);
    ck_assert(spin_until(&rep->done, 1, CALL_MS));
    return rep->str;
}

/* A slot migrating from one master to another: ASK while it moves, MOVED once it has. */
START_TEST(test_migration)
{
    static int slot_port[H_CLUSTER_SLOTS];
    const char *kept = "{mig}old", *fresh = "{mig}new";
    int slot = cluster_slot(kept, strlen(kept)), from, to = 0;
    struct cluster *c = router_on(C->port[2]);
    char *from_id, *to_id, *r, slotstr[16];
    struct reply rep;

    ck_assert_int_eq(h_cluster_slot_map(C->port[2], slot_port), 3);
    from = slot_port[slot];
    for (int s = 0; s < H_CLUSTER_SLOTS && to == 0; s++)
        if (slot_port[s] != from)
            to = slot_port[s];
    from_id = node_id(from);
    to_id = node_id(to);
    ck_assert_str_eq(call1(c, &rep, "SET", kept, "v1"), "OK");

    setslot(to, slot, "IMPORTING", from_id);
    setslot(from, slot, "MIGRATING", to_id);
    ck_assert_str_eq(call1(c, &rep, "SET", fresh, "v2"), "OK"); /* not on `from`: ASK, then on `to` */
    ck_assert_int_eq(cluster_stats(c)->asked, 1);
    snprintf(slotstr, sizeof(slotstr), "%d", slot);
    ck_assert_int_eq(h_redis_int(to, "CLUSTER", "COUNTKEYSINSLOT", slotstr, NULL), 1);
    ck_assert_str_eq(call1(c, &rep, "GET", kept, NULL), "v1"); /* still on `from` */
    ck_assert_int_eq(cluster_stats(c)->asked, 1);
    ck_assert_str_eq(call1(c, &rep, "GET", fresh, NULL), "v2");
    ck_assert_int_eq(cluster_stats(c)->asked, 2);

    {
        char port[16];

        snprintf(port, sizeof(port), "%d", to);
        r = h_redis_cmd(from, "MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS", kept, NULL);
        ck_assert_msg(r && strcmp(r, "OK") == 0, "MIGRATE: %s", r ? r : "no reply");
        free(r);
    }
    ck_assert_str_eq(call1(c, &rep, "GET", kept, NULL), "v1"); /* moved: ASK */
    ck_assert_int_eq(cluster_stats(c)->asked, 3);
    ck_assert_int_eq(cluster_stats(c)->moved, 0);

    setslot(to, slot, "NODE", to_id);
    setslot(from, slot, "NODE", to_id);
    ck_assert_str_eq(call1(c, &rep, "GET", kept, NULL), "v1"); /* the old table: MOVED */
    ck_assert_int_eq(cluster_stats(c)->moved, 1);
    spin_until(&nrefreshed, 2, CALL_MS);
    ck_assert_int_eq(cluster_node_for_slot(c, slot)->port, to);
    ck_assert_str_eq(call1(c, &rep, "GET", fresh, NULL), "v2"); /* the new table: straight there */
    ck_assert_int_eq(cluster_stats(c)->moved, 1);
    ck_assert_int_eq(cluster_stats(c)->asked, 3);
    free(from_id);
    free(to_id);
    cluster_free(c);
}
END_TEST

/* A master killed: calls to its slots fail (NULL) and refresh until its replica took over, then succeed. */
START_TEST(test_kill_master)
{
    static struct reply reps[NKEYS];
    static int done[NKEYS];
    struct cluster *c = router_on(C->port[0]);
    int victim = cluster_node_for_slot(c, cluster_slot("route:0", 7))->port;
    int replica = h_cluster_replica_of(C->port[0], victim), seen_fail = 0, left = NKEYS, alive = 0;
    int64_t t0, deadline;

    ck_assert_int_ne(replica, 0);
    for (int i = 0; i < H_CLUSTER_NODES; i++)
        if (C->port[i] != victim)
            alive = C->port[i];
    memset(done, 0, sizeof(done));
    h_cluster_kill(C, victim);
    t0 = h_now_ms();
    deadline = t0 + KILL_MS;
    while (left > 0 && h_now_ms() < deadline) {
        int ok = set_all_once(c, "kill", NKEYS, reps, done);

        for (int i = 0; i < NKEYS; i++) {
            if (done[i])
                continue;
            seen_fail |= reps[i].type == 0;
            done[i] = reps[i].type == REDIS_REPLY_STATUS;
        }
        left -= ok;
        if (left > 0)
            spin(100);
    }
    ck_assert_msg(left == 0, "%d keys not written %lld ms after the kill", left, (long long)(h_now_ms() - t0));
    ck_assert(seen_fail);
    ck_assert_int_ge(cluster_stats(c)->refreshes, 2);
    ck_assert_int_eq(cluster_node_for_slot(c, cluster_slot("route:0", 7))->port, replica);
    ck_assert(h_cluster_wait(C, 0, 10000));
    check_all(c, "kill", NKEYS, alive);
    fprintf(stderr, "check_cluster: kill -9 of master %d: every key writable again after %lld ms\n", victim,
            (long long)(h_now_ms() - t0));
    cluster_free(c);
}
END_TEST

/* Nodes that require a password: the router sends AUTH first; a wrong one fails the refresh, naming AUTH. */
START_TEST(test_auth)
{
    static struct reply reps[NKEYS];
    struct cluster *c;
    int set = 0;

    /* The master killed by test_kill_master (in another process: its pid is still here) answers nothing. */
    for (int i = 0; i < H_CLUSTER_NODES; i++) {
        char *r = h_redis_cmd(C->port[i], "CONFIG", "SET", "requirepass", "s3cret", NULL);

        ck_assert_msg(r == NULL || strcmp(r, "OK") == 0, "requirepass on %d: %s", C->port[i], r);
        set += r != NULL;
        free(r);
    }
    ck_assert_int_ge(set, H_CLUSTER_NODES - 1);
    dd->cfg.redis_password = "wrong";
    c = cluster_new(dd, &owner, &(struct addr){.host = "127.0.0.1", .port = C->port[1]}, 1);
    cluster_refresh(c);
    ck_assert(spin_until(&nrefreshed, 1, CALL_MS));
    ck_assert(!last_ok);
    ck_assert_msg(strstr(cluster_error(c), "AUTH: WRONGPASS") != NULL, "error: %s", cluster_error(c));
    cluster_free(c);

    dd->cfg.redis_password = "s3cret";
    c = router_on(C->port[1]);
    ck_assert_int_eq(set_all_once(c, "auth", 60, reps, NULL), 60);
    cluster_free(c);
}
END_TEST

static Suite *cluster_suite(void)
{
    Suite *s = suite_create("cluster");
    TCase *unit = tcase_create("routing"), *live = tcase_create("live");

    tcase_add_test(unit, test_slot_known_values);
    tcase_add_test(unit, test_redirect_parse);
    tcase_add_test(unit, test_table_parse);
    tcase_add_test(unit, test_table_parse_malformed);
    tcase_add_test(unit, test_table_parse_mutated);
    suite_add_tcase(s, unit);

    /* One cluster for all, in this order: the failover, the migration and the kill change it. */
    tcase_add_unchecked_fixture(live, form_cluster, drop_cluster);
    tcase_add_checked_fixture(live, setup_loop, teardown_loop);
    tcase_set_timeout(live, 60);
    tcase_add_test(live, test_slot_matches_redis);
    tcase_add_test(live, test_table_from_every_seed);
    tcase_add_test(live, test_refresh_seeds);
    tcase_add_test(live, test_refresh_silent_seed);
    tcase_add_test(live, test_routing);
    tcase_add_test(live, test_timeout_late);
    tcase_add_test(live, test_failover);
    tcase_add_test(live, test_migration);
    tcase_add_test(live, test_kill_master);
    tcase_add_test(live, test_auth); /* last: the nodes want a password from here */
    suite_add_tcase(s, live);
    return s;
}

int main(void)
{
    return h_run_suite(cluster_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
