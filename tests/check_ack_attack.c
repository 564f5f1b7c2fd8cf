/* check_ack_attack.c - min-replicas-ack under attack: clients that go, repeat or re-enter while their
 * answer is held, leases that end meanwhile, semaphores, a reload, a Redis link that drops mid-round, and a
 * Sentinel failover with the daemon killed too. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

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
    if (replica)
        h_redis_resume(replica);
    h_teardown();
    replica = NULL;
}

/* Polls until name has a hold on the master (its grant reached Redis); fails the test after ms. */
static void in_redis(const char *name, int ms)
{
    for (int64_t deadline = h_now_ms() + ms;; h_sleep_ms(20)) {
        char *v = h_holds_at(R->port, name);
        int some = v[0] != '\0';
        free(v);
        if (some)
            return;
        if (h_now_ms() > deadline)
            H_FAIL("the grant of %s did not reach Redis within %d ms", name, ms);
    }
}

/* Waits until the daemon's WAIT for the replicas blocks in Redis: a call it sends later is
 * answered only after it. */
static void waiting_replicas(int ms)
{
    for (int64_t deadline = h_now_ms() + ms;; h_sleep_ms(20)) {
        char *info = h_redis_cmd(R->port, "INFO", "clients", NULL);
        int blocked = strstr(info, "blocked_clients:0") == NULL;
        free(info);
        if (blocked)
            return;
        if (h_now_ms() > deadline)
            H_FAIL("no WAIT blocked in Redis within %d ms", ms);
    }
}

/* A lease= that ends while the answer waits for the replicas: no OK naming a hold that is gone. */
START_TEST(test_lease_ends_while_held)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "4s"));
    struct h_conn *a = H_CLIENT(d, "name=a"), *b = H_CLIENT(d, "name=b");
    const char *rep;

    h_redis_pause(replica);
    ck_assert_int_eq(h_send(a, "LOCK g lease=200"), 0);
    in_redis("g", 2000);
    h_sleep_ms(800);
    h_redis_resume(replica);
    rep = h_reply(a, 4000);
    ck_assert_msg(rep != NULL, "no answer for the LOCK of g");
    ck_assert_msg(strcmp(rep, "TIMEOUT") == 0, "a lease that ended before the answer: got '%s'", rep);
    H_LOCK_NEW(b, "g wait=5s");
    H_REQ(a, "ERR NOTHELD%*", "UNLOCK g");
}
END_TEST

/* A reentry undone takes back exactly its count: the counts answered OK stay, in Redis and here. */
START_TEST(test_reentry_undone)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "1s"));
    struct h_conn *a = H_CLIENT(d, "name=a");

    H_LOCK_NEW(a, "r");
    h_redis_pause(replica);
    ck_assert_int_eq(h_send(a, "#1 LOCK r"), 0);
    ck_assert_int_eq(h_send(a, "#2 LOCK r"), 0);
    ck_assert_msg(h_match(h_reply_tag(a, "1", 4000), "#1 ERR BACKEND%*"), "#1: '%s'", a->last);
    ck_assert_msg(h_match(h_reply_tag(a, "2", 4000), "#2 ERR BACKEND%*"), "#2: '%s'", a->last);
    h_redis_resume(replica);
    H_REQ(a, "OK token=%d count=2", "LOCK r");
    H_REQ(a, "OK count=1", "UNLOCK r");
    H_REQ(a, "OK count=0", "UNLOCK r");
    ck_assert_msg(h_holds_gone(R->port, "r", 3000), "r is still held in Redis");
    ck_assert_int_eq(h_info_num(a, "ack_refused"), 2);
}
END_TEST

