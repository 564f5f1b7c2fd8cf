/* check_cluster_ack.c - min-replicas-ack on a real 3-master Redis Cluster: a grant is answered once the replica
 * of its master has it, a stopped replica refuses the grants of its master only, and frees their names. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NMASTERS 3

static struct h_cluster *C;
static int master[NMASTERS];  /* ports of the masters */
static int replica[NMASTERS]; /* port of each master's replica */
static char home[NMASTERS][32]; /* a name whose keys live on each master */
static char spare[NMASTERS][32]; /* another one */

/* The index in master[] of the master that serves name's keys. */
static int master_of(const char *name)
{
    int port = h_cluster_name_master(C, name);

    for (int i = 0; i < NMASTERS; i++)
        if (master[i] == port)
            return i;
    ck_abort_msg("%s is served by %d, no master of the cluster as formed", name, port);
    return -1;
}

/* The cluster, its masters with their replicas, and a name of each master. */
static void form_cluster(void)
{
    static int map[H_CLUSTER_SLOTS];
    int found = 0;

    C = h_cluster_start(NULL);
    ck_assert_int_eq(h_cluster_slot_map(C->port[0], map), NMASTERS); /* formed, as created */
    for (int i = 0; i < NMASTERS; i++) {
        master[i] = C->port[i];
        replica[i] = h_cluster_replica_of(C->port[0], master[i]);
        ck_assert_int_ne(replica[i], 0);
    }
    for (int k = 0; found < 2 * NMASTERS && k < 1000; k++) {
        char name[32];
        int m;
        snprintf(name, sizeof name, "n%d", k);
        m = master_of(name);
        if (home[m][0] == '\0' || spare[m][0] == '\0') {
            snprintf(home[m][0] ? spare[m] : home[m], sizeof home[m], "%s", name);
            found++;
        }
    }
    ck_assert_int_eq(found, 2 * NMASTERS);
}

static void drop_cluster(void)
{
    h_cluster_stop(C);
    C = NULL;
}

/* A dlockd with min-replicas-ack 1 and a backend-timeout of 1 s, seeded with the first master. */
static struct h_dlockd *start_acked(void)
{
    char seed[32];
    struct h_dlockd *d;

    snprintf(seed, sizeof seed, "127.0.0.1:%d", master[0]);
    d = h_dlockd_start(0, H_ARGS("--cluster", seed, "--min-replicas-ack", "1", "--backend-timeout", "1s"));
    return d;
}

/* 1 when the hold of name at the Redis on port (a replica: read after READONLY) has token. */
static int has_token(int port, const char *name, long long token)
{
    char key[128], want[32], *v;
    int yes;

    snprintf(key, sizeof key, "dlock:{%s}:h", name);
    snprintf(want, sizeof want, " %lld ", token);
    v = h_redis_cmd_replica(port, "HGETALL", key, NULL);
    yes = v && strstr(v, want) != NULL;
    free(v);
    if (yes)
        return 1;
    snprintf(key, sizeof key, "dlock:{%s}:k", name); /* the one-key form: "end hid count token ..." */
    v = h_redis_cmd_replica(port, "GET", key, NULL);
    yes = v && strstr(v, want) != NULL;
    free(v);
    return yes;
}

/* Polls until name has a hold on its master m (want 1) or none (want 0), for up to ms; 1 once it does. */
static int held_on(int m, const char *name, int want, int ms)
{
    char key[128], one[128];

    snprintf(key, sizeof key, "dlock:{%s}:h", name);
    snprintf(one, sizeof one, "dlock:{%s}:k", name);
    for (int64_t deadline = h_now_ms() + ms;; h_sleep_ms(20)) {
        long long n = h_redis_int(master[m], "EXISTS", key, one, NULL);
        if (n == want || h_now_ms() > deadline)
            return n == want;
    }
}

/* Each master's grant is on its replica right after the OK, one name at a time and in one LOCK of three. */
START_TEST(test_granted_on_replicas)
{
    struct h_dlockd *d = start_acked();
    struct h_conn *c = H_CLIENT(d, "name=a");
    char names[3 * 32];
    const char *rep;

    h_wait_info(c, "\"backend\":\"up\"", 10000);
    for (int m = 0; m < NMASTERS; m++) {
        long long t = H_LOCK_NEW(c, home[m]);
        ck_assert_msg(has_token(replica[m], home[m], t), "token %lld of %s is not on replica %d", t, home[m],
                      replica[m]);
    }
    H_REQ(c, "OK counts=0,0,0", "UNLOCK %s %s %s", home[0], home[1], home[2]);
    snprintf(names, sizeof names, "%s %s %s", home[0], home[1], home[2]);
    rep = H_REQ(c, "OK tokens=%* counts=1,1,1", "LOCK %s", names);
    {
        char tokens[128], *tok[NMASTERS], *save = NULL;
        snprintf(tokens, sizeof tokens, "%s", strstr(rep, "tokens=") + 7);
        *strchr(tokens, ' ') = '\0';
        tok[0] = strtok_r(tokens, ",", &save);
        tok[1] = strtok_r(NULL, ",", &save);
        tok[2] = strtok_r(NULL, ",", &save);
        for (int m = 0; m < NMASTERS; m++)
            ck_assert_msg(tok[m] && has_token(replica[m], home[m], atoll(tok[m])), "%s of the LOCK of three is not on its replica",
                          home[m]);
    }
    ck_assert_int_ge(h_info_num(c, "ack_rounds"), 4);
    ck_assert_int_eq(h_info_num(c, "ack_refused"), 0);
    H_REQ(c, "OK counts=0,0,0", "UNLOCK %s", names);
    h_dlockd_stop(d);
}
END_TEST

