/* check_cluster_daemon.c - dlockd on a real 3-master Redis Cluster: names spread over every master and
 * renewed, a grant handed across masters by pub/sub, a LOCK of names on several masters all or nothing, and
 * holds that survive a CLUSTER FAILOVER and a kill -9 of a master under load with no name granted twice. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NNAMES 300 /* spread over the three masters: some 100 each */

static struct h_cluster *C; /* one cluster for every test, in order: the failovers change it */

static void form_cluster(void)
{
    C = h_cluster_start(NULL);
}

static void drop_cluster(void)
{
    h_cluster_stop(C);
    C = NULL;
}

/* A dlockd whose only seed is the node at port, with extra arguments (may be NULL). */
static struct h_dlockd *start_on(int port, const char *lease)
{
    char seed[32];

    snprintf(seed, sizeof seed, "127.0.0.1:%d", port);
    /* Sessions outlive a request that waits behind the failover-delay gate. */
    return h_dlockd_start(0, H_ARGS("--cluster", seed, "--lock-lease", lease, "--backend-timeout", "1s",
                                    "--session-ttl", "60s", "--adminpass", "root"));
}


/* How many masters hold keys of dlockd now, and *total the keys. */
static int masters_with_keys(long long *total)
{
    int n = 0;

    *total = 0;
    for (int i = 0; i < H_CLUSTER_NODES; i++) {
        long long k;
        if (C->node[i]->pid == 0 || !h_cluster_is_master(C->port[i]))
            continue;
        k = h_redis_count_keys(C->port[i], "dlock:{*");
        n += k > 0;
        *total += k > 0 ? k : 0;
    }
    return n;
}

