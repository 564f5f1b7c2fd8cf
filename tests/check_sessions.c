/* check_sessions.c - integration tests of HELLO, session ttl and expiry, QUIT, resume and AUTH against a real dlockd. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>


#define HELLO_REPLY(ttl) "OK session=%x secret=%x ttl=" ttl " proto=1 server=dlockd/%w resumed=0 lease=30000"

START_TEST(test_hello_fields)
{
    struct h_conn *c = H_CONNECT(D->port);
    struct h_conn *c2 = H_CONNECT(D->port);
    struct h_conn *b = H_CLIENT(D, "name=bob");
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    char sid[64], sid2[64], pat[128];
    const char *r;

    r = H_REQ(c, HELLO_REPLY("10000"), "HELLO");
    ck_assert_int_eq(h_kv(r, "session", sid, sizeof sid), 0);
    ck_assert_msg(strlen(sid) == 16, "session id '%s' is not 16 hex characters", sid);
    r = H_REQ(c2, HELLO_REPLY("10000"), "HELLO");
    ck_assert_int_eq(h_kv(r, "session", sid2, sizeof sid2), 0);
    ck_assert_str_ne(sid, sid2);

    /* Without name=, the session is named after the peer address. */
    ck_assert_int_eq(getsockname(c2->fd, (struct sockaddr *)&sa, &len), 0);
    H_LOCK_NEW(c2, "hf0");
    snprintf(pat, sizeof pat, "BUSY holder=127.0.0.1:%d ttl=%%d", ntohs(sa.sin_port));
    H_REQ(b, pat, "LOCK hf0");

    r = H_REQ(c, HELLO_REPLY("5000"), "HELLO ttl=5s name=alice");
    ck_assert_int_eq(h_kv(r, "session", sid, sizeof sid), 0);
    ck_assert_int_eq(strlen(sid), 16);
    H_LOCK_NEW(c, "hf");
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK hf");
}
END_TEST

START_TEST(test_ttl_clamp_default)
{
    struct h_conn *c = H_CONNECT(D->port);

    H_REQ(c, HELLO_REPLY("1000"), "HELLO ttl=10");
    H_REQ(c, HELLO_REPLY("3600000"), "HELLO ttl=120m");
    H_REQ(c, HELLO_REPLY("30000"), "HELLO ttl=30s");
    H_REQ(c, HELLO_REPLY("1500"), "HELLO ttl=1500ms");
}
END_TEST

/* A QUIT pipelined behind requests whose replies the client never reads (it closes at once,
 * so writing them fails) still ends its session: its holds are released then, not after the
 * session's ttl. Before, the write error cut the connection before the QUIT was read (found
 * by the Python client's tests: 9 of 10 sessions kept their hold). */
START_TEST(test_quit_behind_unread_replies)
{
    struct h_conn *o = H_CLIENT(D, "name=other");

    for (int i = 0; i < 5; i++) {
        struct h_conn *a = H_CLIENT(D, "name=quitter ttl=30s");
        const char *r;
        H_LOCK_NEW(a, "gone");
        h_send(a, "#p1 PING\n#p2 PING\n#p3 PING\n#p4 PING\n#bye QUIT");
        h_close(a);
        r = H_REQ(o, "%*", "LOCK gone wait=3s");
        ck_assert_msg(h_match(r, "OK token=%d count=1"), "round %d: the LOCK after the QUIT: %s", i, r);
        H_REQ(o, "OK count=0", "UNLOCK gone");
    }
}
END_TEST

