/* check_sentinel.c - dlockd behind Redis Sentinel (1 master, 2 replicas, 3 sentinels): the master
 * found through the sentinels (a sentinel that is down skipped, ROLE checked), a wrong master name
 * or sentinel password reported and retried, and a kill -9 of the master survived by the
 * sessions: * JEOPARDY then * SAFE, no * BYE, new grants on the promoted replica, heard of from
 * any sentinel. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "harness.h"

static struct h_sentinels *T; /* the topology of the discovery cases, started once */

static void topology_start(void)
{
    T = h_sentinels_start("dmaster");
}

static void topology_stop(void)
{
    h_sentinels_stop(T);
    T = NULL;
}

/* A dlockd that finds master name through the sentinels at addrs (up to a NULL), with extra arguments. */
static struct h_dlockd *start_on(const char *name, const char *const *addrs, const char *const *extra)
{
    const char *argv[H_MAX_EXTRA + 1];
    int n = 0;

    for (size_t i = 0; addrs[i] != NULL; i++) {
        argv[n++] = "--sentinel";
        argv[n++] = addrs[i];
    }
    argv[n++] = "--sentinel-master";
    argv[n++] = name;
    argv[n++] = "--backend-timeout";
    argv[n++] = "500ms";
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    /* --redis points at nothing: with sentinels it is ignored. */
    return h_dlockd_start(h_free_port(), argv);
}

static struct h_dlockd *start_on_topology(const struct h_sentinels *t)
{
    return start_on(t->name, H_ARGS(t->addr[0], t->addr[1], t->addr[2]), NULL);
}

/* The JSON text "backend_addr":"127.0.0.1:PORT". */
static const char *addr_json(int port)
{
    static char buf[64];

    snprintf(buf, sizeof buf, "\"backend_addr\":\"127.0.0.1:%d\"", port);
    return buf;
}

START_TEST(test_finds_master)
{
    struct h_dlockd *d = start_on_topology(T);
    struct h_conn *a = H_CLIENT(d, "name=alice");
    char watching[100];

    h_wait_info(a, "\"backend\":\"up\"", 10000);
    h_wait_info(a, addr_json(T->master->port), 0);
    H_LOCK_NEW(a, "found");
    ck_assert_int_gt(h_redis_count_keys(T->master->port, "dlock:*"), 0);
    h_sentinels_sync(T, 5000);
    ck_assert_int_gt(h_redis_count_keys(T->replicas[0]->port, "dlock:*"), 0);
    snprintf(watching, sizeof watching, "watching %s for a switch of master dmaster", T->addr[0]);
    ck_assert_int_eq(h_log_wait(d, H_ARGS("sentinel:", watching), 1, 5000), 1);
}
END_TEST

/* The first sentinel of the list is not there: the others name the master, and are watched. */
START_TEST(test_down_sentinel_skipped)
{
    char bad[32], refused[64];
    struct h_dlockd *d;
    struct h_conn *a;

    snprintf(bad, sizeof bad, "127.0.0.1:%d", h_free_port());
    d = start_on(T->name, H_ARGS(bad, T->addr[0], T->addr[1], T->addr[2]), NULL);
    a = H_CLIENT(d, "name=alice");
    h_wait_info(a, addr_json(T->master->port), 10000);
    h_wait_info(a, "\"backend\":\"up\"", 5000);
    H_LOCK_NEW(a, "skipped");
    snprintf(refused, sizeof refused, "sentinel: %s: ", bad);
    ck_assert_int_ge(h_log_count(d, H_ARGS(refused, "refused")), 1);
    ck_assert_int_eq(h_log_count(d, H_ARGS(" warn ", "cannot watch", bad)), 1);
    ck_assert_int_eq(h_log_wait(d, H_ARGS("sentinel: watching", T->addr[0]), 1, 5000), 1);
}
END_TEST

