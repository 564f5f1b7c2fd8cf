/* check_faults.c - integration tests of crashes and Redis failures, and of several dlockd instances on one Redis. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/*
 * Checks the holder= of a BUSY reply for a hold made through another
 * daemon: the contract names the holder's session, or "-" when no live
 * session can be named; which of the two a daemon knows for a remote (or
 * crashed) holder is left open, so both are accepted.
 */
static void check_remote_holder(const char *busy, const char *name)
{
    char holder[64];

    ck_assert_int_eq(h_kv(busy, "holder", holder, sizeof holder), 0);
    ck_assert_msg(strcmp(holder, name) == 0 || strcmp(holder, "-") == 0, "holder=%s, expected %s or -", holder,
                  name);
}

/*
 * Waits until n requests wait for name, as seen by STATUS through c or by
 * the wait queue in Redis (key layout of notes/decisions.md). Waiters on
 * other daemons may not show in STATUS.
 */
static void wait_queued(struct h_conn *c, const char *name, long long n)
{
    char key[256];
    int64_t deadline = h_now_ms() + 3000;

    snprintf(key, sizeof key, "dlock:{%s}:q", name);
    while (h_now_ms() < deadline) {
        if (h_wait_waiters(c, name, n, 0) || h_redis_int(R->port, "ZCARD", key, NULL) >= n)
            return;
        h_sleep_ms(20);
    }
    H_FAIL("%lld waiters for %s not seen within 3 s", n, name);
}

START_TEST(test_kill9_daemon_lease)
{
    struct h_dlockd *d1 = h_dlockd_start(R->port, H_ARGS("--lock-lease", "3s"));
    struct h_dlockd *d2 = h_dlockd_start(R->port, H_ARGS("--lock-lease", "3s"));
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=3s"); /* no longer than the lease: holds end with it */
    struct h_conn *b = H_CLIENT(d2, "name=bob");
    struct h_conn *c = H_CLIENT(d2, "name=carol");
    long long t = H_LOCK_NEW(a, "k"), t2 = H_LOCK_NEW(a, "k2");
    int64_t killed, el = -1, wel;
    const char *r;

    check_remote_holder(H_REQ(b, "BUSY holder=%w ttl=%d", "LOCK k"), "alice");
    ck_assert_int_eq(h_send(c, "LOCK k2 wait=20s"), 0);
    wait_queued(b, "k2", 1);
    h_sleep_ms(500);
    H_REQ(a, "OK", "PING");
    killed = h_now_ms();
    h_dlockd_kill(d1);

    /* The crashed daemon's hold stays until its Redis lease (3 s) ends. */
    h_sleep_ms(1000);
    r = H_REQ(b, "BUSY holder=%w ttl=%d", "LOCK k");
    check_remote_holder(r, "alice");
    ck_assert_int_le(H_KV_INT(r, "ttl"), 3000);
    while (h_now_ms() - killed < 3000 + 2000) {
        r = h_request(b, H_TIMEOUT, "LOCK k");
        ck_assert_msg(r != NULL && (h_match(r, "OK token=%d count=1") || h_match(r, "BUSY holder=%w ttl=%d")),
                      "LOCK k -> %s", r ? r : "(nothing)");
        if (r[0] == 'O') {
            el = h_now_ms() - killed;
            ck_assert_int_gt(H_KV_INT(r, "token"), t);
            break;
        }
        h_sleep_ms(100);
    }
    ck_assert_msg(el >= 0, "LOCK still BUSY %lld ms after the holder's daemon was killed (lease 3 s)",
                  (long long)(h_now_ms() - killed));
    /* The lease was renewed at most lock-lease/3 = 1 s before the kill. */
    ck_assert_msg(el >= 1500, "granted %lld ms after the kill: the lease was not honoured", (long long)el);

    /* A waiter on the surviving daemon is woken when the lease ends, without polling. */
    ck_assert_int_gt(H_KV_INT(H_REPLY(c, "OK token=%d count=1", 3000 + 2000), "token"), t2);
    wel = h_now_ms() - killed;
    ck_assert_msg(wel >= 1500 && wel <= 3000 + 2000, "waiter granted %lld ms after the kill", (long long)wel);

    /* The killed daemon comes back on its port. */
    h_dlockd_restart(d1);
    a = H_CLIENT(d1, "name=alice2");
    H_REQ(a, "BUSY holder=%w ttl=%d", "LOCK k");
    H_LOCK_NEW(a, "k3");
}
END_TEST

