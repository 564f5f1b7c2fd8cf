/* check_latch_limits.c - latch budgets per client address, latches in LIST, and AWAITs answered
 * after a pub/sub reconnect that lost the news of their latch reaching 0. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADMINPASS "b0ss"
#define MANY_LATCHES 50

/* A session from the loopback address src, named name. */
static struct h_conn *client_from(const struct h_dlockd *d, const char *src, const char *name)
{
    struct h_conn *c = h_connect_from_try(d->port, src);

    if (c == NULL)
        H_FAIL("cannot connect from %s", src);
    H_REQ(c, "OK session=%w %*", "HELLO name=%s", name);
    return c;
}

/* Ten sessions that create latches and QUIT leave them counted against their address: it is
 * out of latches, another address is not, and the daemon-wide total is not spent. */
START_TEST(test_quit_sessions_leave_peer_budget)
{
    struct h_conn *c, *other;
    int made = 0;

    D = h_dlockd_start(R->port, H_ARGS("--max-latches", "2", "--max-latches-per-peer", "4", "--max-latches-total",
                                       "6"));
    for (int i = 0; i < 10; i++) {
        c = H_CLIENT(D, "name=filler");
        for (int j = 0; j < 2; j++) {
            const char *r = H_REQ(c, "%*", "LATCH fill-%d-%d count=1 ttl=1h", i, j);
            if (h_match(r, "OK count=1"))
                made++;
            else
                ck_assert_msg(h_match(r, "ERR LIMIT %*max-latches-per-peer is 4"), "LATCH: %s", r);
        }
        H_REQ(c, "OK", "QUIT");
        h_close(c);
    }
    ck_assert_int_eq(made, 4);
    /* A new session from the same address: its address's latches have not ended. */
    c = H_CLIENT(D, "name=again");
    H_REQ(c, "ERR LIMIT 4 latches created from 127.0.0.1 have not ended%*", "LATCH again count=1");
    /* Another address has a budget of its own. */
    other = client_from(D, "127.0.0.2", "other");
    H_REQ(other, "OK count=1", "LATCH other-1 count=1");
    H_REQ(other, "OK count=1", "LATCH other-2 count=1");
    /* A latch that ends gives its place back to the address that created it. */
    H_REQ(other, "OK count=0", "COUNTDOWN fill-0-0");
    H_REQ(c, "OK count=1", "LATCH again count=1");
    /* Six latches are left: the total binds a third address. */
    other = client_from(D, "127.0.0.3", "third");
    H_REQ(other, "ERR LIMIT %*max-latches-total is 6", "LATCH third count=1");
}
END_TEST

/* LIST shows the latches created through this daemon, with their creator, after it quit too. */
START_TEST(test_list_shows_latches)
{
    struct h_conn *a, *o;
    const char *r;
    char sid[64], pat[400];

    D = h_dlockd_start(R->port, H_ARGS("--adminpass", ADMINPASS));
    a = H_CLIENT(D, "name=alice");
    snprintf(sid, sizeof sid, "%s", a->session);
    o = H_CONNECT(D->port);
    H_REQ(o, "OK", "AUTH %s", ADMINPASS);
    H_REQ(a, "OK count=3", "LATCH lt-1 count=3 ttl=1h");
    H_REQ(a, "OK count=1", "LATCH lt-2 count=1");
    H_REQ(a, "OK count=1", "LATCH other count=1");
    H_REQ(a, "OK count=2", "COUNTDOWN lt-1");
    H_REQ(a, "OK", "QUIT");
    snprintf(pat, sizeof pat,
             "OK {\"names\":[],\"latches\":[{\"name\":\"lt-1\",\"count\":2,\"ttl_ms\":%%d,\"session\":\"%s\","
             "\"client\":\"alice\",\"peer\":\"127.0.0.1\"},{\"name\":\"lt-2\",%%*}],\"more\":0}",
             sid);
    r = H_REQ(o, pat, "LIST lt-*");
    ck_assert_msg(h_json_int(r, "ttl_ms") > 3500 * 1000, "%s", r);
    H_REQ(o, "OK {\"names\":[],\"latches\":[{\"name\":\"lt-1\",%*}],\"more\":1}", "LIST lt-* limit=1");
    /* One that ended is gone from the list. */
    H_REQ(o, "OK count=0", "COUNTDOWN lt-2");
    H_REQ(o, "OK {\"names\":[],\"latches\":[{\"name\":\"lt-1\",%*}],\"more\":0}", "LIST lt-*");
}
END_TEST

