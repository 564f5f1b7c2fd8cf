/* check_failover.c - sessions that outlive their daemon: resumed on another dlockd sharing the
 * Redis (its holds kept and renewed there, the old connection told * BYE reason=moved), after a
 * kill -9, and across a SIGTERM and restart; forged or wrong resumes refused. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

#include "harness.h"

static const char *const LEASE_2S[] = { "--lock-lease", "2s", NULL };

/* Resumes the session of c (id and secret) on a new connection to d; returns it. */
static struct h_conn *resume_on(struct h_dlockd *d, const struct h_conn *c)
{
    struct h_conn *n = H_CONNECT(d->port);
    char pat[200];

    snprintf(pat, sizeof pat, "OK session=%s secret=%s ttl=%%d proto=1 server=dlockd/%%w resumed=1 lease=%%d",
             c->session, c->secret);
    H_REQ(n, pat, "HELLO session=%s secret=%s", c->session, c->secret);
    return n;
}

START_TEST(test_resume_on_other_daemon)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=10s"), *b = H_CLIENT(d2, "name=bob"), *a2;
    long long t = H_LOCK_NEW(a, "m");
    char pat[100];

    H_REQ(a, "OK token=%d held=1 free=1", "ACQUIRE sm limit=2");
    a2 = resume_on(d2, a);
    H_EVENT(a, "* BYE reason=moved", 3000);
    ck_assert(h_wait_eof(a, 3000));
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(a2, pat, "LOCK m"); /* the same hold, now the second daemon's */
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK m");
    H_REQ(b, "BUSY free=1", "ACQUIRE sm limit=2 permits=2");
    H_REQ(a2, "OK count=0", "UNLOCK m all");
    H_REQ(a2, "OK held=0 free=2", "RELEASE sm");
    ck_assert_int_gt(H_LOCK_NEW(b, "m"), t);
}
END_TEST

/* kill -9 of the daemon a session is on: resumed on the other one within the lease, its hold
 * is renewed there (for two leases nobody else gets it), then released at QUIT. */
START_TEST(test_resume_after_kill)
{
    struct h_dlockd *d1 = h_dlockd_start(R->port, LEASE_2S), *d2 = h_dlockd_start(R->port, LEASE_2S);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=10s"), *b = H_CLIENT(d2, "name=bob"), *a2;
    long long t = H_LOCK_NEW(a, "k");

    h_dlockd_kill(d1);
    a2 = resume_on(d2, a);
    for (int i = 0; i < 4; i++) {
        h_sleep_ms(1000); /* 4 s: two leases of 2 s */
        H_REQ(a2, "OK", "PING");
        H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK k");
    }
    H_REQ(a2, "OK", "QUIT");
    ck_assert_int_gt(H_LOCK_NEW(b, "k"), t);
}
END_TEST

/* SIGTERM: * BYE reason=shutdown with a retry hint, the hold stays taken; the restarted daemon
 * gives it back to the session when it resumes. */
START_TEST(test_resume_after_restart)
{
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=10s"), *b, *a2;
    long long t = H_LOCK_NEW(a, "r");
    char pat[100];

    h_dlockd_stop(D);
    H_EVENT(a, "* BYE reason=shutdown retry=%d", 3000);
    h_dlockd_restart(D);
    b = H_CLIENT(D, "name=bob");
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK r");
    a2 = resume_on(D, a);
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(a2, pat, "LOCK r");
    H_REQ(a2, "OK count=0", "UNLOCK r all");
    ck_assert_int_gt(H_LOCK_NEW(b, "r"), t);
}
END_TEST

/* A wrong secret, or a session id no daemon has, is ERR NOSESSION on the other daemon too. */
START_TEST(test_resume_refused)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice"), *x = H_CONNECT(d2->port);

    H_LOCK_NEW(a, "w");
    H_REQ(x, "ERR NOSESSION %*", "HELLO session=%s secret=00000000000000000000000000000000", a->session);
    H_REQ(x, "ERR NOSESSION %*", "HELLO session=0123456789abcdef secret=%s", a->secret);
    H_REQ(x, "ERR NOSESSION %*", "HELLO session=%s", a->session);
    H_REQ(a, "OK", "PING"); /* untouched */
    H_REQ(x, "BUSY holder=alice ttl=%d", "LOCK w");
}
END_TEST