/* ACQUIRE permits= undone gives every permit back. */
START_TEST(test_permits_undone)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "1s"));
    struct h_conn *a = H_CLIENT(d, "name=a"), *b = H_CLIENT(d, "name=b");

    H_REQ(a, "OK token=%d held=1 free=2", "ACQUIRE sem permits=1 limit=3");
    h_redis_pause(replica);
    H_REQ(a, "ERR BACKEND only 0 of 1 replicas%*", "ACQUIRE sem permits=2 limit=3");
    h_redis_resume(replica);
    H_REQ(b, "OK token=%d held=2 free=0", "ACQUIRE sem permits=2 limit=3");
    H_REQ(a, "OK%*", "RELEASE sem");
    H_REQ(b, "OK%*", "RELEASE sem");
}
END_TEST

/* QUIT while a tagged LOCK's answer is held: QUIT's OK, no OK for the LOCK, and the grant is given up. */
START_TEST(test_quit_while_held)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "4s"));
    struct h_conn *a = H_CLIENT(d, "name=a"), *b = H_CLIENT(d, "name=b");

    h_redis_pause(replica);
    ck_assert_int_eq(h_send(a, "#1 LOCK q"), 0);
    in_redis("q", 2000);
    ck_assert_int_eq(h_send(a, "QUIT"), 0);
    /* answered once the read of its record, queued behind the LOCK's WAIT, comes back */
    H_REPLY(a, "OK", 8000);
    H_EOF(a, 2000);
    h_redis_resume(replica);
    ck_assert_msg(h_holds_gone(R->port, "q", 3000), "the grant of q is still in Redis after QUIT");
    H_LOCK_NEW(b, "q");
}
END_TEST

/* A half-close while the answer is held gives the grant up (section 9), and the connection closes. */
START_TEST(test_halfclose_while_held)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "4s"));
    struct h_conn *a = H_CLIENT(d, "name=a"), *b = H_CLIENT(d, "name=b");

    h_redis_pause(replica);
    ck_assert_int_eq(h_send(a, "LOCK e"), 0);
    in_redis("e", 2000);
    ck_assert_int_eq(shutdown(a->fd, SHUT_WR), 0);
    H_EOF(a, 3000);
    ck_assert_msg(h_holds_gone(R->port, "e", 3000), "the grant of e is still in Redis after the half-close");
    h_redis_resume(replica);
    H_LOCK_NEW(b, "e");
}
END_TEST

/* HELLO session= on another connection while the answer is held: the resume reads Redis behind the
 * round, so the old connection gets the OK first, then BYE; the hold is the session's on the new one. */
START_TEST(test_resume_while_held)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "4s"));
    struct h_conn *a = H_CLIENT(d, "name=a"), *a2 = H_CONNECT(d->port), *b = H_CLIENT(d, "name=b");
    long long t;

    h_redis_pause(replica);
    ck_assert_int_eq(h_send(a, "LOCK m"), 0);
    in_redis("m", 2000);
    waiting_replicas(2000); /* else the resume may read Redis before the round's WAIT */
    ck_assert_int_eq(h_send(a2, "HELLO session=%s secret=%s", a->session, a->secret), 0);
    h_sleep_ms(500);
    h_redis_resume(replica);
    t = H_KV_INT(H_REPLY(a, "OK token=%d count=1", 3000), "token");
    H_REPLY(a2, "OK session=%w%*resumed=1%*", 3000);
    H_EVENT(a, "* BYE reason=moved%*", 3000);
    H_EOF(a, 3000);
    H_REQ(b, "BUSY%*", "LOCK m");
    H_REQ(a2, "OK count=0", "UNLOCK m");
    ck_assert_int_gt(t, 0);
    ck_assert_msg(h_holds_gone(R->port, "m", 3000), "m is still held in Redis after its UNLOCK");
}
END_TEST

/* The script connection killed while a round waits: ERR BACKEND. The release of the undone grant is
 * lost with the link, so the name is free once its lease in Redis (the session's ttl) runs out. */
