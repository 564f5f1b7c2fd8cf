/* check_resume.c - a resume on another daemon is one transaction: requests pipelined behind the
 * HELLO run in the resumed session once it is whole, a resume that cannot complete changes
 * nothing, and a takeover whose client left is handed back. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "harness.h"
#include "proxy.h"

/* The OK of a resume of c's session. */
static void expect_resumed(struct h_conn *n, const struct h_conn *c)
{
    char pat[200];

    snprintf(pat, sizeof pat, "OK session=%s secret=%s ttl=%%d proto=1 server=dlockd/%%w resumed=1 lease=%%d",
             c->session, c->secret);
    H_REPLY(n, pat, 5000);
}

/* A tagged LOCK pipelined behind the resuming HELLO re-enters the hold the session has: it is
 * not taken for one this daemon knows nothing of (which Redis would drop, granting the name to
 * the next waiter while its holder lives). */
START_TEST(test_lock_behind_resume)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *b = H_CLIENT(d2, "name=bob"), *o = H_CLIENT(d2, "");
    struct h_conn *n = H_CONNECT(d2->port);
    long long t = H_LOCK_NEW(a, "x");
    const char *r;
    char pat[100];

    h_send(b, "#w LOCK x wait=20s");
    ck_assert(h_wait_waiters(o, "x", 1, 5000));
    h_send(n, "HELLO session=%s secret=%s\n#l LOCK x", a->session, a->secret);
    expect_resumed(n, a);
    snprintf(pat, sizeof pat, "#l OK token=%lld count=2", t);
    r = h_reply_tag(n, "l", 5000);
    ck_assert_msg(r && h_match(r, pat), "the pipelined LOCK: %s", r ? r : "(no answer)");
    r = h_reply_tag(b, "w", 1500);
    ck_assert_msg(r == NULL, "the waiter was granted a held name: %s", r);
    r = H_REQ(o, "OK %*", "STATUS x");
    ck_assert_msg(h_json_has(r, "\"client\":\"alice\"") && h_json_has(r, "\"count\":2"), "STATUS: %s", r);
    H_REQ(n, "OK count=0", "UNLOCK x all");
    r = h_reply_tag(b, "w", 5000);
    ck_assert_msg(r && h_match(r, "#w OK token=%d count=1"), "the waiter after the UNLOCK: %s", r ? r : "(none)");
}
END_TEST

/* A tagged QUIT pipelined behind the resuming HELLO ends the resumed session: its holds are
 * released before the QUIT's OK, and the session cannot be resumed anywhere. */
START_TEST(test_quit_behind_resume)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *b = H_CLIENT(D, "name=bob");
    struct h_conn *n = H_CONNECT(d2->port), *again;
    const char *r;

    H_LOCK_NEW(a, "y");
    h_send(n, "HELLO session=%s secret=%s\n#q QUIT", a->session, a->secret);
    expect_resumed(n, a);
    r = h_reply_tag(n, "q", 5000);
    ck_assert_msg(r && strcmp(r, "#q OK") == 0, "the pipelined QUIT: %s", r ? r : "(no answer)");
    /* released at once (through another daemon nothing orders it before this LOCK: it may wait
     * a moment), not at the end of the session's 30 s */
    H_REQ(b, "OK token=%d count=1", "LOCK y wait=5s");
    again = H_CONNECT(D->port);
    H_REQ(again, "ERR NOSESSION%*", "HELLO session=%s secret=%s", a->session, a->secret);
}
END_TEST

/* Requests pipelined behind a resuming HELLO that is refused run in the connection's own
 * session, after the refusal: never in the session named. */
START_TEST(test_lock_behind_refused_resume)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *n = H_CONNECT(d2->port);
    const char *r;

    H_LOCK_NEW(a, "z");
    h_send(n, "HELLO session=%s secret=00000000000000000000000000000000\n#l LOCK z", a->session);
    H_REPLY(n, "ERR NOSESSION%*", 5000);
    r = h_reply_tag(n, "l", 5000);
    ck_assert_msg(r && h_match(r, "#l BUSY holder=alice ttl=%d"), "the pipelined LOCK: %s", r ? r : "(none)");
}
END_TEST