/* The replica of master 0 stopped: its names are refused within backend-timeout and freed, a LOCK across
 * it too; the names of the other masters are still granted, each on its replica. */
START_TEST(test_replica_stopped)
{
    struct h_dlockd *d = start_acked();
    struct h_conn *a = H_CLIENT(d, "name=a"), *b = H_CLIENT(d, "name=b");
    struct h_redis *stopped = C->node[h_cluster_index(C, replica[0])];
    int64_t t0, took;
    long long t;

    h_wait_info(a, "\"backend\":\"up\"", 10000);
    h_redis_pause(stopped);
    t0 = h_now_ms();
    ck_assert_int_eq(h_send(a, "LOCK %s", home[0]), 0);
    ck_assert_msg(held_on(0, home[0], 1, 1000), "the grant of %s did not reach Redis", home[0]);
    t = H_LOCK_NEW(b, home[1]); /* waits for the round of master 0 at most: then its own, on master 1 only */
    took = h_now_ms() - t0;
    fprintf(stderr, "replica of master 0 stopped: a name of master 1 granted after %lld ms\n", (long long)took);
    ck_assert_msg(took < 2000, "a name of master 1 granted after %lld ms", (long long)took);
    ck_assert(has_token(replica[1], home[1], t));
    H_REPLY(a, "ERR BACKEND only 0 of 1 replicas confirmed%*", 3000);
    took = h_now_ms() - t0;
    fprintf(stderr, "replica of master 0 stopped: its name refused after %lld ms\n", (long long)took);
    ck_assert_msg(took < 2000, "refused after %lld ms", (long long)took);
    t = H_LOCK_NEW(b, home[2]);
    ck_assert(has_token(replica[2], home[2], t));
    H_REQ(a, "ERR BACKEND only 0 of 1 replicas confirmed%*", "LOCK %s %s", home[0], spare[1]);
    ck_assert_msg(held_on(0, home[0], 0, 3000), "the refused grant of %s is still on its master", home[0]);
    ck_assert_msg(held_on(1, spare[1], 0, 3000), "the refused grant of %s is still on its master", spare[1]);
    /* While a round for master 0 is in flight, a grant on master 2 waits for the next round and is confirmed
     * there, whatever master 0 does. (Two grants in one round, as the grants of a and b above may be when
     * their replies come in one turn: master 0 fails it for its own name only.) */
    ck_assert_int_eq(h_send(a, "#r LOCK %s", home[0]), 0);
    ck_assert_msg(held_on(0, home[0], 1, 1000), "the grant of %s did not reach Redis", home[0]);
    ck_assert_int_eq(h_send(a, "#p LOCK %s\r\n#q LOCK %s", spare[0], spare[2]), 0);
    {
        const char *q = h_reply_tag(a, "q", 5000);
        ck_assert_msg(q && h_match(q, "#q OK token=%d count=1"), "the grant on master 2, in a round that master 0 "
                      "failed: %s", q ? q : "(nothing)");
        t = H_KV_INT(q, "token");
        ck_assert(has_token(replica[2], spare[2], t));
        for (const char *const *tag = (const char *const[]){ "r", "p", NULL }; *tag; tag++) {
            q = h_reply_tag(a, *tag, 5000);
            /* #p may not even run in time: its batch waits behind the round's WAIT on master 0 */
            ck_assert_msg(q && h_match(q, "#%w ERR BACKEND %*"), "#%s: %s", *tag, q ? q : "(nothing)");
        }
    }
    h_redis_resume(stopped);
    t = H_LOCK_NEW(a, home[0]);
    ck_assert(has_token(replica[0], home[0], t));
    ck_assert_int_ge(h_info_num(a, "ack_refused"), 3); /* #p: refused, or not run in time */
    H_REQ(a, "OK count=0", "UNLOCK %s", home[0]);
    H_REQ(a, "OK count=0", "UNLOCK %s", spare[2]);
    H_REQ(b, "OK counts=0,0", "UNLOCK %s %s", home[1], home[2]);
    h_dlockd_stop(d);
}
END_TEST

static Suite *cluster_ack_suite(void)
{
    Suite *s = suite_create("cluster_ack");
    TCase *tc = tcase_create("cluster_ack");

    tcase_add_unchecked_fixture(tc, form_cluster, drop_cluster);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_granted_on_replicas);
    tcase_add_test(tc, test_replica_stopped);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return h_run_suite(cluster_ack_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
