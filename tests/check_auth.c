/* check_auth.c - sessions with a secret, nothing before AUTH, per-connection limits, closes that free requests. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ---------------------------------------------------------------- helpers */

/* Polls `#st STATUS name` on c until "waiters" is exactly n. Returns 1, or 0 on timeout. */
static int waiters_are(struct h_conn *c, const char *name, long long n, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    do {
        const char *r;

        if (h_send(c, "#st STATUS %s", name) < 0)
            return 0;
        r = h_reply_tag(c, "st", H_TIMEOUT);
        if (r != NULL && h_json_int(r, "waiters") == n)
            return 1;
        h_sleep_ms(20);
    } while (h_now_ms() < deadline);
    return 0;
}

/* ---------------------------------------------------------------- closes (item 1) */

/*
 * #a waits for lo (held by o) with id=X; #b, with the same id, is parked as
 * its repeat. #b would fail at once if it ran (permits above limit), ending
 * inside whatever ran it: the use-after-free that killed dlockd at a close.
 */
static void park_repeat(struct h_conn *c, struct h_conn *o, const char *lo)
{
    ck_assert_int_eq(h_send(c, "#a LOCK %s wait=inf id=X", lo), 0);
    ck_assert(h_wait_waiters(o, lo, 1, 3000));
    ck_assert_int_eq(h_send(c, "#b ACQUIRE %s-s limit=1 permits=2 id=X", lo), 0);
    H_REQ(c, "#p OK", "#p PING"); /* tagged requests run in order: #b is parked now */
}

/* The daemon lives, and the wait of #a is gone: lo passes to a newcomer at once. */
static void after_close(struct h_conn *o, const char *lo)
{
    struct h_conn *n;

    ck_assert(waiters_are(o, lo, 0, 3000));
    H_REQ(o, "OK count=0", "UNLOCK %s", lo);
    n = H_CLIENT(D, "name=newcomer");
    H_LOCK_NEW(n, lo);
}

static const char *const closes[] = {"close", "half-close", "QUIT"};

START_TEST(test_close_with_parked_repeat)
{
    struct h_conn *o = H_CLIENT(D, "name=owner");
    struct h_conn *c = H_CLIENT(D, "name=victim");

    H_LOCK_NEW(o, "uaf");
    park_repeat(c, o, "uaf");
    if (_i == 0) {
        h_close(c);
    } else if (_i == 1) {
        /* What it sent is answered; whatever waits is cancelled, the repeat with it. */
        ck_assert_int_eq(shutdown(c->fd, SHUT_WR), 0);
        H_EOF(c, 3000);
    } else {
        H_REQ(c, "OK", "QUIT");
        H_EOF(c, 3000);
    }
    after_close(o, "uaf");
}
END_TEST

/* At QUIT with Redis gone, the cancel of #a fails at once (ERR BACKEND), which
 * hands the id to #b inside QUIT's walk: #b must not start there. */
START_TEST(test_quit_with_parked_repeat_redis_down)
{
    struct h_conn *o = H_CLIENT(D, "name=owner");
    struct h_conn *c = H_CLIENT(D, "name=victim");
    int64_t deadline;

    H_LOCK_NEW(o, "uafq");
    park_repeat(c, o, "uafq");
    h_redis_kill(R);
    deadline = h_now_ms() + 5000;
    while (!h_match(H_REQ(o, "OK {%*}", "INFO"), "%*\"backend\":\"down\"%*") && h_now_ms() < deadline)
        h_sleep_ms(20);
    ck_assert_int_eq(h_send(c, "QUIT"), 0);
    H_REPLY(c, "#a ERR BACKEND%*", H_TIMEOUT);
    H_REPLY(c, "OK", H_TIMEOUT);
    H_EOF(c, 3000);
    H_REQ(o, "OK", "PING");
}
END_TEST

/* Nothing sent after QUIT runs: a tagged wait behind it would hold QUIT up for good. */
START_TEST(test_nothing_runs_after_quit)
{
    struct h_conn *o = H_CLIENT(D, "name=owner");
    struct h_conn *c = H_CLIENT(D, "name=quitter");
    static const char lines[] = "QUIT\n#t LOCK aq wait=inf\n#u PING\n";

    H_LOCK_NEW(o, "aq");
    ck_assert_int_eq(h_send_raw(c, lines, sizeof(lines) - 1), 0);
    H_REPLY(c, "OK", H_TIMEOUT);
    H_EOF(c, 3000);
    ck_assert(waiters_are(o, "aq", 0, 1000));
}
END_TEST

/* ---------------------------------------------------------------- per-connection limits (item 4) */