/* A QUIT read by the session's old daemon after a resume elsewhere took the session over ends
 * nothing: the old connection hears BYE reason=moved, never OK, and the session goes on where
 * it was resumed, its hold too. Before, the old daemon answered OK having ended only its stale
 * copy (found by the chaos client's multi-daemon rounds). */
START_TEST(test_quit_on_old_daemon_after_resume)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *b = H_CLIENT(d2, "name=bob"), *n = H_CONNECT(d2->port);
    long long t = H_LOCK_NEW(a, "q");
    const char *r;
    char pat[100];

    ck_assert_int_eq(kill(D->pid, SIGSTOP), 0); /* it reads the QUIT only after the takeover */
    h_send(a, "QUIT");
    h_send(n, "HELLO session=%s secret=%s", a->session, a->secret);
    expect_resumed(n, a);
    ck_assert_int_eq(kill(D->pid, SIGCONT), 0);
    ck_assert(h_wait_eof(a, 5000));
    while ((r = h_line(a, 0)) != NULL)
        ck_assert_msg(strcmp(r, "* BYE reason=moved") == 0, "the old connection heard: %s", r);
    r = H_REQ(b, "BUSY %*", "LOCK q");
    ck_assert_msg(h_match(r, "BUSY holder=alice ttl=%d"), "the name after the QUIT: %s", r);
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(n, pat, "LOCK q");
    H_REQ(n, "OK count=0", "UNLOCK q all");
    H_REQ(n, "OK", "QUIT");
}
END_TEST

/* A local resume whose record write waits for Redis moves the session only with its OK: an
 * event of the session meanwhile goes to its old connection, never before the OK to the new
 * one (the chaos client read a LOST there that it then counted for the wrong session). */
START_TEST(test_local_resume_events_after_ok)
{
    struct h_proxy px = h_proxy_start(R->port);
    struct h_dlockd *d2 = h_dlockd_start(px.port, NULL);
    struct h_conn *a = H_CLIENT(d2, "name=alice ttl=30s"), *n = H_CONNECT(d2->port);
    const char *r;

    H_REQ(a, "OK token=%d count=1", "LOCK e lease=1500ms");
    h_proxy_arm(&px, H_PX_HOLD, "put", 0);
    h_send(n, "HELLO session=%s secret=%s", a->session, a->secret);
    ck_assert_msg(h_proxy_triggered(&px, 5000), "no record write for the resume");
    H_EVENT(a, "* LOST e token=%d reason=lease", 5000); /* the lease ends while the HELLO waits */
    h_proxy_release(&px);
    r = h_line(n, 5000);
    ck_assert_msg(r && h_match(r, "OK session=%w%*resumed=1%*"), "the resuming connection's first line: %s",
                  r ? r : "(none)");
    H_EVENT(a, "* BYE reason=moved", 5000);
    h_proxy_stop(&px);
}
END_TEST

/* A wait whose end passed while it was held behind the failover gate, queued when the gate
 * opens and granted at once by a release in the same round, gets a hold with what is left of
 * its queue entry's lease: nothing. It must not be answered OK for a hold that ended before
 * it was given (found by the chaos client, seed 425130: a semaphore over its limit, one
 * holder told OK, then LOST reason=backend). */