/* Anyone may PUBLISH on a daemon's channel: a forged "M <session>" moves nothing. */
START_TEST(test_forged_move)
{
    struct h_conn *a = H_CLIENT(D, "name=alice"), *b = H_CLIENT(D, "name=bob");
    const char *info = H_REQ(b, "OK {%*}", "INFO");
    char id[64], channel[100], msg[100];
    const char *p = strstr(info, "\"id\":\"");

    ck_assert_ptr_nonnull(p);
    snprintf(id, sizeof id, "%.16s", p + 6);
    H_LOCK_NEW(a, "f");
    snprintf(channel, sizeof channel, "dlock:%s", id);
    snprintf(msg, sizeof msg, "M %s", a->session);
    ck_assert_int_eq(h_redis_int(R->port, "PUBLISH", channel, msg, NULL), 1);
    h_sleep_ms(300);
    H_REQ(a, "OK", "PING");
    ck_assert_ptr_null(h_event(a, "* BYE %*", 200));
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK f");
}
END_TEST

/* Cuts the pub/sub connection of the first daemon (the oldest subscriber): an "M" published
 * while it reconnects reaches nobody. */
static void miss_messages(void)
{
    char *list = h_redis_cmd(R->port, "CLIENT", "LIST", "TYPE", "pubsub", NULL), *save = NULL, id[32] = "";
    long long best = -1;

    for (char *l = strtok_r(list, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        long long n = strtoll(l + 3, NULL, 10);
        if (strncmp(l, "id=", 3) == 0 && (best < 0 || n < best))
            best = n;
    }
    free(list);
    ck_assert_int_ge(best, 0);
    snprintf(id, sizeof id, "%lld", best);
    free(h_redis_cmd(R->port, "CLIENT", "KILL", "ID", id, NULL));
}

/* The daemon that had a session missed the move and lets its copy expire: the holds the other
 * daemon adopted are not released (only the daemon that has a hold's session releases it), and
 * the record stays. */
START_TEST(test_stale_copy_expires_harmlessly)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=2s"), *b = H_CLIENT(D, "name=bob"), *a2;
    long long t = H_LOCK_NEW(a, "st");
    char pat[100], key[128];

    miss_messages();
    a2 = resume_on(d2, a);
    snprintf(key, sizeof key, "dlock:{%s}:session", a->session);
    h_close(a);
    for (int i = 0; i < 8; i++) { /* 4 s: the copy on the first daemon expires meanwhile */
        h_sleep_ms(500);
        H_REQ(a2, "OK", "PING");
    }
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK st");
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(a2, pat, "LOCK st");
    ck_assert_int_eq(h_redis_int(R->port, "EXISTS", key, NULL), 1);
}
END_TEST

/* Back to a daemon that still has a stale copy: the record says where the session is, and the
 * holds taken elsewhere come along. */
START_TEST(test_resume_back_to_stale_copy)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *b = H_CLIENT(D, "name=bob"), *a2, *a3;
    long long t;
    char pat[100];

    miss_messages();
    a2 = resume_on(d2, a);
    t = H_LOCK_NEW(a2, "back");
    h_close(a2);
    /* The first daemon reaches Redis again before the client comes back to it. */
    for (int i = 0; i < 100 && !h_json_has(H_REQ(b, "OK {%*}", "INFO"), "\"backend\":\"up\""); i++)
        h_sleep_ms(50);
    a3 = resume_on(D, a);
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(a3, pat, "LOCK back");
    H_REQ(a3, "OK count=0", "UNLOCK back all");
    ck_assert_int_gt(H_LOCK_NEW(b, "back"), t);
}
END_TEST

/* Holds taken before the first HELLO go into the record the HELLO writes. */
START_TEST(test_holds_before_hello_resume)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CONNECT(D->port), *b = H_CLIENT(d2, "name=bob"), *a2;
    const char *r;
    long long t;
    char pat[100];

    t = H_KV_INT(H_REQ(a, "OK token=%d count=1", "LOCK early"), "token");
    r = H_REQ(a, "OK session=%w secret=%w %*", "HELLO name=alice ttl=30s");
    ck_assert_int_eq(h_kv(r, "session", a->session, sizeof a->session), 0);
    ck_assert_int_eq(h_kv(r, "secret", a->secret, sizeof a->secret), 0);
    a2 = resume_on(d2, a);
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(a2, pat, "LOCK early");
    H_REQ(b, "BUSY holder=%w ttl=%d", "LOCK early");
}
END_TEST

