/* check_ack.c - integration tests of min-replicas-ack: a master with one replica, grants answered only
 * once WAIT says the replica has them, and undone when it does not or their client went. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct h_redis *replica;

/* The master R and its replica, in sync. */
static void setup(void)
{
    R = h_redis_start(H_ARGS("--repl-diskless-sync-delay", "0"));
    D = NULL;
    replica = h_redis_replica_start(R);
}

static void teardown(void)
{
    h_teardown();
    replica = NULL;
}

/* 1 when the hold of name on port has token (its value: count token ...). */
static int has_token(int port, const char *name, long long token)
{
    char *v = h_holds_at(port, name), want[32];
    int yes;

    snprintf(want, sizeof want, " %lld ", token);
    yes = strstr(v, want) != NULL;
    free(v);
    return yes;
}

/* A grant is answered once the replica has it: the token is there right after the OK. */
START_TEST(test_granted_on_replica)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1"));
    struct h_conn *c = H_CLIENT(d, "name=a");
    long long t;

    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "a%d", i);
        t = H_LOCK_NEW(c, name);
        ck_assert_msg(has_token(replica->port, name, t), "token %lld of %s is not on the replica", t, name);
    }
    H_REQ(c, "OK token=%d held=2 free=1", "ACQUIRE sem permits=2 limit=3");
    ck_assert_int_ge(h_info_num(c, "ack_rounds"), 6);
    ck_assert_int_eq(h_info_num(c, "ack_refused"), 0);
}
END_TEST

/* The replica does not answer: the grant is refused within backend-timeout and undone. */
START_TEST(test_replica_stopped)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "1s"));
    struct h_conn *a = H_CLIENT(d, "name=a"), *b = H_CLIENT(d, "name=b");
    int64_t t0;
    long long t;

    h_redis_pause(replica);
    t0 = h_now_ms();
    H_REQ(a, "ERR BACKEND only 0 of 1 replicas confirmed%*", "LOCK s");
    ck_assert_msg(h_now_ms() - t0 < 2000, "refused after %lld ms", (long long)(h_now_ms() - t0));
    ck_assert_msg(h_holds_gone(R->port, "s", 3000), "the refused grant of s is still in Redis");
    h_redis_resume(replica);
    t = H_LOCK_NEW(b, "s wait=5s");
    ck_assert(has_token(replica->port, "s", t));
    ck_assert_int_eq(h_info_num(b, "ack_refused"), 1);
    H_REQ(a, "ERR NOTHELD%*", "UNLOCK s");
}
END_TEST

/* A waiter handed the name by an UNLOCK through another daemon (heard by pub/sub) is answered only after the ack. */
START_TEST(test_handoff_waits_for_ack)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "4s"));
    struct h_dlockd *other = h_dlockd_start(R->port, NULL);
    struct h_conn *holder = H_CLIENT(other, "name=holder"), *w = H_CLIENT(d, "name=waiter");
    const char *rep;
    long long t;

    H_LOCK_NEW(holder, "h");
    ck_assert_int_eq(h_send(w, "LOCK h wait=20s"), 0);
    ck_assert_int_eq(h_wait_waiters(holder, "h", 1, 3000), 1);
    h_redis_pause(replica);
    H_REQ(holder, "OK count=0", "UNLOCK h");
    H_SILENT(w, 600);
    h_redis_resume(replica);
    rep = H_REPLY(w, "OK token=%d count=1", 3000);
    t = H_KV_INT(rep, "token");
    ck_assert_msg(has_token(replica->port, "h", t), "token %lld of h is not on the replica", t);
}
END_TEST

/* A client that closes while its answer is held gives its grant up. */
START_TEST(test_close_while_held)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "4s"));
    struct h_conn *a = H_CLIENT(d, "name=a"), *b = H_CLIENT(d, "name=b");
    int64_t deadline = h_now_ms() + 3000;
    char *v;

    h_redis_pause(replica);
    ck_assert_int_eq(h_send(a, "LOCK g"), 0);
    for (;; h_sleep_ms(20)) {
        v = h_holds_at(R->port, "g");
        if (v[0] || h_now_ms() > deadline)
            break;
        free(v);
    }
    ck_assert_msg(v[0], "the grant of g did not reach Redis");
    free(v);
    h_close(a);
    ck_assert_msg(h_holds_gone(R->port, "g", 6000), "the grant of g held for a closed client is still in Redis");
    h_redis_resume(replica);
    H_LOCK_NEW(b, "g");
}
END_TEST

/* min-replicas-ack 0, the default: no round, and a stopped replica delays nothing. */
START_TEST(test_off)
{
    struct h_dlockd *d = h_dlockd_start(R->port, NULL);
    struct h_conn *c = H_CLIENT(d, "name=a");
    int64_t t0;

    h_redis_pause(replica);
    t0 = h_now_ms();
    H_LOCK_NEW(c, "o");
    ck_assert_msg(h_now_ms() - t0 < 500, "granted after %lld ms", (long long)(h_now_ms() - t0));
    ck_assert_int_eq(h_info_num(c, "ack_rounds"), 0);
    h_redis_resume(replica);
}
END_TEST

START_TEST(test_config)
{
    char out[4096];

    H_RUN(out, 0, "--test-config", "--min-replicas-ack", "2");
    H_RUN(out, 1, "--test-config", "--min-replicas-ack", "-1");
    ck_assert_msg(strstr(out, "min-replicas-ack") && strstr(out, "out of range"), "got '%s'", out);
    H_RUN(out, 1, "--test-config", "--min-replicas-ack", "17");
    ck_assert_msg(strstr(out, "min-replicas-ack") && strstr(out, "out of range"), "got '%s'", out);
    H_RUN(out, 1, "--test-config", "--min-replicas-ack", "one");
    ck_assert_msg(strstr(out, "expected an integer"), "got '%s'", out);
    H_RUN(out, 0, "--test-config", "--cluster", "127.0.0.1:7000", "--min-replicas-ack", "1");
}
END_TEST

static Suite *ack_suite(void)
{
    Suite *s = suite_create("ack");
    TCase *tc = tcase_create("ack");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_granted_on_replica);
    tcase_add_test(tc, test_replica_stopped);
    tcase_add_test(tc, test_handoff_waits_for_ack);
    tcase_add_test(tc, test_close_while_held);
    tcase_add_test(tc, test_off);
    tcase_add_test(tc, test_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return h_run_suite(ack_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