START_TEST(test_max_queued)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--max-queued", "4"));
    struct h_conn *o = H_CLIENT(d, "name=o"), *c = H_CLIENT(d, "name=c");
    static const char lines[] = "LOCK mq wait=inf\nPING\nPING\nPING\nPING\n";

    H_LOCK_NEW(o, "mq");
    ck_assert_int_eq(h_send_raw(c, lines, sizeof(lines) - 1), 0);
    ck_assert(h_wait_waiters(o, "mq", 1, 3000));
    H_REQ(c, "#t OK", "#t PING"); /* tagged lines do not queue */
    ck_assert_int_eq(h_send(c, "PING"), 0);
    H_REPLY(c, "ERR LIMIT more than 4 requests wait their turn (max-queued)", H_TIMEOUT);
    H_EOF(c, 3000);
    ck_assert(waiters_are(o, "mq", 0, 3000));
}
END_TEST

START_TEST(test_max_inflight)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--max-inflight", "3"));
    struct h_conn *o = H_CLIENT(d, "name=o"), *c = H_CLIENT(d, "name=c");

    H_REQ(o, "OK tokens=%*", "LOCK mi1 mi2 mi3");
    for (int i = 1; i <= 3; i++)
        ck_assert_int_eq(h_send(c, "#w%d LOCK mi%d wait=inf", i, i), 0);
    ck_assert(h_wait_waiters(o, "mi3", 1, 3000));
    H_REQ(c, "#x ERR LIMIT more than 3 requests at once on this connection (max-inflight)", "#x PING");
    H_REQ(c, "ERR LIMIT%*", "PING");
    H_REQ(o, "OK count=0", "UNLOCK mi1");
    H_REPLY(c, "#w1 OK token=%d count=1", H_TIMEOUT);
    H_REQ(c, "#y OK", "#y PING");
}
END_TEST

/* ---------------------------------------------------------------- framing (item 5) and long replies (item 6) */

START_TEST(test_control_bytes)
{
    struct h_conn *c = H_CLIENT(D, "name=c"), *o = H_CLIENT(D, "name=o");
    static const char nul[] = "LOCK nb\0 shared\n";

    ck_assert_int_eq(h_send_raw(c, nul, sizeof(nul) - 1), 0);
    H_REPLY(c, "ERR SYNTAX NUL byte in request", H_TIMEOUT);
    H_REQ(c, "#t ERR SYNTAX control byte 0x01 in request", "#t LOCK nb\x01");
    H_REQ(c, "ERR SYNTAX control byte 0x0d in request", "LOCK nb\r shared");
    H_REQ(o, "OK {%*\"type\":null%*}", "STATUS nb");
    H_REQ(c, "OK token=%d count=1", "LOCK\tnb\tshared\r");
    /* '}' first would give the name's keys an empty hash tag; later it is fine. */
    H_REQ(c, "ERR SYNTAX bad name '}b'", "LOCK }b");
    H_LOCK_NEW(c, "b}");
}
END_TEST

START_TEST(test_long_reply)
{
    char name[256], hello[300], owner[200];
    struct h_conn *c;
    const char *r;
    size_t len;

    memset(name, 'n', 200);
    name[200] = '\0';
    snprintf(hello, sizeof hello, "name=%s", name);
    c = H_CLIENT(D, hello);
    memset(owner, 'o', 190);
    owner[190] = '\0';
    for (int i = 0; i < 40; i++)
        H_REQ(c, "OK token=%d count=1", "LOCK big shared owner=%s%02d", owner, i);
    /* Pipelined: a reply dropped for its size would pair the next one with STATUS. */
    ck_assert_int_eq(h_send(c, "STATUS big\nPING"), 0);
    r = H_REPLY(c, "OK {%*}", H_TIMEOUT);
    len = strlen(r);
    ck_assert_msg(len > 16384, "STATUS of 40 holders is only %zu bytes", len);
    ck_assert_ptr_nonnull(strstr(r, "o39\""));
    H_REPLY(c, "OK", H_TIMEOUT);
}
END_TEST

static Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("shared");
    TCase *cfg = tcase_create("config");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_close_with_parked_repeat, 0, (int)(sizeof closes / sizeof closes[0]));
    tcase_add_test(tc, test_quit_with_parked_repeat_redis_down);
    tcase_add_test(tc, test_nothing_runs_after_quit);
    tcase_add_test(tc, test_control_bytes);
    tcase_add_test(tc, test_long_reply);
    suite_add_tcase(s, tc);

    tcase_add_checked_fixture(cfg, h_setup_redis, h_teardown);
    tcase_set_timeout(cfg, 60);
    tcase_add_test(cfg, test_max_queued);
    tcase_add_test(cfg, test_max_inflight);
    suite_add_tcase(s, cfg);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(auth_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