START_TEST(test_session_expiry)
{
    struct h_conn *h = H_CLIENT(D, "name=holder ttl=1s");
    struct h_conn *w = H_CLIENT(D, "name=waiter ttl=30s");
    struct h_conn *n;
    int64_t sent, replied, granted;
    long long t;
    const char *l;
    char pat[128];

    sent = h_now_ms();
    t = H_LOCK_NEW(h, "se"); /* the holder's last request */
    replied = h_now_ms();
    ck_assert_int_eq(h_send(w, "LOCK se wait=10s"), 0);
    ck_assert(h_wait_waiters(w, "se", 1, 800));
    H_REPLY(w, "OK token=%d count=1", 1000 + 1500 + 2000);
    granted = h_now_ms();
    ck_assert_msg(granted - sent >= 1000 - 20, "waiter granted %lld ms after the holder's last request (ttl 1s)",
                  (long long)(granted - sent));
    ck_assert_msg(granted - replied <= 1000 + 1500, "waiter granted %lld ms after the holder's last request",
                  (long long)(granted - replied));

    /* The holder's connection: LOST (it had a hold), then BYE, then closed. */
    snprintf(pat, sizeof pat, "* LOST se token=%lld reason=expired", t);
    l = h_line(h, 1500);
    ck_assert_msg(l != NULL && h_match(l, pat), "expected '%s', got '%s'", pat, l ? l : "(nothing)");
    l = h_line(h, 1500);
    ck_assert_msg(l != NULL && strcmp(l, "* BYE reason=expired") == 0, "expected BYE, got '%s'", l ? l : "(nothing)");
    H_EOF(h, 2000);

    /* An expired session cannot be resumed. */
    n = H_CONNECT(D->port);
    H_REQ(n, "ERR NOSESSION%*", "HELLO session=%s secret=%s", h->session, h->secret);
}
END_TEST

START_TEST(test_expiry_closes_idle)
{
    int64_t t0 = h_now_ms(), el;
    struct h_conn *c = H_CLIENT(D, "name=idle ttl=1s");

    H_EVENT(c, "* BYE reason=expired", 1000 + 1500 + 2000);
    el = h_now_ms() - t0;
    ck_assert_msg(el >= 1000 - 20 && el <= 1000 + 1500, "BYE after %lld ms for ttl=1s", (long long)el);
    ck_assert_ptr_null(h_event(c, "* LOST%*", 0)); /* no holds, no LOST */
    H_EOF(c, 2000);
}
END_TEST

START_TEST(test_heartbeat)
{
    struct h_conn *h = H_CLIENT(D, "name=hb ttl=1s");
    struct h_conn *b = H_CLIENT(D, "name=other");

    H_LOCK_NEW(h, "hb");
    for (int i = 0; i < 10; i++) { /* 3 s, three times the ttl */
        h_sleep_ms(300);
        H_REQ(h, "OK", "PING");
    }
    H_REQ(b, "BUSY holder=hb ttl=%d", "LOCK hb");
    ck_assert_ptr_null(h_event(h, NULL, 0));
    H_REQ(h, "OK count=0", "UNLOCK hb");
}
END_TEST

START_TEST(test_heartbeat_while_waiting)
{
    struct h_conn *o = H_CLIENT(D, "name=owner ttl=30s");
    struct h_conn *w = H_CLIENT(D, "name=w ttl=1s");

    H_LOCK_NEW(o, "hw");
    ck_assert_int_eq(h_send(w, "LOCK hw wait=3s"), 0);
    /* The waiting LOCK does not keep the session alive; tagged PINGs do. */
    for (int i = 0; i < 8; i++) {
        const char *r;

        h_sleep_ms(300);
        ck_assert_int_eq(h_send(w, "#p PING"), 0);
        r = h_reply_tag(w, "p", H_TIMEOUT);
        ck_assert_msg(r != NULL && strcmp(r, "#p OK") == 0, "#p PING -> %s", r ? r : "(nothing)");
    }
    H_REPLY(w, "TIMEOUT", 3000);
    H_REQ(w, "OK", "PING");
    ck_assert_ptr_null(h_event(w, NULL, 0));
}
END_TEST

START_TEST(test_quit_releases)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    struct h_conn *c = H_CLIENT(D, "name=carol");
    int64_t t0, el;

    H_LOCK_NEW(a, "q");
    H_LOCK_NEW(a, "q2 shared");
    ck_assert_int_eq(h_send(b, "LOCK q wait=10s"), 0);
    ck_assert(h_wait_waiters(b, "q", 1, 3000));
    t0 = h_now_ms();
    H_REQ(a, "OK", "QUIT");
    H_REPLY(b, "OK token=%d count=1", 3000);
    el = h_now_ms() - t0;
    ck_assert_msg(el < 500, "waiter granted %lld ms after QUIT", (long long)el);
    H_EOF(a, 2000);
    H_LOCK_NEW(c, "q2");
}
END_TEST

