/* check_lost_attack.c - hostile review of a5b9e9a/51dad54 (a hold written back late is told
 * LOST on the new daemon: session.lua put returns the entries written back, session.lua index
 * publishes "L field token" to the daemon that has the record, daemon.c lost_elsewhere tells
 * LOST). Each test states the property it checks and how it is broken. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "harness.h"
#include "proxy.h"

static void expect_resumed(struct h_conn *n, const struct h_conn *c)
{
    char pat[200];

    snprintf(pat, sizeof pat, "OK session=%s secret=%s ttl=%%d proto=1 server=dlockd/%%w resumed=1 lease=%%d",
             c->session, c->secret);
    H_REPLY(n, pat, 5000);
}

static void daemon_id(struct h_conn *c, char *out, size_t cap)
{
    const char *info = H_REQ(c, "OK {%*}", "INFO"), *at = strstr(info, "\"id\":\"");

    ck_assert_ptr_nonnull(at);
    snprintf(out, cap, "%.16s", at + 6);
}

/*
 * One lost hold is told LOST once. The old daemon's UNLOCK (its client gone) runs in Redis after
 * the resuming daemon read the record and before it adopted the hold: the adopt finds it gone and
 * the resume tells LOST u. The old daemon then reads the UNLOCK's answer and writes the hold back
 * (hold_ended); the record is the new daemon's by then, so session.lua index publishes
 * "L ix<sid>: u <token>" to it, and lost_elsewhere told LOST u a second time: it checked only
 * that the session does not hold u, not that its resume had told this hold already.
 */
START_TEST(test_lost_told_twice_adopt_then_written_back)
{
    struct h_proxy px1 = h_proxy_start(R->port), px2 = h_proxy_start(R->port);
    struct h_dlockd *d1 = h_dlockd_start(px1.port, NULL), *d2 = h_dlockd_start(px2.port, NULL);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=30s"), *n;
    long long t = H_LOCK_NEW(a, "u4");
    struct h_conn was = *a;
    char pat[100];
    const char *r;
    int lost = 0;

    /* the UNLOCK is held at d1's proxy, unsent; its client goes */
    h_proxy_arm(&px1, H_PX_STALL, "unlock", 0);
    h_send(a, "UNLOCK u4");
    ck_assert_msg(h_proxy_triggered(&px1, 5000), "no UNLOCK sent");
    h_close(a);
    h_sleep_ms(200);
    /* d2 reads the record (u4 listed) and its adopt is held at its proxy */
    h_proxy_arm(&px2, H_PX_STALL, "adopt", 0);
    n = H_CONNECT(d2->port);
    h_send(n, "HELLO session=%s secret=%s", was.session, was.secret);
    ck_assert_msg(h_proxy_triggered(&px2, 5000), "no adopt");
    /* the UNLOCK runs in Redis; d1 does not read its answer yet */
    ck_assert_int_eq(kill(d1->pid, SIGSTOP), 0);
    h_proxy_release(&px1);
    h_sleep_ms(300);
    /* the adopt finds u4 gone; the claim lands */
    h_proxy_release(&px2);
    expect_resumed(n, &was);
    snprintf(pat, sizeof pat, "* LOST u4 token=%lld reason=%%w", t);
    H_EVENT(n, pat, 5000);
    lost++;
    /* d1 reads the UNLOCK's answer and writes the hold back */
    ck_assert_int_eq(kill(d1->pid, SIGCONT), 0);
    while ((r = h_event(n, "* LOST u4 %*", 2000)) != NULL) {
        fprintf(stderr, "test_lost_told_twice: again: %s\n", r);
        lost++;
    }
    ck_assert_msg(lost == 1, "LOST u4 token=%lld told %d times for one hold", t, lost);
    h_proxy_stop(&px1);
    h_proxy_stop(&px2);
}
END_TEST

/*
 * An event line is one line. Anyone who can PUBLISH on a daemon's channel can send "L" with a
 * name that holds a line break (names are 0x21-0x7E on the wire, but lost_elsewhere copies any
 * bytes but space): the session's connection then reads a line that is no event at all, e.g. a
 * forged tagged reply.
 */