/* How many times needle occurs in text. */
static int count_of(const char *text, const char *needle)
{
    int n = 0;

    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* From a replica seed: hundreds of names, locked in one pipelined write (one loop turn: many slots) and held,
 * land on every master; renewed, all of them outlive the lease twice over; unlocked, they go. */
START_TEST(test_names_over_masters)
{
    struct h_dlockd *d = start_on(C->port[3], "2s");
    struct h_conn *a = H_CLIENT(d, "name=alice ttl=2s"), *b = H_CLIENT(d, "name=bob"); /* a lease of 2 s */
    static char lines[NNAMES * 24];
    long long keys;
    int masters;
    size_t len = 0;

    h_wait_info(a, "\"backend\":\"up\"", 10000);
    for (int i = 0; i < NNAMES; i++)
        len += (size_t)snprintf(lines + len, sizeof lines - len, "LOCK spread%d\r\n", i);
    h_send(a, "%s", lines);
    for (int i = 0; i < NNAMES; i++)
        H_REPLY(a, "OK token=%* count=1", 10000);
    H_REQ(a, "OK tokens=%* counts=1,1,1", "LOCK {job}.a {job}.b {job}.c");
    masters = masters_with_keys(&keys);
    ck_assert_int_eq(masters, 3);
    ck_assert_int_ge(keys, NNAMES);
    /* LIST sees the names of every master: a name of each, and all of them, in name order. */
    {
        struct h_conn *op = H_CLIENT(d, "name=operator");
        const char *r;
        H_REQ(op, "OK", "AUTH root");
        r = H_REQ(op, "OK {\"names\":[%*],\"more\":0}", "LIST spread* limit=1000");
        ck_assert_int_eq(count_of(r, "\"holders\":1"), NNAMES);
        ck_assert_ptr_nonnull(strstr(r, "{\"name\":\"spread0\",\"type\":\"lock\",\"holders\":1,\"waiters\":0},"
                                        "{\"name\":\"spread1\","));
        H_REQ(op, "OK {\"names\":[{%*},{%*}],\"latches\":[],\"more\":1}", "LIST spread* limit=2");
        h_close(op);
    }
    for (int i = 0; i < 9; i++) { /* past two leases of 2 s: only renewals keep them; alice stays alive */
        h_sleep_ms(500);
        H_REQ(a, "OK", "PING");
    }
    for (int i = 0; i < NNAMES; i++)
        H_REQ(b, "BUSY holder=alice %*", "LOCK spread%d wait=0", i);
    H_REQ(b, "BUSY holder=alice %*", "LOCK {job}.b wait=0");
    H_REQ(a, "OK counts=0,0,0", "UNLOCK {job}.a {job}.b {job}.c");
    ck_assert_int_eq(h_log_count(d, H_ARGS("CROSSSLOT")), 0);
    for (int i = 0; i < NNAMES; i++)
        H_REQ(a, "OK count=0", "UNLOCK spread%d", i);
    H_REQ(a, "OK", "PING");
    h_dlockd_stop(d);
}
END_TEST

/* A name whose keys live on another master than name's: "<base>N" for the first N that does. */
static void name_elsewhere(const char *name, const char *base, char *out, size_t cap)
{
    int home = h_cluster_name_master(C, name);

    for (int i = 0;; i++) {
        snprintf(out, cap, "%s%d", base, i);
        if (h_cluster_name_master(C, out) != home)
            return;
    }
}

/* Two daemons on different seeds: a waiter queued on one master is granted through pub/sub when a session of
 * the other daemon unlocks; an AWAIT on one daemon wakes at a COUNTDOWN on the other. */
START_TEST(test_waiter_across_masters)
{
    struct h_dlockd *d1 = start_on(C->port[0], "3s"), *d2 = start_on(C->port[1], "3s");
    struct h_conn *a = H_CLIENT(d1, "name=alice"), *b = H_CLIENT(d2, "name=bob");
    char other[64];

    h_wait_info(a, "\"backend\":\"up\"", 10000);
    h_wait_info(b, "\"backend\":\"up\"", 10000);
    name_elsewhere("handed", "far", other, sizeof other);
    H_LOCK_NEW(a, "handed");
    H_LOCK_NEW(b, other); /* the batch of another master, in the same run */
    h_send(b, "LOCK handed wait=10s\r\n");
    H_SILENT(b, 300);
    H_REQ(a, "OK count=0", "UNLOCK handed");
    H_REPLY(b, "OK token=%* count=1", 5000);
    H_REQ(b, "OK count=0", "UNLOCK handed");
    /* An AWAIT on one daemon wakes at the other's last COUNTDOWN. */
    H_REQ(a, "OK count=2", "LATCH gate.%s count=2", other);
    h_send(a, "AWAIT gate.%s wait=10s\r\n", other);
    H_REQ(b, "OK count=1", "COUNTDOWN gate.%s", other);
    H_SILENT(a, 300);
    H_REQ(b, "OK count=0", "COUNTDOWN gate.%s", other);
    H_REPLY(a, "OK", 5000);
    h_dlockd_stop(d1);
    h_dlockd_stop(d2);
}
END_TEST

/* A LOCK of names on three masters: granted with a token each, in the request's order; refused whole (BUSY,
 * TIMEOUT, the client gone) with none of its names left held; an UNLOCK of them all, refused whole for a name
 * not held. */
START_TEST(test_lock_across_masters)
{
    struct h_dlockd *d1 = start_on(C->port[0], "3s"), *d2 = start_on(C->port[1], "3s");
    struct h_conn *a = H_CLIENT(d1, "name=alice"), *b = H_CLIENT(d2, "name=bob"), *c = H_CLIENT(d2, "name=carol");
    struct h_conn *gone;
    char n[3][64], want[128];
    long long t[3];
    const char *r;

    h_wait_info(a, "\"backend\":\"up\"", 10000);
    h_wait_info(b, "\"backend\":\"up\"", 10000);
    h_cluster_spread_names(C, "multi", n);
    r = H_REQ(a, "OK tokens=%* counts=1,1,1", "LOCK %s %s %s", n[0], n[1], n[2]);
    ck_assert_int_eq(sscanf(strstr(r, "tokens=") + 7, "%lld,%lld,%lld", &t[0], &t[1], &t[2]), 3);
    for (int i = 0; i < 3; i++) { /* each token is its name's: a reentry repeats it */
        snprintf(want, sizeof want, "OK token=%lld count=2", t[i]);
        H_REQ(a, want, "LOCK %s", n[i]);
        H_REQ(b, "BUSY holder=alice %*", "LOCK %s wait=0", n[i]);
    }
    H_REQ(a, "OK counts=1,1,1", "UNLOCK %s %s %s", n[2], n[0], n[1]);
    H_REQ(a, "OK counts=0,0,0", "UNLOCK %s %s %s", n[0], n[1], n[2]);
    H_REQ(a, "ERR NOTHELD %*", "UNLOCK %s %s", n[0], n[2]);

    /* Refused whole: whichever name is busy, the others are not left held. */
    for (int busy = 0; busy < 3; busy++) {
        H_LOCK_NEW(b, n[busy]);
        H_REQ(a, "BUSY holder=bob %*", "LOCK %s %s %s wait=0", n[0], n[1], n[2]);
        H_REQ(a, "TIMEOUT", "LOCK %s %s %s wait=300ms", n[2], n[1], n[0]);
        for (int i = 0; i < 3; i++)
            ck_assert_int_eq(h_is_free(c, n[i]), i != busy);
        H_REQ(b, "OK count=0", "UNLOCK %s", n[busy]);
    }

    /* A waiter is granted all three once the busy one goes; an UNLOCK with a name not held releases none. */
    H_LOCK_NEW(b, n[1]);
    h_send(a, "LOCK %s %s %s wait=10s\r\n", n[0], n[1], n[2]);
    H_SILENT(a, 300);
    H_REQ(b, "OK count=0", "UNLOCK %s", n[1]);
    H_REPLY(a, "OK tokens=%* counts=1,1,1", 5000);
    H_REQ(a, "ERR NOTHELD 'multi-none' %*", "UNLOCK %s multi-none %s", n[0], n[2]);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(h_is_free(c, n[i]), 0);
    H_REQ(a, "OK counts=0,0,0", "UNLOCK %s %s %s", n[0], n[1], n[2]);

    /* A client that closes while it waits for one master leaves nothing held on the others, although its
     * session lives on. */
    for (int busy = 0; busy < 3; busy++) {
        gone = H_CLIENT(d1, "name=gone ttl=60s");
        H_LOCK_NEW(b, n[busy]);
        h_send(gone, "LOCK %s %s %s wait=30s\r\n", n[0], n[1], n[2]);
        H_SILENT(gone, 300);
        h_close(gone);
        for (int i = 0; i < 3; i++)
            if (i != busy)
                H_REQ(c, "OK token=%* count=1", "LOCK %s wait=5s", n[i]);
        for (int i = 0; i < 3; i++)
            H_REQ(i == busy ? b : c, "OK count=0", "UNLOCK %s", n[i]);
    }
    h_dlockd_stop(d1);
    h_dlockd_stop(d2);
}
END_TEST

/* Which of two connections answers first, within ms; its reply is in *line. */
static struct h_conn *first_reply(struct h_conn *a, struct h_conn *b, int ms, const char **line)
{
    for (int64_t end = h_now_ms() + ms; h_now_ms() < end;) {
        if ((*line = h_reply(a, 20)) != NULL)
            return a;
        if ((*line = h_reply(b, 20)) != NULL)
            return b;
    }
    ck_abort_msg("neither LOCK was answered in %d ms: a cycle of waits?", ms);
    return NULL;
}

/* Two clients on two daemons lock the same three names on three masters in opposite orders, over and over:
 * taken in one order (by slot), they never wait for each other in a cycle, and never hold a name at once. */
START_TEST(test_across_masters_no_deadlock)
{
    struct h_dlockd *d1 = start_on(C->port[0], "3s"), *d2 = start_on(C->port[2], "3s");
    struct h_conn *a = H_CLIENT(d1, "name=alice"), *b = H_CLIENT(d2, "name=bob"), *c = H_CLIENT(d1, "name=carol");
    struct h_conn *first, *second;
    char n[3][64];
    const char *r;

    h_wait_info(a, "\"backend\":\"up\"", 10000);
    h_wait_info(b, "\"backend\":\"up\"", 10000);
    h_cluster_spread_names(C, "multi", n);
    for (int round = 0; round < 30; round++) {
        h_send(a, "LOCK %s %s %s wait=10s\r\n", n[0], n[1], n[2]);
        h_send(b, "LOCK %s %s %s wait=10s\r\n", n[2], n[1], n[0]);
        first = first_reply(a, b, 12000, &r);
        second = first == a ? b : a;
        ck_assert_msg(h_match(r, "OK tokens=%* counts=1,1,1"), "round %d: %s", round, r);
        H_SILENT(second, 20); /* the first holds all three: the second waits */
        H_REQ(c, "BUSY %*", "LOCK %s wait=0", n[round % 3]);
        H_REQ(first, "OK counts=0,0,0", "UNLOCK %s %s %s", n[0], n[1], n[2]);
        H_REPLY(second, "OK tokens=%* counts=1,1,1", 12000);
        H_REQ(second, "OK counts=0,0,0", "UNLOCK %s %s %s", n[2], n[1], n[0]);
    }
    h_dlockd_stop(d1);
    h_dlockd_stop(d2);
}
END_TEST

/* Holds on every master, a competitor on another daemon trying them all: after a CLUSTER FAILOVER and after a
 * kill -9 of a master, the holder keeps every hold with its token and the competitor is never granted one. */
START_TEST(test_failovers_keep_holds)
{
    /* A lease longer than a failover (node timeout 2 s, then the election) and the reconnect backoff. */
    struct h_dlockd *d1 = start_on(C->port[3], "10s"), *d2 = start_on(C->port[4], "10s");
    struct h_conn *a = H_CLIENT(d1, "name=holder"), *b = H_CLIENT(d2, "name=rival"), *c = H_CLIENT(d2, "name=new");
    long long tokens[60];
    int map[H_CLUSTER_SLOTS], victim, replica, granted = 0;
    int64_t killed = 0, first_grant = 0;
    char fresh[64];

    h_wait_info(a, "\"backend\":\"up\"", 10000);
    h_wait_info(b, "\"backend\":\"up\"", 10000);
    for (int i = 0; i < 60; i++) {
        char name[32];
        snprintf(name, sizeof name, "kept%d", i);
        tokens[i] = H_LOCK_NEW(a, name);
    }
    for (int round = 0; round < 2; round++) {
        ck_assert_int_eq(h_cluster_slot_map(C->port[3], map), 3);
        victim = map[0];
        replica = h_cluster_replica_of(victim, victim);
        ck_assert_int_gt(replica, 0);
        if (round == 0) {
            h_cluster_failover(C, replica);
        } else {
            for (int i = 0;; i++) { /* a name nobody has, on the master to kill */
                snprintf(fresh, sizeof fresh, "fresh%d", i);
                if (h_cluster_name_master(C, fresh) == victim)
                    break;
            }
            h_cluster_kill(C, victim);
            killed = h_now_ms();
            h_send(c, "LOCK %s wait=60s\r\n", fresh);
        }
        /* The rival tries every name while the cluster changes, and after. */
        for (int64_t end = h_now_ms() + (round == 0 ? 3000 : 9000); h_now_ms() < end;) {
            for (int i = 0; i < 60; i++) {
                const char *r;
                h_send(b, "LOCK kept%d wait=0\r\n", i);
                r = H_REPLY(b, "%*", 20000); /* grants wait behind the failover-delay gate */
                if (strncmp(r, "OK", 2) == 0 && granted++ == 0)
                    fprintf(stderr, "round %d: kept%d granted to the rival: %s\n", round, i, r);
                if (killed && !first_grant && (r = h_reply(c, 0)) != NULL) {
                    if (strncmp(r, "OK", 2) == 0)
                        first_grant = h_now_ms();
                    else /* ERR BACKEND while the master is gone: a client asks again */
                        h_send(c, "LOCK %s wait=60s\r\n", fresh);
                }
            }
        }
        ck_assert_int_eq(granted, 0);
    }
    while (!first_grant && h_now_ms() < killed + 40000) {
        const char *r = h_reply(c, 100);
        if (r && strncmp(r, "OK", 2) == 0)
            first_grant = h_now_ms();
        else if (r)
            h_send(c, "LOCK %s wait=60s\r\n", fresh);
    }
    ck_assert_msg(first_grant, "no grant on the killed master's slots within 40 s");
    /* For the record (issue 15 asks for it): kill -9 of a master to the first grant of a name it served. */
    fprintf(stderr, "cluster failover: kill -9 of a master to the first new grant on its slots: %lld ms\n",
            (long long)(first_grant - killed));
    h_wait_info(a, "\"backend\":\"up\"", 15000);
    for (int i = 0; i < 60; i++) {
        char want[64];
        snprintf(want, sizeof want, "OK token=%lld count=2", tokens[i]);
        h_send(a, "LOCK kept%d\r\n", i);
        H_REPLY(a, want, 20000);
    }
    for (int i = 0; i < 60; i++)
        H_REQ(b, "BUSY holder=holder %*", "LOCK kept%d wait=0", i);
    ck_assert_int_eq(h_log_count(d1, H_ARGS("CROSSSLOT")), 0);
    ck_assert_int_eq(h_log_count(d2, H_ARGS("CROSSSLOT")), 0);
    h_dlockd_stop(d1);
    h_dlockd_stop(d2);
}
END_TEST

static Suite *cluster_daemon_suite(void)
{
    Suite *s = suite_create("cluster_daemon");
    TCase *live = tcase_create("live");

    tcase_add_unchecked_fixture(live, form_cluster, drop_cluster);
    tcase_set_timeout(live, 90);
    tcase_add_test(live, test_names_over_masters);
    tcase_add_test(live, test_waiter_across_masters);
    tcase_add_test(live, test_lock_across_masters);
    tcase_add_test(live, test_across_masters_no_deadlock);
    tcase_add_test(live, test_failovers_keep_holds); /* last: it fails over and kills masters */
    suite_add_tcase(s, live);
    return s;
}

int main(void)
{
    return h_run_suite(cluster_daemon_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