START_TEST(test_no_ok_for_a_grant_born_lapsed)
{
    struct h_dlockd *d1 = h_dlockd_start(R->port, H_ARGS("--failover-delay", "2s", "--gate-wait", "10s"));
    struct h_conn *a = H_CLIENT(d1, "name=a"), *b = H_CLIENT(d1, "name=b"), *o = H_CLIENT(d1, "name=o");
    const char *const restarted[] = { "writing holds back", NULL };
    const char *r;

    h_redis_kill(R);
    h_redis_restart(R); /* empty: the gate closes */
    ck_assert(h_log_wait(d1, restarted, 1, 10000));
    h_send(a, "ACQUIRE s limit=1");
    h_sleep_ms(100);
    h_send(b, "ACQUIRE s limit=1 wait=300ms");
    h_sleep_ms(100);
    h_send(a, "RELEASE s");
    H_REPLY(a, "OK token=%d held=1 free=0", 10000);
    H_REPLY(a, "OK held=0 free=%d", 5000);
    r = h_reply(b, 5000);
    ck_assert_msg(r != NULL, "b's ACQUIRE was not answered");
    if (h_match(r, "OK token=%d held=1 free=0")) {
        const char *st = H_REQ(o, "OK %*", "STATUS s");
        ck_assert_msg(h_json_has(st, "\"client\":\"b\""), "b was told %s, but holds nothing: %s", r, st);
    } else {
        ck_assert_msg(strcmp(r, "TIMEOUT") == 0, "b's ACQUIRE: %s", r);
    }
}
END_TEST

static const char *const GATE_5S[] = { "--lock-lease", "3s", "--failover-delay", "5s", "--gate-wait", "20s", NULL };

/* While the failover gate is closed a resume from another daemon is refused at once, nothing
 * changed: the session goes on where it was, and its UNLOCK there frees the name once the
 * gate opens. Before, the takeover waited behind the gate and ran after the client had given
 * up and gone back: that daemon's UNLOCK then got NOTHELD and the name stayed taken. */
START_TEST(test_resume_behind_gate)
{
    struct h_dlockd *d1 = h_dlockd_start(R->port, GATE_5S), *d2 = h_dlockd_start(R->port, GATE_5S);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=30s"), *b = H_CLIENT(d2, "name=bob"), *n;
    const char *const restarted[] = { "writing holds back", NULL };
    int64_t sent;
    const char *r;

    H_LOCK_NEW(a, "g");
    h_redis_kill(R);
    h_redis_restart(R); /* empty: both daemons close their gates */
    H_EVENT(a, "* SAFE", 10000);
    ck_assert(h_log_wait(d2, restarted, 1, 10000));
    n = H_CONNECT(d2->port);
    h_send(n, "HELLO session=%s secret=%s", a->session, a->secret);
    sent = h_now_ms();
    r = H_REPLY(n, "ERR BACKEND%*", 3000);
    ck_assert_msg(strstr(r, "gate") && h_now_ms() - sent < 2500, "the resume behind the gate: %s after %lld ms", r,
                  (long long)(h_now_ms() - sent));
    h_close(n);
    h_send(a, "UNLOCK g");
    H_REPLY(a, "OK count=0", 20000); /* once the gate opens */
    H_LOCK_NEW(b, "g");
}
END_TEST

/* A queued LOCK whose wait runs out while Redis stalls hears ERR BACKEND (its cancel is not
 * answered). Its queue place ends with its wait in Redis too: the name, released once Redis is
 * back, is not granted to it behind everyone's back (before, that grant blocked the name for a
 * whole lease, or the owner's next LOCK re-entered it). */
START_TEST(test_no_grant_after_backend_error)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--backend-timeout", "500ms"));
    struct h_conn *a = H_CLIENT(d, "name=alice"), *b = H_CLIENT(d, "name=bob"), *c = H_CLIENT(d, "name=carol");
    const char *r;

    H_LOCK_NEW(a, "late");
    h_send(b, "LOCK late wait=1s");
    ck_assert(h_wait_waiters(c, "late", 1, 5000));
    h_redis_pause(R);
    r = H_REPLY(b, "ERR BACKEND%*", 5000);
    h_redis_resume(R);
    H_REQ(a, "OK count=0", "UNLOCK late");
    H_LOCK_NEW(c, "late");
    H_REQ(c, "OK count=0", "UNLOCK late");
    H_REQ(b, "OK token=%d count=1", "LOCK late");
    H_REQ(b, "OK count=0", "UNLOCK late");
    ck_assert(h_is_free(c, "late"));
    (void)r;
}
END_TEST

/* KILL of a session another daemon has takes it, then ends it: its client, still on that
 * daemon, hears LOST reason=admin for each hold (before, BYE reason=moved and nothing of its
 * holds), and a grant that daemon made for it meanwhile does not stay behind. */
