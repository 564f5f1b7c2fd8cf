/* check_claim_attack.c - hostile review of the resume claim (commit 1f3f8d2): the record of a
 * session decides which daemon has it, a takeover is attached and answered only once it has
 * claimed the record, and a QUIT is answered OK only when the session ended everywhere. Each
 * test states the property it checks and how it is broken. */
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
static __attribute__((unused)) void drop_conn(struct h_conn *c)
{
    shutdown(c->fd, SHUT_RDWR);
    close(c->fd);
    c->fd = -1;
    c->eof = 1;
}

/* Prints the record of sid and the holds of name in Redis. */
static void show_state(const char *why, const char *sid, const char *name)
{
    char key[80], *rec, *holds = h_holds_at(R->port, name);

    snprintf(key, sizeof key, "dlock:{%s}:session", sid);
    rec = h_redis_cmd(R->port, "HGETALL", key, NULL);
    fprintf(stderr, "%s: record '%s'; holds of %s '%s'\n", why, rec ? rec : "(none)", name, holds);
    free(rec);
    free(holds);
}

/*
 * The claim goes unanswered (the resumer's link to Redis breaks as it sends it) and the link
 * stays down past the next claim try: record_put, finding no link, marks the record dirty. When
 * the link is back, the renewal writes the dirty record with a plain put (no from) before the
 * claim is tried again; the record still names the old daemon, so the put is refused and
 * check_moved lets the session go from the resumer -- releasing, as "granted here since", the
 * holds it had just adopted (they are the resumer's in Redis, so Redis lets them go). The
 * session lives on where it was, its client still connected there and told nothing, while its
 * lock is granted to another client; the resuming HELLO hears ERR NOSESSION.
 */
START_TEST(test_claim_cut_then_dirty_renewal)
{
    struct h_proxy px = h_proxy_start(R->port);
    struct h_dlockd *d2 = h_dlockd_start(px.port, H_ARGS("--backend-timeout", "1s"));
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *b = H_CLIENT(D, "name=bob");
    struct h_conn *n = H_CONNECT(d2->port);
    const char *r;
    int granted;

    H_LOCK_NEW(a, "x");
    h_proxy_arm(&px, H_PX_CUT, "put", 2500);
    h_send(n, "HELLO session=%s secret=%s", a->session, a->secret);
    ck_assert_msg(h_proxy_triggered(&px, 5000), "d2 sent no claim");
    r = h_reply(n, 10000);
    fprintf(stderr, "the resume: %s\n", r ? r : "(none)");
    h_sleep_ms(500);
    show_state("after the resume", a->session, "x");
    /* The session is D's (the resume was not answered OK), a holds x there. */
    h_send(b, "LOCK x");
    r = h_reply(b, 3000);
    granted = r && h_match(r, "OK token=%d count=1");
    fprintf(stderr, "bob's LOCK x: %s\n", r ? r : "(none)");
    r = h_request(a, 3000, "STATUS x");
    fprintf(stderr, "alice (on D) STATUS x: %s\n", r ? r : "(none)");
    h_proxy_stop(&px);
    ck_assert_msg(!granted, "x granted to bob while alice's session holds it on D: %s", r);
}
END_TEST

/*
 * A QUIT is answered OK only once a read of its record shows no other daemon had the session
 * (daemon.c session_quit). When that read is not answered (Redis silent, or no link), on_quit_read
 * answers OK anyway: here the session was resumed on d2 (claim written, d2 answered OK resumed)
 * while D was stopped, then Redis stalls as D reads the QUIT. The old connection hears OK -- "the
 * session ended" -- though the QUIT ended nothing: the session and its hold of x go on at d2.
 */