START_TEST(test_link_killed_mid_round)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "4s",
                                                        "--lock-lease", "2s"));
    struct h_conn *a = H_CLIENT(d, "name=a ttl=2s"), *b;
    char *out;

    h_redis_pause(replica);
    ck_assert_int_eq(h_send(a, "LOCK k"), 0);
    in_redis("k", 2000);
    out = h_redis_cmd(R->port, "CLIENT", "KILL", "TYPE", "normal", NULL);
    free(out);
    H_REPLY(a, "ERR BACKEND%*", 3000);
    h_redis_resume(replica);
    ck_assert_msg(h_holds_gone(R->port, "k", 5000), "the undone grant of k outlived its lease");
    b = H_CLIENT(d, "name=b");
    h_wait_info(b, "\"backend\":\"up\"", 8000);
    H_LOCK_NEW(b, "k");
    ck_assert_int_eq(h_info_num(b, "ack_refused"), 1);
}
END_TEST

/* min-replicas-ack 1 -> 0 by SIGHUP while an answer is held: it is still confirmed first; later grants are not. */
START_TEST(test_reload_while_held)
{
    char dir[256], conf[300];
    struct h_dlockd *d;
    struct h_conn *a;
    long long rounds;

    h_tmpdir(dir, sizeof dir, "ackconf");
    snprintf(conf, sizeof conf, "%s/dlockd.conf", dir);
    h_write_file(conf, "min-replicas-ack 1\nbackend-timeout 4s\n");
    d = h_dlockd_start_with(R->port, conf, NULL, NULL);
    a = H_CLIENT(d, "name=a");
    h_redis_pause(replica);
    ck_assert_int_eq(h_send(a, "LOCK h"), 0);
    in_redis("h", 2000);
    h_write_file(conf, "min-replicas-ack 0\nbackend-timeout 4s\n");
    kill(d->pid, SIGHUP);
    ck_assert_int_eq(h_log_wait(d, H_ARGS("config: reloaded"), 1, 3000), 1);
    H_SILENT(a, 300);
    h_redis_resume(replica);
    H_REPLY(a, "OK token=%d count=1", 3000);
    rounds = h_info_num(a, "ack_rounds");
    h_redis_pause(replica);
    H_LOCK_NEW(a, "h2");
    h_redis_resume(replica);
    ck_assert_int_eq(h_info_num(a, "ack_rounds"), rounds);
}
END_TEST

/* A repeat (same id=) of a LOCK whose answer is held gets the same answer once: one count, not two. */
START_TEST(test_repeat_while_held)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "4s"));
    struct h_conn *a = H_CLIENT(d, "name=a");
    char first[128];

    h_redis_pause(replica);
    ck_assert_int_eq(h_send(a, "#1 LOCK p id=r1"), 0);
    in_redis("p", 2000);
    ck_assert_int_eq(h_send(a, "#2 LOCK p id=r1"), 0);
    H_SILENT(a, 300);
    h_redis_resume(replica);
    ck_assert_msg(h_match(h_reply_tag(a, "1", 3000), "#1 OK token=%d count=1"), "#1: '%s'", a->last);
    snprintf(first, sizeof first, "#2%s", a->last + 2);
    ck_assert_msg(h_reply_tag(a, "2", 3000) && strcmp(a->last, first) == 0, "#2: '%s', #1 had '%s'", a->last, first);
    H_REQ(a, "OK count=0", "UNLOCK p");
    ck_assert_msg(h_holds_gone(R->port, "p", 3000), "p is still held in Redis after its one UNLOCK");
}
END_TEST