START_TEST(test_close_keeps_holds)
{
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=10s");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    struct h_conn *a2;
    char sid[64], secret[64], pat[200];
    long long t = H_LOCK_NEW(a, "r");

    snprintf(sid, sizeof sid, "%s", a->session);
    snprintf(secret, sizeof secret, "%s", a->secret);
    h_close(a);
    h_sleep_ms(300);
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK r");

    a2 = H_CONNECT(D->port);
    snprintf(pat, sizeof pat, "OK session=%s secret=%s ttl=%%d proto=1 server=dlockd/%%w resumed=1 lease=%%d", sid,
             secret);
    H_REQ(a2, pat, "HELLO session=%s secret=%s", sid, secret);
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(a2, pat, "LOCK r"); /* the same hold, re-entered */
    H_REQ(a2, "OK count=1", "UNLOCK r");
    H_REQ(a2, "OK count=0", "UNLOCK r");
    ck_assert_int_gt(H_LOCK_NEW(b, "r"), t);
}
END_TEST

/* A hold lost while its session had no connection is told to the connection
 * that resumes the session: a LOST must not go to nobody. */
START_TEST(test_lost_told_on_resume)
{
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    struct h_conn *a2;
    char sid[64], secret[64], pat[200];
    long long t = H_LOCK_NEW(a, "away");

    snprintf(sid, sizeof sid, "%s", a->session);
    snprintf(secret, sizeof secret, "%s", a->secret);
    h_close(a);
    h_sleep_ms(300);
    /* The hold goes from Redis; the link is cut so that the renewal after the reconnect finds out. */
    ck_assert_int_eq(h_redis_int(R->port, "DEL", "dlock:{away}:h", "dlock:{away}:x", "dlock:{away}:k", NULL), 1);
    free(h_redis_cmd(R->port, "CLIENT", "KILL", "TYPE", "normal", NULL));
    free(h_redis_cmd(R->port, "CLIENT", "KILL", "TYPE", "pubsub", NULL));
    H_EVENT(b, "* SAFE", 5000 + 3000);
    a2 = H_CONNECT(D->port);
    H_REQ(a2, "OK session=%w secret=%w ttl=%d proto=1 server=dlockd/%w resumed=1 lease=%d",
          "HELLO session=%s secret=%s", sid, secret);
    snprintf(pat, sizeof pat, "* LOST away token=%lld reason=backend", t);
    H_EVENT(a2, pat, 1000);
    H_REQ(a2, "ERR NOTHELD %*", "UNLOCK away");
    /* Told once: a second resume hears nothing of it. */
    h_close(a2);
    a2 = H_CONNECT(D->port);
    H_REQ(a2, "OK session=%w %*", "HELLO session=%s secret=%s", sid, secret);
    H_REQ(a2, "OK", "PING");
    ck_assert_ptr_null(h_event(a2, "* LOST %*", 300));
}
END_TEST

START_TEST(test_close_cancels_waits)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob ttl=30s");
    struct h_conn *c = H_CLIENT(D, "name=carol");

    H_LOCK_NEW(a, "cw");
    ck_assert_int_eq(h_send(b, "LOCK cw wait=20s"), 0);
    ck_assert(h_wait_waiters(a, "cw", 1, 3000));
    h_close(b); /* its session lives on, its wait is gone */
    h_sleep_ms(300);
    H_REQ(a, "OK count=0", "UNLOCK cw");
    H_LOCK_NEW(c, "cw");
}
END_TEST

START_TEST(test_unknown_session)
{
    struct h_conn *c = H_CLIENT(D, "name=me");
    struct h_conn *b = H_CLIENT(D, "name=bob");

    H_REQ(c, "ERR NOSESSION%*", "HELLO session=0123456789abcdef secret=0123456789abcdef0123456789abcdef");
    H_REQ(c, "OK", "PING");
    H_LOCK_NEW(c, "us"); /* its own session is untouched */
    H_REQ(b, "BUSY holder=me ttl=%d", "LOCK us");
}
END_TEST