/* A session id that is not one is refused at once, whatever is in memory or in Redis. */
START_TEST(test_malformed_session_id)
{
    struct h_conn *a = H_CLIENT(D, "name=alice"), *x = H_CONNECT(D->port);
    long long before = h_redis_cmdstat(R->port, "evalsha");

    H_REQ(x, "ERR NOSESSION %*", "HELLO session=%sX secret=%s", a->session, a->secret);
    H_REQ(x, "ERR NOSESSION %*", "HELLO session=%.15s secret=%s", a->session, a->secret);
    ck_assert_int_lt(h_redis_cmdstat(R->port, "evalsha") - before, 20);
}
END_TEST

/* A forged "M" for a session with no record (no HELLO) moves nothing either. */
START_TEST(test_forged_move_no_record)
{
    struct h_conn *a = H_CONNECT(D->port), *b = H_CLIENT(D, "name=bob");
    const char *info = H_REQ(b, "OK {%*}", "INFO"), *p = strstr(info, "\"id\":\""), *st;
    char id[64], channel[100], msg[100], sid[32];

    ck_assert_ptr_nonnull(p);
    snprintf(id, sizeof id, "%.16s", p + 6);
    H_REQ(a, "OK token=%d count=1", "LOCK fn");
    st = H_REQ(a, "OK {%*}", "STATUS fn");
    p = strstr(st, "\"session\":\"");
    ck_assert_ptr_nonnull(p);
    snprintf(sid, sizeof sid, "%.16s", p + 11);
    snprintf(channel, sizeof channel, "dlock:%s", id);
    snprintf(msg, sizeof msg, "M %s", sid);
    ck_assert_int_eq(h_redis_int(R->port, "PUBLISH", channel, msg, NULL), 1);
    h_sleep_ms(300);
    H_REQ(a, "OK", "PING");
    ck_assert_ptr_null(h_event(a, "* BYE %*", 200));
}
END_TEST

/* A session's waiter queued through a daemon that died goes when the session resumes elsewhere:
 * its request went with its connection, and nobody would take the grant. */
START_TEST(test_dead_waiter_dequeued)
{
    struct h_dlockd *d1 = h_dlockd_start(R->port, NULL), *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=10s"), *b = H_CLIENT(d2, "name=bob"), *c, *a2;

    H_LOCK_NEW(b, "qw");
    ck_assert_int_eq(h_send(a, "LOCK qw wait=20s"), 0);
    ck_assert(h_wait_waiters(b, "qw", 1, 5000));
    h_dlockd_kill(d1);
    a2 = resume_on(d2, a);
    ck_assert(h_wait_waiters_eq(b, "qw", 0, 3000));
    H_REQ(b, "OK count=0", "UNLOCK qw");
    c = H_CLIENT(d2, "name=carol");
    H_LOCK_NEW(c, "qw");
    H_REQ(a2, "ERR NOTHELD %*", "UNLOCK qw");
}
END_TEST

/* A hold of a session whose daemon died lasts to the end of the session's ttl, even when it
 * was granted just before (no renewal yet) and the ttl is longer than lock-lease; then it goes
 * by itself, with no daemon to release it. */
START_TEST(test_dead_daemon_holds_for_ttl)
{
    struct h_dlockd *d1 = h_dlockd_start(R->port, LEASE_2S), *d2 = h_dlockd_start(R->port, LEASE_2S);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=6s"), *b = H_CLIENT(d2, "name=bob");
    long long pttl;

    H_LOCK_NEW(a, "dt");
    pttl = h_redis_int(R->port, "PTTL", "dlock:{dt}:k", NULL); /* in the one-key form */
    ck_assert_msg(pttl > 4000, "a new hold of a 6 s session has PTTL %lld", pttl);
    h_dlockd_kill(d1);
    h_sleep_ms(3500); /* past lock-lease */
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK dt");
    H_REQ(b, "OK token=%d count=1", "LOCK dt wait=10s");
}
END_TEST