START_TEST(test_kill_across_daemons)
{
    const char *const *args = H_ARGS("--adminpass", "op-secret");
    struct h_dlockd *d1 = h_dlockd_start(R->port, args), *d2 = h_dlockd_start(R->port, args);
    struct h_conn *v = H_CLIENT(d1, "name=victim ttl=30s"), *h = H_CLIENT(d1, "name=holder");
    struct h_conn *op = H_CLIENT(d2, "name=op"), *o = H_CLIENT(d2, "name=other");
    long long t = H_LOCK_NEW(v, "k1");
    char pat[100];

    H_REQ(op, "OK", "AUTH op-secret");
    H_LOCK_NEW(h, "k2");
    h_send(v, "#w LOCK k2 wait=20s");
    ck_assert(h_wait_waiters(o, "k2", 1, 5000));
    /* the grant of k2 to the victim races with the takeover */
    h_send(h, "UNLOCK k2");
    h_send(op, "KILL %s", v->session);
    H_REPLY(h, "OK count=0", 5000);
    H_REPLY(op, "OK", 5000);
    snprintf(pat, sizeof pat, "* LOST k1 token=%lld reason=admin", t);
    H_EVENT(v, pat, 5000);
    H_LOCK_NEW(o, "k1");
    H_REQ(o, "OK token=%d count=1", "LOCK k2 wait=5s");
    (void)d2;
}
END_TEST

/* A hold lost while its session has no connection is told to the client wherever it resumes:
 * on another daemon too (before, the LOST stayed with the daemon it left). */
START_TEST(test_lost_told_on_other_daemon)
{
    const char *const *args = H_ARGS("--adminpass", "op-secret");
    struct h_dlockd *d1 = h_dlockd_start(R->port, args), *d2 = h_dlockd_start(R->port, args);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=30s"), *op = H_CLIENT(d1, "name=op"), *n;
    long long t = H_LOCK_NEW(a, "f1");
    struct h_conn was = *a; /* its session and secret */
    char pat[100];

    H_REQ(op, "OK", "AUTH op-secret");
    h_close(a);
    h_sleep_ms(200);
    H_REQ(op, "OK count=1", "FORCE f1");
    n = H_CONNECT(d2->port);
    h_send(n, "HELLO session=%s secret=%s", was.session, was.secret);
    expect_resumed(n, &was);
    snprintf(pat, sizeof pat, "* LOST f1 token=%lld reason=%%w", t);
    H_EVENT(n, pat, 3000);
    H_REQ(n, "ERR NOTHELD%*", "UNLOCK f1");
}
END_TEST

/* An UNLOCK whose connection closed before its answer: Redis took the hold out of the session's
 * record with the release, and the daemon put it back, so that the resume tells the client the
 * hold is gone (as for any hold that ended while nobody could hear it). */
START_TEST(test_unlock_unanswered_told_on_resume)
{
    struct h_dlockd *d1 = h_dlockd_start(R->port, NULL), *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=30s"), *o = H_CLIENT(d2, "name=other"), *n;
    long long t = H_LOCK_NEW(a, "u1");
    struct h_conn was = *a;
    char pat[100];

    ck_assert_int_eq(kill(R->pid, SIGSTOP), 0); /* its answer comes after the close */
    h_send(a, "UNLOCK u1");
    h_close(a);
    h_sleep_ms(300);
    ck_assert_int_eq(kill(R->pid, SIGCONT), 0);
    H_LOCK_NEW(o, "u1"); /* released */
    n = H_CONNECT(d2->port);
    h_send(n, "HELLO session=%s secret=%s", was.session, was.secret);
    expect_resumed(n, &was);
    snprintf(pat, sizeof pat, "* LOST u1 token=%lld reason=%%w", t);
    H_EVENT(n, pat, 3000);
    (void)d1;
}
END_TEST

/* Sends UNLOCK name on a and closes a while Redis is stopped, then stops d1 and lets Redis run
 * the release: d1 has its answer to read, for a client that is gone. */