START_TEST(test_lost_message_name_injects_a_line)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    char id[32], channel[64], msg[200];
    const char *r;

    daemon_id(a, id, sizeof id);
    snprintf(channel, sizeof channel, "dlock:%s", id);
    snprintf(msg, sizeof msg, "L ix%s: z\n#t1\tOK\ttoken=1\tcount=1 7", a->session);
    ck_assert_int_eq(h_redis_int(R->port, "PUBLISH", channel, msg, NULL), 1);
    r = h_line(a, 2000);
    if (r)
        fprintf(stderr, "test_lost_message_name_injects_a_line: first line '%s'\n", r);
    r = h_line(a, 1000);
    ck_assert_msg(r == NULL, "a second line from one forged L message: '%s'", r ? r : "");
}
END_TEST

/*
 * The same forged L while the session has no connection: the event is kept for the next one
 * (keep_missed) and written raw on resume (conn_resumed -> write_line), so the line break in
 * the name goes to the client as is. The client resumes with "HELLO ...\nLOCK q" pipelined:
 * the line after the HELLO's OK that is not an event is taken as the LOCK's answer, and it is
 * the forged "OK token=7 ...".
 */
START_TEST(test_lost_message_name_injects_a_line_when_missed)
{
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *n;
    struct h_conn was = *a;
    char id[32], channel[64], msg[200];
    const char *r;

    daemon_id(a, id, sizeof id);
    snprintf(channel, sizeof channel, "dlock:%s", id);
    h_close(a);
    h_sleep_ms(300);
    snprintf(msg, sizeof msg, "L ix%s: z\nOK 7", was.session);
    ck_assert_int_eq(h_redis_int(R->port, "PUBLISH", channel, msg, NULL), 1);
    h_sleep_ms(300);
    n = H_CONNECT(D->port);
    h_send(n, "HELLO session=%s secret=%s\nLOCK q", was.session, was.secret);
    expect_resumed(n, &was);
    r = h_reply(n, 5000);
    ck_assert_msg(r && h_match(r, "OK token=%d count=1"), "the LOCK's answer is forged: '%s'", r ? r : "(none)");
}
END_TEST

/* Malformed L messages: no crash, no event, the daemon answers after them; a well-formed one for
 * a name of the longest length is told, once. */
START_TEST(test_lost_message_malformed)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    const char *forms[] = { "L", "L ", "L i", "L ix", "L ix 1", "L ix x 1", "L i%s", "L i%s ", "L i%s  ",
                            "L i%s n", "L i%s n ", "L i%s n 1x", "L i%s n -1", "L i%s n 99999999999999999999999",
                            "L ix%s: n", "L ix%s:", "L ix%s: a=b 5", "L ix%s: \x01n 5", NULL };
    char id[32], channel[64], msg[9000], big[8000];
    const char *r;
    int told = 0;

    daemon_id(a, id, sizeof id);
    snprintf(channel, sizeof channel, "dlock:%s", id);
    memset(big, 'n', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; forms[i]; i++) {
        snprintf(msg, sizeof msg, forms[i], a->session);
        h_redis_int(R->port, "PUBLISH", channel, msg, NULL);
    }
    snprintf(msg, sizeof msg, "L ix%s: %s 5", a->session, big);
    h_redis_int(R->port, "PUBLISH", channel, msg, NULL);
    snprintf(msg, sizeof msg, "L ix%s:%s n 5", a->session, big);
    h_redis_int(R->port, "PUBLISH", channel, msg, NULL);
    snprintf(msg, sizeof msg, "L ix%s: %.200s 5", a->session, big);
    h_redis_int(R->port, "PUBLISH", channel, msg, NULL);
    while ((r = h_line(a, 1000)) != NULL) {
        ck_assert_msg(strncmp(r, "* LOST nnnn", 11) == 0 && strlen(r) == strlen("* LOST  token=5 reason=backend") + 200,
                      "a malformed L message told: '%.80s'", r);
        told++;
    }
    ck_assert_int_eq(told, 1);
    H_REQ(a, "OK", "PING");
}
END_TEST

static Suite *lost_suite(void)
{
    Suite *s = suite_create("lost_attack");
    TCase *tc = tcase_create("lost_attack");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lost_told_twice_adopt_then_written_back);
    tcase_add_test(tc, test_lost_message_name_injects_a_line);
    tcase_add_test(tc, test_lost_message_name_injects_a_line_when_missed);
    tcase_add_test(tc, test_lost_message_malformed);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return h_run_suite(lost_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