/* A session resumed on another daemon and ended there at once leaves only that daemon in its
 * record: the daemon still holding a copy reads it as moved and lets go, and nobody resumes it. */
START_TEST(test_moved_then_ended)
{
    struct h_conn *a = H_CLIENT(D, "name=alice"), *b = H_CLIENT(D, "name=bob"), *x;
    const char *info = H_REQ(b, "OK {%*}", "INFO");
    char id[64], channel[100], msg[100], key[100];
    const char *p = strstr(info, "\"id\":\"");

    ck_assert_ptr_nonnull(p);
    snprintf(id, sizeof id, "%.16s", p + 6);
    snprintf(key, sizeof key, "dlock:{%s}:session", a->session);
    ck_assert_int_eq(h_redis_int(R->port, "DEL", key, NULL), 1);
    ck_assert_int_eq(h_redis_int(R->port, "HSET", key, "d", "0123456789abcdef", NULL), 1);
    ck_assert_int_eq(h_redis_int(R->port, "PEXPIRE", key, "10000", NULL), 1);
    snprintf(channel, sizeof channel, "dlock:%s", id);
    snprintf(msg, sizeof msg, "M %s", a->session);
    ck_assert_int_eq(h_redis_int(R->port, "PUBLISH", channel, msg, NULL), 1);
    H_EVENT(a, "* BYE reason=moved", 3000);
    x = H_CONNECT(D->port);
    H_REQ(x, "ERR NOSESSION %*", "HELLO session=%s secret=%s", a->session, a->secret);
}
END_TEST

/*
 * A session that moved to another daemon while its first daemon heard
 * nothing (its M message lost), then a failover: the stale copy left there
 * must not write the session's holds back as its own. It did: the hold's
 * daemon became the stale one, and the client's UNLOCK on the daemon it
 * is on was refused. The record says where the session lives now.
 */
START_TEST(test_moved_session_not_written_back)
{
    struct h_redis *r = h_redis_start(H_ARGS("--appendonly", "yes", "--appendfsync", "always"));
    const char *const *args = H_ARGS("--lock-lease", "3s", "--failover-delay", "300ms");
    struct h_dlockd *stale = h_dlockd_start(r->port, args), *d2 = h_dlockd_start(r->port, args);
    struct h_conn *a = H_CLIENT(stale, "name=mover ttl=60s"), *a2;
    const char *done[] = { "every hold of this daemon is on the new master", NULL };

    H_LOCK_NEW(a, "moving");
    kill(stale->pid, SIGSTOP); /* from now on it hears nothing */
    a2 = resume_on(d2, a);
    h_close(a);
    kill(d2->pid, SIGSTOP);
    h_redis_kill(r);
    h_redis_restart(r); /* the same data, another run_id: as a failover to an up-to-date replica */
    kill(d2->pid, SIGCONT);
    ck_assert_int_eq(h_log_wait(d2, done, 1, 10000), 1);
    kill(stale->pid, SIGCONT);
    ck_assert_int_eq(h_log_wait(stale, done, 1, 10000), 1);
    H_REQ(a2, "OK count=0", "UNLOCK moving");
    ck_assert_int_eq(h_log_count(stale, H_ARGS("session moved to daemon")), 1);
    h_dlockd_stop(stale);
    h_dlockd_stop(d2);
    h_redis_stop(r);
}
END_TEST

static Suite *failover_suite(void)
{
    Suite *s = suite_create("failover");
    TCase *tc = tcase_create("failover");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_resume_on_other_daemon);
    tcase_add_test(tc, test_resume_after_kill);
    tcase_add_test(tc, test_resume_after_restart);
    tcase_add_test(tc, test_resume_refused);
    tcase_add_test(tc, test_forged_move);
    tcase_add_test(tc, test_stale_copy_expires_harmlessly);
    tcase_add_test(tc, test_resume_back_to_stale_copy);
    tcase_add_test(tc, test_holds_before_hello_resume);
    tcase_add_test(tc, test_malformed_session_id);
    tcase_add_test(tc, test_forged_move_no_record);
    tcase_add_test(tc, test_dead_waiter_dequeued);
    tcase_add_test(tc, test_dead_daemon_holds_for_ttl);
    tcase_add_test(tc, test_moved_then_ended);
    tcase_add_test(tc, test_moved_session_not_written_back);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return h_run_suite(failover_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