static void unlock_unanswered(struct h_dlockd *d1, struct h_conn *a, const char *name)
{
    ck_assert_int_eq(kill(R->pid, SIGSTOP), 0);
    h_send(a, "UNLOCK %s", name);
    h_close(a);
    h_sleep_ms(300);
    ck_assert_int_eq(kill(d1->pid, SIGSTOP), 0);
    ck_assert_int_eq(kill(R->pid, SIGCONT), 0);
    h_sleep_ms(300);
}

/* The old daemon writes the hold of the unanswered UNLOCK back only after the session moved:
 * the daemon that has it now hears of it and tells LOST. */
START_TEST(test_unanswered_written_back_after_claim)
{
    struct h_dlockd *d1 = h_dlockd_start(R->port, NULL), *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=30s"), *n;
    long long t = H_LOCK_NEW(a, "u2");
    struct h_conn was = *a;
    char pat[100];

    unlock_unanswered(d1, a, "u2");
    n = H_CONNECT(d2->port);
    h_send(n, "HELLO session=%s secret=%s", was.session, was.secret);
    expect_resumed(n, &was);
    ck_assert_int_eq(kill(d1->pid, SIGCONT), 0);
    snprintf(pat, sizeof pat, "* LOST u2 token=%lld reason=%%w", t);
    H_EVENT(n, pat, 5000);
}
END_TEST

/* The same, written back after the resuming daemon read the record and before it claimed it:
 * the claim finds it there. */
START_TEST(test_unanswered_written_back_before_claim)
{
    struct h_proxy px = h_proxy_start(R->port);
    struct h_dlockd *d1 = h_dlockd_start(R->port, NULL), *d2 = h_dlockd_start(px.port, NULL);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=30s"), *n;
    long long t = H_LOCK_NEW(a, "u3");
    struct h_conn was = *a;
    char key[100], field[100], pat[100], *v = NULL;

    unlock_unanswered(d1, a, "u3");
    h_proxy_arm(&px, H_PX_STALL, "put", 0);
    n = H_CONNECT(d2->port);
    h_send(n, "HELLO session=%s secret=%s", was.session, was.secret);
    ck_assert_msg(h_proxy_triggered(&px, 5000), "no claim of the record");
    ck_assert_int_eq(kill(d1->pid, SIGCONT), 0);
    snprintf(key, sizeof key, "dlock:{%s}:session", was.session);
    snprintf(field, sizeof field, "ix%s: u3", was.session);
    for (int i = 0; i < 100 && v == NULL; i++) {
        v = h_redis_cmd(R->port, "HGET", key, field, NULL);
        if (v == NULL)
            h_sleep_ms(50);
    }
    ck_assert_msg(v != NULL, "the old daemon did not write the hold back");
    free(v);
    h_proxy_release(&px);
    expect_resumed(n, &was);
    snprintf(pat, sizeof pat, "* LOST u3 token=%lld reason=%%w", t);
    H_EVENT(n, pat, 5000);
    h_proxy_stop(&px);
}
END_TEST

static Suite *resume_suite(void)
{
    Suite *s = suite_create("resume");
    TCase *tc = tcase_create("resume");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lock_behind_resume);
    tcase_add_test(tc, test_quit_behind_resume);
    tcase_add_test(tc, test_lock_behind_refused_resume);
    tcase_add_test(tc, test_quit_on_old_daemon_after_resume);
    tcase_add_test(tc, test_local_resume_events_after_ok);
    tcase_add_test(tc, test_no_ok_for_a_grant_born_lapsed);
    tcase_add_test(tc, test_resume_behind_gate);
    tcase_add_test(tc, test_no_grant_after_backend_error);
    tcase_add_test(tc, test_kill_across_daemons);
    tcase_add_test(tc, test_unlock_unanswered_told_on_resume);
    tcase_add_test(tc, test_unanswered_written_back_after_claim);
    tcase_add_test(tc, test_unanswered_written_back_before_claim);
    tcase_add_test(tc, test_lost_told_on_other_daemon);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return h_run_suite(resume_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
