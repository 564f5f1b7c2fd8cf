/* check_i21_attack.c - hostile review of issue 21 (the all-or-nothing resume): races between
 * takeovers of one session on several daemons, shutdowns in the middle of a takeover, and
 * pipelining behind a resuming HELLO. Each test states the property it checks. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"
#include "proxy.h"

/* Closes c's socket and keeps the struct (its session and secret) readable. */
static void drop_conn(struct h_conn *c)
{
    shutdown(c->fd, SHUT_RDWR);
    close(c->fd);
    c->fd = -1;
    c->eof = 1;
}

/* The OK of a resume of c's session. */
static const char *expect_resumed(struct h_conn *n, const struct h_conn *c)
{
    char pat[200];

    snprintf(pat, sizeof pat, "OK session=%s secret=%s ttl=%%d proto=1 server=dlockd/%%w resumed=1 lease=%%d",
             c->session, c->secret);
    return H_REPLY(n, pat, 5000);
}

/* Sanitizer reports in a daemon's log. */
static void assert_clean_log(const struct h_dlockd *d)
{
    char *log = h_dlockd_log_read(d);
    const char *p = strstr(log, "Sanitizer");

    if (p == NULL)
        p = strstr(log, "runtime error:");
    if (p != NULL) {
        fprintf(stderr, "---- %s\n%.*s\n", d->log, 3000, p > log + 200 ? p - 200 : log);
        free(log);
        H_FAIL("sanitizer report in %s", d->log);
    }
    free(log);
}

/*
 * Two takeovers of one session interleave: d2's ADOPT runs first (its answer held back), then
 * d3's. Before, d3 took x from d2 and claimed the record, d2 claimed it after, and d3, told of
 * the move, released x as a hold granted there since: d2's client believed it held x while
 * another client was granted it. Now an ADOPT takes only holds of the daemon the record named:
 * d3's resume is refused (ERR BACKEND, nothing changed) and d2's completes.
 */
START_TEST(test_two_takeovers_interleaved)
{
    struct h_proxy px = h_proxy_start(R->port);
    const char *const *args = H_ARGS("--backend-timeout", "10s");
    struct h_dlockd *d2 = h_dlockd_start(px.port, args), *d3 = h_dlockd_start(R->port, args);
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *other = H_CLIENT(D, "name=other");
    struct h_conn *n2 = H_CONNECT(d2->port), *n3 = H_CONNECT(d3->port);
    const char *r;
    int granted;

    H_LOCK_NEW(a, "x");
    drop_conn(a); /* the client reconnects; the session waits for it on D */
    h_sleep_ms(200);
    h_proxy_arm(&px, H_PX_HOLD, "adopt", 0);
    h_send(n2, "HELLO session=%s secret=%s", a->session, a->secret);
    ck_assert_msg(h_proxy_triggered(&px, 5000), "d2 sent no ADOPT");
    h_sleep_ms(100); /* d2's ADOPT ran in Redis: x is d2's; its answer is held */
    h_send(n3, "HELLO session=%s secret=%s", a->session, a->secret);
    H_REPLY(n3, "ERR BACKEND%*", 5000); /* x is d2's already: another takeover is under way */
    h_proxy_release(&px);   /* d2 hears its ADOPT succeeded, and claims the record */
    r = h_reply(n2, 5000);
    ck_assert_msg(r != NULL, "d2's HELLO: no answer");
    h_sleep_ms(500); /* d3 hears "M" and lets go */
    ck_assert_msg(h_match(r, "OK session=%w %*"), "d2's resume: %s", r);
    /* d2's client is told it has the session, with x. Nobody else may get x now. */
    h_send(other, "LOCK x");
    r = h_reply(other, 5000);
    granted = r && h_match(r, "OK token=%d count=1");
    {
        char *holds = h_holds_at(R->port, "x");
        fprintf(stderr, "after both resumes: d2 said resumed, other's LOCK x: %s; holds of x in Redis: '%s'\n",
                r ? r : "(none)", holds);
        free(holds);
    }
    h_proxy_stop(&px);
    ck_assert_msg(!granted, "x granted to another client while the resumed session holds it: %s", r);
}
END_TEST

/*
 * The same race with an operator: KILL on d2 and a resume on d3 at once. The KILL is answered
 * OK and must end the session wherever it went; the resumed client must not be left believing
 * it holds x while x is free.
 */