/* No sentinel knows the name: dlockd says so in INFO and its log, keeps asking, and keeps serving. */
START_TEST(test_unknown_master)
{
    struct h_dlockd *d = start_on("nosuch", H_ARGS(T->addr[0], T->addr[1], T->addr[2]), NULL);
    struct h_conn *a = H_CLIENT(d, "name=alice");
    const char *info = h_wait_info(a, "\"backend\":\"down\"", 5000);

    ck_assert_msg(strstr(info, "no sentinel gave the address of master nosuch") != NULL, "INFO %s", info);
    ck_assert_msg(strstr(info, "does not know master nosuch") != NULL, "INFO %s", info);
    ck_assert_msg(h_json_has(info, "\"backend_addr\":\"\""), "INFO %s", info);
    /* Each round asks all three: two rounds are six debug lines, the warning is written once. */
    ck_assert_int_ge(h_log_wait(d, H_ARGS("sentinel:", "does not know master nosuch"), 6, 5000), 6);
    ck_assert_int_eq(h_log_count(d, H_ARGS(" warn ", "backend:", "no sentinel gave the address of master nosuch")),
                     1);
    H_REQ(a, "ERR BACKEND %*", "LOCK x");
    H_REQ(a, "OK", "PING");
}
END_TEST

/* A sentinel with requirepass: the wrong sentinel-password is a clear log line and INFO error; the right one works. */
START_TEST(test_sentinel_password)
{
    struct h_redis *s = h_sentinel_spawn("pwmaster", T->master->port, 2, "requirepass right\n");
    char addr[32], admin[32];
    struct h_dlockd *wrong, *right;
    struct h_conn *a, *b;
    const char *info;
    char *status = NULL;

    snprintf(addr, sizeof addr, "127.0.0.1:%d", s->port);
    wrong = start_on("pwmaster", H_ARGS(addr), H_ARGS("--sentinel-password", "wrong"));
    snprintf(admin, sizeof admin, "127.0.0.1:%d", h_free_port());
    right = start_on("pwmaster", H_ARGS(addr), H_ARGS("--sentinel-password", "right", "--admin-listen", admin));
    a = H_CLIENT(wrong, "name=alice");
    b = H_CLIENT(right, "name=bob");
    info = h_wait_info(a, "\"backend\":\"down\"", 5000);
    ck_assert_msg(strstr(info, "AUTH: WRONGPASS") != NULL, "INFO %s", info);
    ck_assert_int_eq(h_log_wait(wrong, H_ARGS(" warn ", "backend:", addr, "AUTH: WRONGPASS"), 1, 5000), 1);
    ck_assert_int_eq(h_log_wait(wrong, H_ARGS(" warn ", "cannot watch", addr, "AUTH: WRONGPASS"), 1, 5000), 1);
    h_wait_info(b, "\"backend\":\"up\"", 10000);
    h_wait_info(b, addr_json(T->master->port), 0);
    /* /status shows the master in use, and the password masked. */
    ck_assert_int_eq(h_http_get(atoi(strchr(admin, ':') + 1), "/status", NULL, &status, 5000), 200);
    ck_assert_msg(h_json_has(status, addr_json(T->master->port)), "/status %s", status);
    ck_assert_msg(h_json_has(status, "\"sentinel-password\":\"********\""), "/status %s", status);
    ck_assert_msg(h_json_has(status, "\"sentinel-master\":\"pwmaster\""), "/status %s", status);
    free(status);
}
END_TEST

/* A sentinel that names a replica: ROLE says slave, the link is refused and the sentinels asked again. */
START_TEST(test_role_checked)
{
    struct h_redis *s = h_sentinel_spawn("fake", T->replicas[0]->port, 1, "sentinel down-after-milliseconds fake 60000\n");
    char addr[32], role[100];
    struct h_dlockd *d;
    struct h_conn *a;
    const char *info;

    snprintf(addr, sizeof addr, "127.0.0.1:%d", s->port);
    d = start_on("fake", H_ARGS(addr), NULL);
    a = H_CLIENT(d, "name=alice");
    snprintf(role, sizeof role, "Redis at 127.0.0.1:%d is a slave, not the master", T->replicas[0]->port);
    info = h_wait_info(a, "\"backend\":\"down\"", 5000);
    ck_assert_int_ge(h_log_wait(d, H_ARGS("backend:", role), 2, 5000), 2);
    info = H_REQ(a, "OK {%*}", "INFO");
    ck_assert_msg(strstr(info, role) != NULL, "INFO %s", info);
    H_REQ(a, "ERR BACKEND %*", "LOCK x");
}
END_TEST