/* A waiter handed the name by another daemon whose grant is undone hands it on to the next waiter. */
START_TEST(test_handoff_undone_hands_on)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--min-replicas-ack", "1", "--backend-timeout", "1s"));
    struct h_dlockd *other = h_dlockd_start(R->port, NULL);
    struct h_conn *holder = H_CLIENT(other, "name=holder"), *w1 = H_CLIENT(d, "name=w1"), *w2 = H_CLIENT(d, "name=w2");
    long long t;
    char want[32], *v;

    H_LOCK_NEW(holder, "h");
    ck_assert_int_eq(h_send(w1, "LOCK h wait=20s"), 0);
    ck_assert_int_eq(h_wait_waiters(holder, "h", 1, 3000), 1);
    ck_assert_int_eq(h_send(w2, "LOCK h wait=20s"), 0);
    ck_assert_int_eq(h_wait_waiters(holder, "h", 2, 3000), 1);
    h_redis_pause(replica);
    H_REQ(holder, "OK count=0", "UNLOCK h");
    H_REPLY(w1, "ERR BACKEND only 0 of 1 replicas%*", 3000);
    h_redis_resume(replica);
    t = H_KV_INT(H_REPLY(w2, "OK token=%d count=1", 3000), "token");
    v = h_holds_at(R->port, "h");
    snprintf(want, sizeof want, " %lld ", t);
    ck_assert_msg(strstr(v, want) != NULL && strstr(v, "w2") != NULL, "the hold of h is '%s', not w2's %lld", v, t);
    free(v);
    H_REQ(w1, "ERR NOTHELD%*", "UNLOCK h");
}
END_TEST

#define NGRANTS 20 /* grants confirmed just before the kills */

/* What the promise is for: min-replicas-ack 2 with two replicas, kill -9 of the master and of the daemon
 * (which then cannot write its holds back) right after the last OK: the promoted replica has every grant. */
START_TEST(test_sentinel_failover_keeps_confirmed)
{
    struct h_sentinels *t = h_sentinels_start("amaster");
    struct h_dlockd *d = h_dlockd_start(h_free_port(), H_ARGS("--sentinel", t->addr[0], "--sentinel", t->addr[1],
                                                              "--sentinel", t->addr[2], "--sentinel-master",
                                                              t->name, "--min-replicas-ack", "2"));
    struct h_conn *a = H_CLIENT(d, "name=a ttl=60s");
    long long tokens[NGRANTS];
    int old = t->master->port, now;

    h_wait_info(a, "\"backend\":\"up\"", 10000);
    for (int i = 0; i < NGRANTS; i++) {
        char name[16];
        snprintf(name, sizeof name, "n%d", i);
        tokens[i] = H_LOCK_NEW(a, name);
    }
    h_dlockd_kill(d);
    h_redis_kill(t->master);
    now = h_sentinels_wait_switch(t, old, 20000);
    for (int i = 0; i < NGRANTS; i++) {
        char name[16], want[32], *v;
        snprintf(name, sizeof name, "n%d", i);
        v = h_holds_at(now, name);
        snprintf(want, sizeof want, " %lld ", tokens[i]);
        ck_assert_msg(strstr(v, want) != NULL, "the confirmed grant %s token %lld is not on the new master: '%s'",
                      name, tokens[i], v);
        free(v);
    }
    h_sentinels_stop(t);
}
END_TEST

static Suite *ack_attack_suite(void)
{
    Suite *s = suite_create("ack_attack");
    TCase *tc = tcase_create("ack_attack"), *failover = tcase_create("failover");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_lease_ends_while_held);
    tcase_add_test(tc, test_reentry_undone);
    tcase_add_test(tc, test_permits_undone);
    tcase_add_test(tc, test_quit_while_held);
    tcase_add_test(tc, test_halfclose_while_held);
    tcase_add_test(tc, test_resume_while_held);
    tcase_add_test(tc, test_link_killed_mid_round);
    tcase_add_test(tc, test_reload_while_held);
    tcase_add_test(tc, test_repeat_while_held);
    tcase_add_test(tc, test_handoff_undone_hands_on);
    suite_add_tcase(s, tc);
    tcase_add_checked_fixture(failover, NULL, h_teardown);
    tcase_set_timeout(failover, 60);
    tcase_add_test(failover, test_sentinel_failover_keeps_confirmed);
    suite_add_tcase(s, failover);
    return s;
}

int main(void)
{
    return h_run_suite(ack_attack_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