/* gate-wait past the gate: a request sent behind it waits for it to open (under ASan too) */
static const char *const LEASE_3S[] = { "--lock-lease", "3s", "--failover-delay", "3s", "--gate-wait", "15s", NULL };

/* A Redis restarted empty lacks every hold: dlockd writes them back with their tokens (the
 * holders hear JEOPARDY and SAFE, no LOST), and grants nothing new for failover-delay (3 s
 * here), so a daemon that writes back later still finds its names free. */
START_TEST(test_redis_restart_empty)
{
    struct h_dlockd *d = h_dlockd_start(R->port, LEASE_3S), *d2 = h_dlockd_start(R->port, LEASE_3S);
    struct h_conn *a = H_CLIENT(d, "name=alice"), *b = H_CLIENT(d2, "name=bob");
    long long t = H_LOCK_NEW(a, "rr"), t2 = H_LOCK_NEW(b, "rs");
    long long sent;
    char pat[128], *v;
    const char *r;

    h_redis_kill(R);
    h_redis_restart(R); /* same port, no persistence: empty */
    H_EVENT(a, "* JEOPARDY", 5000);
    H_EVENT(a, "* SAFE", 5000 + 3000);
    ck_assert_ptr_null(h_event(a, "* LOST %*", 100));
    snprintf(pat, sizeof pat, "%lld", t);
    v = h_redis_cmd(R->port, "HGETALL", "dlock:{rr}:h", NULL);
    ck_assert_msg(v && strstr(v, pat), "the hold of rr in Redis after the restart: %s", v ? v : "(none)");
    free(v);

    /* Within failover-delay a free name is not granted: the answer waits for the gate. */
    sent = h_now_ms();
    r = H_REQ(b, "OK token=%d count=1", "LOCK fresh");
    ck_assert_msg(h_now_ms() - sent > 1000, "LOCK of a free name answered %lld ms after the restart's SAFE",
                  h_now_ms() - sent);
    ck_assert_int_gt(h_kv_int(r, "token"), t);
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK rr");
    H_REQ(a, "BUSY holder=bob ttl=%d", "LOCK rs");
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(a, pat, "LOCK rr");
    H_REQ(a, "OK count=0", "UNLOCK rr all");
    r = H_REQ(b, "OK token=%d count=1", "LOCK rr");
    ck_assert_msg(h_kv_int(r, "token") > t, "token %lld after the restart, %lld before", h_kv_int(r, "token"), t);
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t2);
    H_REQ(b, pat, "LOCK rs");
}
END_TEST

/* A hold that cannot be written back, because the name is taken on the new Redis, is LOST
 * with reason=backend: never kept silently. */
START_TEST(test_redis_restart_conflict)
{
    struct h_dlockd *d = h_dlockd_start(R->port, LEASE_3S);
    struct h_conn *a = H_CLIENT(d, "name=alice");
    long long t = H_LOCK_NEW(a, "rc");
    char pat[128];
    char *v;

    kill(d->pid, SIGSTOP);
    h_redis_kill(R);
    h_redis_restart(R);
    free(h_redis_cmd(R->port, "HSET", "dlock:{rc}:h", "xffffffffffffffff:", "1 5 0 3000 0 ffffffffffffffff - mallory",
                     NULL));
    free(h_redis_cmd(R->port, "ZADD", "dlock:{rc}:x", "99999999999999", "xffffffffffffffff:", NULL));
    kill(d->pid, SIGCONT);
    snprintf(pat, sizeof pat, "* LOST rc token=%lld reason=backend", t);
    H_EVENT(a, pat, 10000);
    H_REQ(a, "ERR NOTHELD%*", "UNLOCK rc");
    v = h_redis_cmd(R->port, "HGETALL", "dlock:{rc}:h", NULL);
    ck_assert_msg(v && strstr(v, "mallory") && !strstr(v, "alice"), "rc in Redis: %s", v ? v : "(none)");
    free(v);
}
END_TEST

