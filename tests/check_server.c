/* check_server.c - listeners, admin endpoint and wait-for graph under attack: EMFILE, protected mode, deep chains. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the wait-for graph */

#define CHAIN_CONNS 2     /* sessions the chain's owners are spread over */
#define CHAIN_LEN 12000   /* owners: over the search budget (two steps each) */
#define CHAIN_NEAR 3000   /* a cycle through this many owners is within it */
#define BATCH 500         /* requests sent before their replies are read */

/* The connection holding owner i (1..CHAIN_LEN): each has a contiguous range. */
static struct h_conn *chain_conn(struct h_conn **cs, int i)
{
    return cs[(i - 1) * CHAIN_CONNS / CHAIN_LEN];
}

/* Owner o<i> of one of cs holds dc<i>, for every i. */
static void chain_holds(struct h_conn **cs)
{
    for (int from = 1; from <= CHAIN_LEN; from += BATCH) {
        int to = from + BATCH - 1 < CHAIN_LEN ? from + BATCH - 1 : CHAIN_LEN;

        for (int i = from; i <= to; i++)
            ck_assert_int_eq(h_send(chain_conn(cs, i), "#h%d LOCK dc%d owner=o%d", i, i, i), 0);
        for (int i = from; i <= to; i++)
            H_REPLY(chain_conn(cs, i), "#h%d OK token=%d count=1", H_TIMEOUT);
    }
}

/* Owner o<i> waits for dc<i-1>, held by o<i-1> (dc0 by whoever holds it). The
 * waits start from the far end, so that each one's own search is short. */
static void chain_waits(struct h_conn **cs)
{
    for (int i = CHAIN_LEN; i >= 1; i--) {
        ck_assert_int_eq(h_send(chain_conn(cs, i), "#w%d LOCK dc%d owner=o%d wait=inf", i, i - 1, i), 0);
        if (i == 1 || chain_conn(cs, i - 1) != chain_conn(cs, i))
            H_REQ(chain_conn(cs, i), "OK", "PING"); /* every wait of this connection has started */
    }
}

/* ms until p answers a PING sent now. */
static int64_t ping_ms(struct h_conn *p)
{
    int64_t t0 = h_now_ms();

    H_REQ(p, "OK", "PING");
    return h_now_ms() - t0;
}

START_TEST(test_deadlock_long_chain)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--max-waits", "6000"));
    struct h_conn *cs[CHAIN_CONNS], *r = H_CLIENT(d, "name=r ttl=120s"), *q = H_CLIENT(d, "name=q");
    struct h_conn *p = H_CLIENT(d, "name=p");

    for (int k = 0; k < CHAIN_CONNS; k++)
        cs[k] = H_CLIENT(d, "name=chain ttl=120s");
    H_LOCK_NEW(r, "dc0");
    chain_holds(cs);
    chain_waits(cs);

    /* r -> o3000 -> ... -> o1 -> r: found. */
    H_REQ(r, "ERR DEADLOCK%*", "LOCK dc%d wait=10s", CHAIN_NEAR);
    /* q -> o12000 -> ... -> o1 -> r, who waits for nothing: the search ends at
     * the budget, and does not hold up the other clients meanwhile. */
    for (int k = 0; k < 3; k++) {
        int64_t ms;

        ck_assert_int_eq(h_send(q, "LOCK dc%d wait=300ms", CHAIN_LEN), 0);
        h_sleep_ms(5);
        ms = ping_ms(p);
        ck_assert_msg(ms < 200, "a PING waited %lld ms behind a deadlock search", (long long)ms);
        H_REPLY(q, "TIMEOUT", H_TIMEOUT);
    }
    /* r -> o12000 -> ... -> o1 -> r is a cycle past the budget: r waits, unchecked. */
    H_REQ(r, "TIMEOUT", "LOCK dc%d wait=300ms", CHAIN_LEN);
    H_REQ(r, "ERR DEADLOCK%*", "LOCK dc%d wait=10s", CHAIN_NEAR);
}
END_TEST

static Suite *server_suite(void)
{
    Suite *s = suite_create("server");
    TCase *graph = tcase_create("graph");

    tcase_add_checked_fixture(graph, h_setup_redis, h_teardown);
    tcase_set_timeout(graph, 120);
    tcase_add_test(graph, test_deadlock_long_chain);
    suite_add_tcase(s, graph);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(server_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