/* The master is made a replica by hand (the sentinel does not notice within the test): the
 * READONLY reply drops the link, ROLE then refuses it, and once it is a master again dlockd is back. */
START_TEST(test_demoted_master)
{
    struct h_redis *m = h_redis_start(NULL), *x = h_redis_start(NULL);
    struct h_redis *s = h_sentinel_spawn("demo", m->port, 1, "sentinel down-after-milliseconds demo 60000\n");
    char addr[32], port[16], role[100];
    struct h_dlockd *d;
    struct h_conn *a;
    char *r;

    snprintf(addr, sizeof addr, "127.0.0.1:%d", s->port);
    d = start_on("demo", H_ARGS(addr), NULL);
    a = H_CLIENT(d, "name=alice");
    h_wait_info(a, "\"backend\":\"up\"", 10000);
    H_LOCK_NEW(a, "before");
    snprintf(port, sizeof port, "%d", x->port);
    free(h_redis_cmd(m->port, "REPLICAOF", "127.0.0.1", port, NULL));
    H_REQ(a, "ERR BACKEND %*", "LOCK demoted");
    ck_assert_int_eq(h_log_wait(d, H_ARGS(" warn ", "backend:", "READONLY"), 1, 5000), 1);
    snprintf(role, sizeof role, "Redis at 127.0.0.1:%d is a slave, not the master", m->port);
    ck_assert_int_ge(h_log_wait(d, H_ARGS("backend:", role), 1, 5000), 1);
    r = h_redis_cmd(m->port, "REPLICAOF", "NO", "ONE", NULL);
    ck_assert_str_eq(r, "OK");
    free(r);
    h_wait_info(a, "\"backend\":\"up\"", 10000);
    H_LOCK_NEW(a, "promoted");
}
END_TEST

/* sentinel and sentinel-master need each other; a master name has no spaces. */
START_TEST(test_config_rejected)
{
    char out[1024];

    H_RUN(out, 1, "--test-config", "--sentinel", "127.0.0.1:26379");
    ck_assert_msg(strstr(out, "dlockd: config: sentinel: needs sentinel-master") != NULL, "%s", out);
    H_RUN(out, 1, "--test-config", "--sentinel-master", "mymaster");
    ck_assert_msg(strstr(out, "dlockd: config: sentinel-master: needs at least one sentinel") != NULL, "%s", out);
    H_RUN(out, 1, "--test-config", "--sentinel", "127.0.0.1:26379", "--sentinel-master", "my master");
    ck_assert_msg(strstr(out, "sentinel-master: must be without spaces") != NULL, "%s", out);
    H_RUN(out, 1, "--test-config", "--sentinel", "nowhere", "--sentinel-master", "mymaster");
    ck_assert_msg(strstr(out, "command line: --sentinel: expected HOST:PORT or unix:PATH") != NULL, "%s", out);
    H_RUN(out, 0, "--test-config", "--sentinel", "127.0.0.1:26379", "--sentinel", "unix:/run/s.sock",
          "--sentinel-master", "mymaster", "--sentinel-password", "pw");
}
END_TEST

/* Sends LOCK name on c until it is granted; returns when (ms), or fails the test after timeout_ms. */
static int64_t lock_until_granted(struct h_conn *c, const char *name, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    for (;;) {
        const char *r = h_request(c, 10000, "LOCK %s", name); /* failover-delay 2s: the answer may wait for it */

        if (r != NULL && h_match(r, "OK token=%d count=1"))
            return h_now_ms();
        if (r == NULL || !h_match(r, "ERR BACKEND %*") || h_now_ms() > deadline)
            H_FAIL("LOCK %s: %s", name, r ? r : "no reply");
        h_sleep_ms(20);
    }
}

/* kill -9 of the master while a session holds a lock: its connection stays, it hears JEOPARDY then
 * SAFE (no BYE), its hold is still there, and new grants go to the replica the sentinels promoted
 * once failover-delay is over. */