START_TEST(test_two_daemons_mutex)
{
    struct h_dlockd *da = h_dlockd_start(R->port, NULL);
    struct h_dlockd *db = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(da, "name=alice");
    struct h_conn *b = H_CLIENT(db, "name=bob");
    long long t = H_LOCK_NEW(a, "m"), t2;
    int64_t t0, lat;

    check_remote_holder(H_REQ(b, "BUSY holder=%w ttl=%d", "LOCK m"), "alice");
    check_remote_holder(H_REQ(b, "BUSY holder=%w ttl=%d", "LOCK m shared"), "alice");
    /* Shared holds through two daemons are compatible; an exclusive request is not. */
    H_LOCK_NEW(a, "ms shared");
    H_LOCK_NEW(b, "ms shared");
    H_REQ(H_CLIENT(da, "name=carol"), "BUSY holder=%w ttl=%d", "LOCK ms");

    ck_assert_int_eq(h_send(b, "LOCK m wait=10s"), 0);
    wait_queued(a, "m", 1);
    h_sleep_ms(200);
    t0 = h_now_ms();
    H_REQ(a, "OK count=0", "UNLOCK m");
    t2 = H_KV_INT(H_REPLY(b, "OK token=%d count=1", 3000), "token");
    lat = h_now_ms() - t0;
    fprintf(stderr, "cross-daemon handoff: %lld ms\n", (long long)lat);
    ck_assert_msg(lat < 1000, "cross-daemon handoff took %lld ms", (long long)lat);
    ck_assert_int_gt(t2, t);
    check_remote_holder(H_REQ(a, "BUSY holder=%w ttl=%d", "LOCK m"), "bob");
}
END_TEST

START_TEST(test_two_daemons_fifo)
{
    struct h_dlockd *da = h_dlockd_start(R->port, NULL);
    struct h_dlockd *db = h_dlockd_start(R->port, NULL);
    struct h_conn *h = H_CLIENT(da, "name=holder");
    struct h_conn *w[3] = {H_CLIENT(db, "name=w1"), H_CLIENT(da, "name=w2"), H_CLIENT(db, "name=w3")};
    long long prev = H_LOCK_NEW(h, "f");

    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(h_send(w[i], "LOCK f wait=20s"), 0);
        wait_queued(h, "f", i + 1);
    }
    H_REQ(h, "OK count=0", "UNLOCK f");
    for (int i = 0; i < 3; i++) {
        long long t = H_KV_INT(H_REPLY(w[i], "OK token=%d count=1", 3000), "token");

        ck_assert_int_gt(t, prev);
        prev = t;
        for (int j = i + 1; j < 3; j++)
            H_SILENT(w[j], 200);
        H_REQ(w[i], "OK count=0", "UNLOCK f");
    }
}
END_TEST

START_TEST(test_redis_stopped)
{
    /* Renewal every 3 s; the hold's lease outlives the pause below by >= 1 s. */
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--backend-timeout", "1s", "--lock-lease", "9s"));
    struct h_conn *a = H_CLIENT(d, "name=alice");
    struct h_conn *b = H_CLIENT(d, "name=bob");
    struct h_conn *c;
    const char *r = NULL;
    int64_t t0, el, deadline;

    H_LOCK_NEW(a, "j");
    h_redis_pause(R);
    t0 = h_now_ms();
    ck_assert_int_eq(h_send(b, "LOCK x"), 0);
    H_REPLY(b, "ERR BACKEND%*", 3000);
    el = h_now_ms() - t0;
    ck_assert_msg(el < 3000, "ERR BACKEND after %lld ms with backend-timeout 1s", (long long)el);
    H_EVENT(a, "* JEOPARDY", 5000 - (int)(h_now_ms() - t0));
    h_redis_resume(R);
    H_EVENT(a, "* SAFE", 5000);
    ck_assert_ptr_null(h_event(a, "* LOST%*", 0));
    H_REQ(a, "OK count=0", "UNLOCK j");
    H_REQ(b, "OK", "PING");

    /* The request that got ERR BACKEND changed nothing, even if Redis ran it late. */
    c = H_CLIENT(d, "name=carol");
    for (deadline = h_now_ms() + 2000; h_now_ms() < deadline; h_sleep_ms(100)) {
        r = h_request(c, H_TIMEOUT, "LOCK x");
        if (r == NULL || !h_match(r, "BUSY%*"))
            break;
    }
    ck_assert_msg(r != NULL && h_match(r, "OK token=%d count=1"), "LOCK x after ERR BACKEND -> %s",
                  r ? r : "(nothing)");
}
END_TEST

static Suite *faults_suite(void)
{
    Suite *s = suite_create("faults");
    TCase *tc = tcase_create("faults");

    tcase_add_checked_fixture(tc, h_setup_redis, h_teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_kill9_daemon_lease);
    tcase_add_test(tc, test_redis_restart_empty);
    tcase_add_test(tc, test_redis_restart_conflict);
    tcase_add_test(tc, test_two_daemons_mutex);
    tcase_add_test(tc, test_two_daemons_fifo);
    tcase_add_test(tc, test_redis_stopped);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* h_run_suite: srunner with CK_NORMAL between h_init() and h_fini(). */
    return h_run_suite(faults_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