START_TEST(test_kill_and_resume_interleaved)
{
    struct h_proxy px = h_proxy_start(R->port);
    const char *const *args = H_ARGS("--backend-timeout", "10s", "--adminpass", "op-secret");
    struct h_dlockd *d1 = h_dlockd_start(R->port, args);
    struct h_dlockd *d2 = h_dlockd_start(R->port, args), *d3 = h_dlockd_start(px.port, args);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=30s"), *other = H_CLIENT(d1, "name=other");
    struct h_conn *op = H_CLIENT(d2, "name=op"), *n3 = H_CONNECT(d3->port);
    const char *r, *k;
    int granted, alive;

    H_LOCK_NEW(a, "x");
    drop_conn(a);
    h_sleep_ms(200);
    H_REQ(op, "OK", "AUTH op-secret");
    h_proxy_arm(&px, H_PX_HOLD, "adopt", 0);
    h_send(n3, "HELLO session=%s secret=%s", a->session, a->secret);
    ck_assert_msg(h_proxy_triggered(&px, 5000), "d3 sent no ADOPT");
    h_sleep_ms(100);
    h_send(op, "KILL %s", a->session);
    k = H_REPLY(op, "ERR BACKEND%*", 5000); /* x is d3's already: the resume goes first */
    h_proxy_release(&px);
    r = h_reply(n3, 5000);
    ck_assert_msg(r != NULL, "d3's HELLO: no answer");
    h_sleep_ms(500);
    alive = h_match(r, "OK session=%w %*") && !n3->eof;
    fprintf(stderr, "KILL: %s; resume: %s; resumed connection %s\n", k, r, alive ? "open" : "closed");
    if (alive) {
        /* the resumed client still holds its session: is its x really held? */
        const char *p = h_request(n3, 2000, "PING");
        fprintf(stderr, "PING on resumed: %s\n", p ? p : "(none)");
        h_send(other, "LOCK x");
        r = h_reply(other, 5000);
        granted = r && h_match(r, "OK token=%d count=1");
        h_proxy_stop(&px);
        ck_assert_msg(!granted, "KILL answered OK, the session lives on d3 with x, and x is granted to another: %s",
                      r);
    }
    h_proxy_stop(&px);
}
END_TEST

/* SIGTERM while a takeover is being handed back (Redis does not answer): the daemon exits
 * cleanly, with no sanitizer report. */
START_TEST(test_sigterm_during_handback)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, H_ARGS("--backend-timeout", "600ms"));
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *n = H_CONNECT(d2->port);
    int st;

    H_LOCK_NEW(a, "y");
    H_LOCK_NEW(a, "y2");
    h_redis_pause(R);
    h_send(n, "HELLO session=%s secret=%s", a->session, a->secret);
    h_sleep_ms(100);
    h_close(n);
    h_sleep_ms(1500); /* the record read fails; or ADOPT unanswered: hand-back retried */
    h_redis_resume(R);
    h_sleep_ms(5);
    h_redis_pause(R);
    st = h_dlockd_stop(d2);
    h_redis_resume(R);
    fprintf(stderr, "d2 exit status %d\n", st);
    assert_clean_log(d2);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "d2 exit status %d", st);
}
END_TEST

/* SIGTERM while ADOPT calls are in flight (Redis stopped right after the record was read). */
START_TEST(test_sigterm_during_adopt)
{
    struct h_proxy px = h_proxy_start(R->port);
    struct h_dlockd *d2 = h_dlockd_start(px.port, H_ARGS("--backend-timeout", "10s"));
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *n = H_CONNECT(d2->port);
    int st;

    H_LOCK_NEW(a, "w1");
    h_proxy_arm(&px, H_PX_HOLD, "adopt", 0);
    h_send(n, "HELLO session=%s secret=%s\n#p PING\nLOCK w2\nQUIT", a->session, a->secret);
    ck_assert(h_proxy_triggered(&px, 5000));
    h_sleep_ms(100);
    st = h_dlockd_stop(d2);
    h_proxy_stop(&px);
    fprintf(stderr, "d2 exit status %d\n", st);
    assert_clean_log(d2);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "d2 exit status %d", st);
}
END_TEST

/* 3000 lines of every verb pipelined behind a resuming HELLO (a second HELLO, AUTH, id=
 * repeats, a final QUIT): every one answered in order, then the QUIT ends the session. */