START_TEST(test_auth_unconfigured)
{
    struct h_conn *c = H_CLIENT(D, "name=me");

    H_REQ(c, "ERR NOAUTH%*", "AUTH anything");
    H_LOCK_NEW(c, "au");
}
END_TEST

/* ---- "config": tests that start their own daemon */

START_TEST(test_ttl_clamp_config)
{
    struct h_dlockd *d = h_dlockd_start(
        R->port, H_ARGS("--session-ttl", "5s", "--session-ttl-min", "2s", "--session-ttl-max", "20s"));
    struct h_conn *c = H_CONNECT(d->port);

    H_REQ(c, HELLO_REPLY("5000"), "HELLO");
    H_REQ(c, HELLO_REPLY("2000"), "HELLO ttl=500ms");
    H_REQ(c, HELLO_REPLY("20000"), "HELLO ttl=1m");
    H_REQ(c, HELLO_REPLY("7000"), "HELLO ttl=7s");
}
END_TEST

START_TEST(test_auth_flow)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--requirepass", "secret"));
    struct h_conn *c = H_CONNECT(d->port);
    struct h_conn *c2 = H_CONNECT(d->port);
    struct h_conn *c3 = H_CONNECT(d->port);

    H_REQ(c, "OK", "PING");
    H_REQ(c, "ERR NOAUTH%*", "LOCK a");
    H_REQ(c, "ERR NOAUTH%*", "UNLOCK a");
    H_REQ(c, "ERR NOAUTH%*", "STATUS a");
    H_REQ(c, "ERR NOAUTH%*", "INFO");
    H_REQ(c, "ERR NOAUTH%*", "AUTH wrong");
    H_REQ(c, "ERR NOAUTH%*", "LOCK a");
    H_REQ(c, "OK", "AUTH secret");
    H_LOCK_NEW(c, "a");

    H_REQ(c2, "ERR NOAUTH%*", "HELLO auth=wrong name=x");
    H_REQ(c2, "ERR NOAUTH%*", "LOCK b");
    H_REQ(c2, "OK session=%x%*", "HELLO auth=secret name=x");
    H_LOCK_NEW(c2, "b");
    H_REQ(c2, "BUSY holder=%w ttl=%d", "LOCK a");

    /* HELLO without auth= neither authenticates nor opens a session; QUIT is allowed. */
    H_REQ(c3, "ERR NOAUTH%*", "HELLO name=y");
    H_REQ(c3, "ERR NOAUTH%*", "LOCK c");
    H_REQ(c3, "OK", "QUIT");
    H_EOF(c3, 3000);
}
END_TEST

static Suite *sessions_suite(void)
{
    Suite *s = suite_create("sessions");
    TCase *tc = tcase_create("sessions");
    TCase *cfg = tcase_create("config");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hello_fields);
    tcase_add_test(tc, test_ttl_clamp_default);
    tcase_add_test(tc, test_session_expiry);
    tcase_add_test(tc, test_quit_behind_unread_replies);
    tcase_add_test(tc, test_expiry_closes_idle);
    tcase_add_test(tc, test_heartbeat);
    tcase_add_test(tc, test_heartbeat_while_waiting);
    tcase_add_test(tc, test_quit_releases);
    tcase_add_test(tc, test_close_keeps_holds);
    tcase_add_test(tc, test_lost_told_on_resume);
    tcase_add_test(tc, test_close_cancels_waits);
    tcase_add_test(tc, test_unknown_session);
    tcase_add_test(tc, test_auth_unconfigured);
    suite_add_tcase(s, tc);

    tcase_add_checked_fixture(cfg, h_setup_redis, h_teardown);
    tcase_set_timeout(cfg, 60);
    tcase_add_test(cfg, test_ttl_clamp_config);
    tcase_add_test(cfg, test_auth_flow);
    suite_add_tcase(s, cfg);
    return s;
}

int main(void)
{
    /* h_run_suite: srunner with CK_NORMAL between h_init() and h_fini(). */
    return h_run_suite(sessions_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