START_TEST(test_failover)
{
    struct h_sentinels *t = h_sentinels_start("fmaster");
    struct h_dlockd *d = start_on(t->name, H_ARGS(t->addr[0], t->addr[1], t->addr[2]),
                                  H_ARGS("--failover-delay", "2s"));
    struct h_conn *a = H_CLIENT(d, "name=alice ttl=60s"), *b = H_CLIENT(d, "name=bob ttl=60s");
    int old = t->master->port, now;
    int64_t killed, granted;

    h_wait_info(a, "\"backend\":\"up\"", 10000);
    H_LOCK_NEW(a, "held");
    h_sentinels_sync(t, 5000);
    h_redis_kill(t->master);
    killed = h_now_ms();
    granted = lock_until_granted(b, "fresh", 30000);
    printf("sentinel failover: kill -9 of the master to the first new grant: %lld ms\n", (long long)(granted - killed));
    now = h_sentinels_wait_switch(t, old, 5000);
    ck_assert_int_ne(now, old);
    H_EVENT(a, "* JEOPARDY", 1000);
    H_EVENT(a, "* SAFE", 15000);
    h_wait_info(a, addr_json(now), 0);
    ck_assert_int_gt(h_redis_count_keys(now, "dlock:*"), 0);
    H_REQ(a, "OK count=0", "UNLOCK held"); /* replicated, or else written back: never lost */
    H_REQ(a, "OK", "PING");
    ck_assert_ptr_null(h_event(a, "* BYE%*", 0));
    ck_assert_ptr_null(h_event(b, "* BYE%*", 0));
    ck_assert(!a->eof && !b->eof);
    H_LOCK_NEW(a, "after");
    h_sentinels_stop(t);
}
END_TEST

/* The sentinel a dlockd would have watched alone (the first) is stopped when the master dies:
 * the others fail over, and their +switch-master reaches dlockd, which watches every sentinel. */
START_TEST(test_switch_heard_from_any_sentinel)
{
    struct h_sentinels *t = h_sentinels_start("wmaster");
    struct h_dlockd *d = start_on(t->name, H_ARGS(t->addr[0], t->addr[1], t->addr[2]),
                                  H_ARGS("--failover-delay", "2s"));
    struct h_conn *a = H_CLIENT(d, "name=alice ttl=60s");
    const char *const watching[] = { "sentinel: watching", NULL }, *const switched[] = { "switched from", NULL };

    h_wait_info(a, "\"backend\":\"up\"", 10000);
    ck_assert_int_eq(h_log_wait(d, watching, H_SENTINELS, 10000), H_SENTINELS);
    ck_assert_int_eq(kill(t->sentinels[0]->pid, SIGSTOP), 0);
    h_redis_kill(t->master);
    ck_assert_msg(h_log_wait(d, switched, 1, 30000) >= 1, "no +switch-master heard from the running sentinels");
    H_EVENT(a, "* SAFE", 30000);
    H_LOCK_NEW(a, "after");
    ck_assert_int_eq(kill(t->sentinels[0]->pid, SIGCONT), 0);
    h_sentinels_stop(t);
}
END_TEST

static Suite *sentinel_suite(void)
{
    Suite *s = suite_create("sentinel");
    TCase *config = tcase_create("config"), *discover = tcase_create("discover"), *failover = tcase_create("failover");

    tcase_add_test(config, test_config_rejected);
    suite_add_tcase(s, config);

    tcase_add_unchecked_fixture(discover, topology_start, topology_stop);
    tcase_set_timeout(discover, 60);
    tcase_add_test(discover, test_finds_master);
    tcase_add_test(discover, test_down_sentinel_skipped);
    tcase_add_test(discover, test_unknown_master);
    tcase_add_test(discover, test_sentinel_password);
    tcase_add_test(discover, test_role_checked);
    tcase_add_test(discover, test_demoted_master);
    suite_add_tcase(s, discover);
    tcase_add_checked_fixture(failover, NULL, h_teardown);
    tcase_set_timeout(failover, 60);
    tcase_add_test(failover, test_failover);
    tcase_add_test(failover, test_switch_heard_from_any_sentinel);
    suite_add_tcase(s, failover);
    return s;
}

int main(void)
{
    return h_run_suite(sentinel_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