START_TEST(test_pipeline_behind_resume)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, H_ARGS("--max-queued", "100000"));
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *n = H_CONNECT(d2->port), *b = H_CLIENT(D, "name=bob");
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    const char *r;
    int got = 0, quitok = 0;

    H_LOCK_NEW(a, "p");
    len += (size_t)snprintf(buf + len, cap - len, "HELLO session=%s secret=%s\n", a->session, a->secret);
    for (int i = 0; i < 500; i++)
        len += (size_t)snprintf(buf + len, cap - len,
                                "#t%d LOCK p id=r%d\nLOCK p id=r%d\nUNLOCK p\nHELLO name=x%d\nAUTH nope\nSTATUS p\n", i, i,
                                i, i);
    len += (size_t)snprintf(buf + len, cap - len, "QUIT\n");
    h_send_raw(n, buf, len);
    free(buf);
    r = expect_resumed(n, a);
    while ((r = h_line(n, 10000)) != NULL) {
        got++;
        if (strcmp(r, "OK") == 0)
            quitok = 1;
    }
    fprintf(stderr, "%d lines after the HELLO, QUIT %s\n", got, quitok ? "OK" : "missing");
    ck_assert_msg(quitok, "no OK to the QUIT");
    ck_assert(h_is_free(b, "p"));
    assert_clean_log(d2);
}
END_TEST

/* A resume whose ADOPT goes unanswered while the session expires on the daemon that had it:
 * that daemon's release of the hold is refused (the hold is the resumer's in Redis), then the
 * resumer hands the hold back to it -- to a daemon that no longer has the session. Nobody
 * releases it: the name stays taken for the rest of the adopted lease, though the session
 * expired and its client was told LOST. */
START_TEST(test_handback_to_expired_session)
{
    struct h_proxy px = h_proxy_start(R->port);
    struct h_dlockd *d2 = h_dlockd_start(px.port, H_ARGS("--backend-timeout", "1500ms"));
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=2s"), *b = H_CLIENT(D, "name=bob ttl=60s");
    struct h_conn *n = H_CONNECT(d2->port);
    const char *r;
    int64_t t0;

    H_LOCK_NEW(a, "e");
    drop_conn(a);
    h_sleep_ms(1000);
    h_proxy_arm(&px, H_PX_HOLD, "adopt", 0);
    h_send(n, "HELLO session=%s secret=%s", a->session, a->secret);
    ck_assert(h_proxy_triggered(&px, 5000));
    r = h_reply(n, 8000); /* the ADOPT is not answered: handed back, then ERR BACKEND */
    fprintf(stderr, "the resume: %s\n", r ? r : "(none)");
    h_proxy_release(&px);
    h_sleep_ms(500);
    t0 = h_now_ms();
    h_send(b, "LOCK e wait=40s");
    while ((r = h_reply(b, 5000)) == NULL && h_now_ms() - t0 < 45000) {
        char *h = h_holds_at(R->port, "e"), *x = h_redis_cmd(R->port, "ZRANGE", "dlock:{e}:x", "0", "-1", "WITHSCORES", NULL), /* h_holds_at: k too */
             *t = h_redis_cmd(R->port, "TIME", NULL);
        fprintf(stderr, "+%lld ms: holds of e: '%s' x: '%s' time: '%s'\n", (long long)(h_now_ms() - t0), h, x ? x : "",
                t ? t : "");
        free(h);
        free(x);
        free(t);
    }
    fprintf(stderr, "e granted after %lld ms: %s\n", (long long)(h_now_ms() - t0), r ? r : "(none)");
    h_proxy_stop(&px);
    ck_assert_msg(r && h_now_ms() - t0 < 3000, "e stayed taken %lld ms after its session expired",
                  (long long)(h_now_ms() - t0));
}
END_TEST

/* One case per test, so that CK_RUN_CASE=name runs one of them. */
static void add(Suite *s, const char *name, const TTest *t)
{
    TCase *tc = tcase_create(name);

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 90);
    _tcase_add_test(tc, t, 0, 0, 0, 1);
    suite_add_tcase(s, tc);
}

static Suite *attack_suite(void)
{
    Suite *s = suite_create("i21-attack");

    add(s, "two_takeovers_interleaved", test_two_takeovers_interleaved);
    add(s, "kill_and_resume_interleaved", test_kill_and_resume_interleaved);
    add(s, "sigterm_during_handback", test_sigterm_during_handback);
    add(s, "sigterm_during_adopt", test_sigterm_during_adopt);
    add(s, "pipeline_behind_resume", test_pipeline_behind_resume);
    add(s, "handback_to_expired_session", test_handback_to_expired_session);
    return s;
}

int main(void)
{
    return h_run_suite(attack_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