/* Kills the pub/sub connection of the daemon started first (the oldest subscriber). */
static void kill_first_pubsub(void)
{
    char *list = h_redis_cmd(R->port, "CLIENT", "LIST", "TYPE", "pubsub", NULL), *save = NULL, id[32];
    long long best = -1;

    ck_assert_ptr_nonnull(list);
    for (char *l = strtok_r(list, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        long long n = strtoll(l + 3, NULL, 10);
        if (strncmp(l, "id=", 3) == 0 && (best < 0 || n < best))
            best = n;
    }
    free(list);
    ck_assert_int_ge(best, 0);
    snprintf(id, sizeof id, "%lld", best);
    ck_assert_int_eq(h_redis_int(R->port, "CLIENT", "KILL", "ID", id, NULL), 1);
}

/* The latches reach 0 through another daemon while this one's pub/sub connection is gone:
 * once it is back, its AWAITs are answered, from a few batch calls, not one per latch. */
START_TEST(test_await_after_resubscribe)
{
    struct h_dlockd *d2;
    struct h_conn *w, *c;
    size_t cap = MANY_LATCHES * 64, len = 0;
    char *buf = malloc(cap), tag[16];
    const char *r;
    long long calls;

    D = h_dlockd_start(R->port, NULL);
    d2 = h_dlockd_start(R->port, NULL);
    w = H_CLIENT(D, "name=waiter");
    c = H_CLIENT(d2, "name=counter");
    for (int i = 0; i < MANY_LATCHES; i++)
        H_REQ(c, "OK count=1", "LATCH rs-%d count=1 ttl=1h", i);
    H_REQ(c, "OK count=2", "LATCH rs-keep count=2 ttl=1h");
    for (int i = 0; i < MANY_LATCHES; i++)
        len += (size_t)snprintf(buf + len, cap - len, "#a%d AWAIT rs-%d wait=60s\n", i, i);
    ck_assert_int_eq(h_send_raw(w, buf, len), 0);
    free(buf);
    /* Read after the AWAITs, in the same batch or a later one: once it is answered, every
     * AWAIT has read its latch and waits. */
    ck_assert_int_eq(h_send(w, "#k AWAIT rs-keep wait=60s\n#m STATUS rs-keep"), 0);
    ck_assert_ptr_nonnull(h_reply_tag(w, "m", H_TIMEOUT));
    ck_assert_ptr_null(h_reply_tag(w, "a0", 100));

    ck_assert_int_eq(kill(D->pid, SIGSTOP), 0); /* it cannot reconnect before the latches reach 0 */
    kill_first_pubsub();
    for (int i = 0; i < MANY_LATCHES; i++)
        H_REQ(c, "OK count=0", "COUNTDOWN rs-%d", i);
    H_REQ(c, "OK count=1", "COUNTDOWN rs-keep");
    calls = h_redis_cmdstat(R->port, "fcall") + h_redis_cmdstat(R->port, "evalsha");
    ck_assert_int_eq(kill(D->pid, SIGCONT), 0);

    for (int i = 0; i < MANY_LATCHES; i++) {
        snprintf(tag, sizeof tag, "a%d", i);
        r = h_reply_tag(w, tag, 10000);
        if (r == NULL || !h_match(r, "#a%d OK"))
            H_FAIL("AWAIT rs-%d after the reconnect: %s", i, r ? r : "no answer");
    }
    calls = h_redis_cmdstat(R->port, "fcall") + h_redis_cmdstat(R->port, "evalsha") - calls;
    ck_assert_msg(calls < MANY_LATCHES / 5, "%lld script calls for %d latches", calls, MANY_LATCHES);
    ck_assert_ptr_null(h_reply_tag(w, "k", 300)); /* still above 0: it still waits */
    H_REQ(c, "OK count=0", "COUNTDOWN rs-keep");
    H_REPLY(w, "#k OK", H_TIMEOUT);
}
END_TEST

static Suite *latch_limits_suite(void)
{
    Suite *s = suite_create("latch_limits");
    TCase *tc = tcase_create("latch_limits");

    tcase_add_checked_fixture(tc, h_setup_redis, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_quit_sessions_leave_peer_budget);
    tcase_add_test(tc, test_list_shows_latches);
    tcase_add_test(tc, test_await_after_resubscribe);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(latch_limits_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