START_TEST(test_quit_ok_when_record_unread)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *n = H_CONNECT(d2->port);
    const char *r;
    char pat[300];
    int quit_ok;

    H_LOCK_NEW(a, "x");
    ck_assert_int_eq(kill(D->pid, SIGSTOP), 0); /* D hears of the move only later */
    snprintf(pat, sizeof pat, "OK session=%s secret=%s ttl=%%d proto=1 server=dlockd/%%w resumed=1 lease=%%d",
             a->session, a->secret);
    H_REQ(n, pat, "HELLO session=%s secret=%s", a->session, a->secret);
    h_redis_pause(R);
    h_send(a, "QUIT");
    ck_assert_int_eq(kill(D->pid, SIGCONT), 0);
    r = h_reply(a, 6000);
    quit_ok = r && strcmp(r, "OK") == 0;
    fprintf(stderr, "the QUIT on D: %s\n", r ? r : "(no answer)");
    h_redis_resume(R);
    h_sleep_ms(500);
    show_state("after the QUIT", a->session, "x");
    r = h_request(n, 5000, "LOCK x");
    fprintf(stderr, "the resumed session's LOCK x on d2: %s\n", r ? r : "(none)");
    ck_assert_msg(!(quit_ok && r && h_match(r, "OK token=%d count=2")),
                  "QUIT answered OK on D, yet the session lives on d2 and still holds x: %s", r);
}
END_TEST

/*
 * The claim is cut and the resumer's link stays down longer than the session's ttl: d2's copy of
 * the session (never attached) expires there, its release of x cannot be sent ("left to its lease
 * in Redis"), and on_claimed, finding no session, gives up without handing x back
 * (resume.c on_claimed, the s == NULL branch: "its holds released" is not so). x stays d2's in
 * Redis while the session goes on at D: alice's UNLOCK x there is ERR NOTHELD though D lists x
 * as hers, and after her QUIT is answered OK (holds released at once, says PROTOCOL.md) x stays
 * taken, owned by a daemon that has no such session, until the adopted lease (30 s) runs out.
 * (Since then d2 claims again once its link is back, and its resume takes the session over.)
 */
START_TEST(test_claim_cut_copy_expires)
{
    struct h_proxy px = h_proxy_start(R->port);
    struct h_dlockd *d2 = h_dlockd_start(px.port, H_ARGS("--backend-timeout", "1s"));
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=2s"), *b = H_CLIENT(D, "name=bob");
    struct h_conn *n = H_CONNECT(d2->port);
    const char *r, *u;
    int granted;

    H_LOCK_NEW(a, "x");
    h_proxy_arm(&px, H_PX_CUT, "put", 5000);
    h_send(n, "HELLO session=%s secret=%s", a->session, a->secret);
    ck_assert_msg(h_proxy_triggered(&px, 5000), "d2 sent no claim");
    /* alice stays with D through the blackout (5 s). Then d2 is back, and its resume may take her
     * session over at any time (about 7 s in): her connection hears BYE reason=moved and closes. */
    for (int i = 0; i < 8; i++) {
        if (h_request(a, 3000, "PING") == NULL) {
            ck_assert_msg(i >= 5 && h_event(a, "* BYE reason=moved%*", 0) != NULL,
                          "alice's PING %d on D unanswered, without * BYE reason=moved after the blackout", i);
            break;
        }
        h_sleep_ms(1000);
    }
    r = h_reply(n, 3000);
    fprintf(stderr, "the resume: %s\n", r ? r : "(none)");
    show_state("after the resume", a->session, "x");
    u = h_request(a, 3000, "UNLOCK x");
    fprintf(stderr, "alice (on D) UNLOCK x: %s\n", u ? u : "(none)");
    r = h_request(a, 3000, "QUIT");
    fprintf(stderr, "alice's QUIT: %s\n", r ? r : "(none)");
    h_send(b, "LOCK x wait=5s");
    r = h_reply(b, 7000);
    granted = r && h_match(r, "OK token=%d count=1");
    fprintf(stderr, "bob's LOCK x after alice's UNLOCK and QUIT: %s\n", r ? r : "(none)");
    show_state("at the end", a->session, "x");
    h_proxy_stop(&px);
    ck_assert_msg(granted, "x still taken 5 s after its holder unlocked it and quit (UNLOCK: %s)", u ? u : "(none)");
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
    Suite *s = suite_create("claim-attack");

    add(s, "claim_cut_then_dirty_renewal", test_claim_cut_then_dirty_renewal);
    add(s, "quit_ok_when_record_unread", test_quit_ok_when_record_unread);
    add(s, "claim_cut_copy_expires", test_claim_cut_copy_expires);
    return s;
}

int main(void)
{
    return h_run_suite(attack_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
