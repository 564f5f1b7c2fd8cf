/* check_bounds.c - bounded work in Redis: handoff in chunks, key expiry, STATUS size, limits on holds, waits and latches. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MANY_WAITERS 5000
#define MANY_CONNS 10

/* Sends n tagged requests "#<tag><i> <fmt with i>" on c in one write. */
static void send_many(struct h_conn *c, const char *tag, int from, int n, const char *fmt)
{
    size_t cap = (size_t)n * 128, len = 0;
    char *buf = malloc(cap);

    for (int i = from; i < from + n; i++) {
        len += (size_t)snprintf(buf + len, cap - len, "#%s%d ", tag, i);
        len += (size_t)snprintf(buf + len, cap - len, fmt, i);
        buf[len++] = '\n';
    }
    if (h_send_raw(c, buf, len) != 0)
        H_FAIL("cannot send %d requests", n);
    free(buf);
}

/* Expects n replies matching pattern on c (in any order), each within timeout_ms of the last. */
static void expect_replies(struct h_conn *c, int n, const char *pattern, int timeout_ms)
{
    for (int i = 0; i < n; i++)
        H_REPLY(c, pattern, timeout_ms);
}

/* The keys matching pattern (KEYS: the test's Redis is small), '\n'-separated; the caller frees it. */
static char *keys_of(int port, const char *pattern)
{
    char *r = h_redis_cmd(port, "KEYS", pattern, NULL);

    return r ? r : strdup("");
}

/* The number of keys of dlock:* other than fencing-token counters, which keep a 7-day expiry. */
static int keys_left(int port, char *out, size_t cap)
{
    char *all = keys_of(port, "dlock:*"), *save = NULL;
    int n = 0;

    out[0] = '\0';
    for (char *k = strtok_r(all, "\n", &save); k; k = strtok_r(NULL, "\n", &save)) {
        size_t len = strlen(k);
        if (len >= 2 && strcmp(k + len - 2, ":t") == 0)
            continue;
        n++;
        if (strlen(out) + len + 2 < cap) {
            strcat(out, k);
            strcat(out, " ");
        }
    }
    free(all);
    return n;
}

/* Fails unless every key of dlock:* expires by itself (PTTL > 0). Returns the number of keys. */
static int expect_all_expire(int port)
{
    char *all = keys_of(port, "dlock:*"), *save = NULL;
    int n = 0;

    for (char *k = strtok_r(all, "\n", &save); k; k = strtok_r(NULL, "\n", &save), n++) {
        long long pttl = h_redis_int(port, "PTTL", k, NULL);
        if (pttl <= 0)
            H_FAIL("key %s has PTTL %lld: it would stay forever", k, pttl);
    }
    free(all);
    return n;
}

/* One handoff: a holds name, MANY_WAITERS shared waiters queue on fresh
 * connections, and one UNLOCK grants them all. Returns Redis's SLOWLOG
 * (malloc'd) when a script took more than 20 ms, else NULL. */
static char *handoff_round(struct h_conn *a, const char *name)
{
    struct h_conn *c[MANY_CONNS];
    int per = MANY_WAITERS / MANY_CONNS;
    char fmt[128], *slow;
    int64_t t0;

    snprintf(fmt, sizeof fmt, "LOCK %s shared wait=inf owner=o%%d", name);
    H_REQ(a, "OK token=%d count=1", "LOCK %s", name);
    for (int i = 0; i < MANY_CONNS; i++) {
        c[i] = H_CLIENT(D, "ttl=300s");
        send_many(c[i], "w", 0, per, fmt);
        if (!h_wait_waiters(a, name, (long long)(i + 1) * per, 30000))
            H_FAIL("waiters of connection %d not queued within 30 s", i);
    }
    free(h_redis_cmd(R->port, "CONFIG", "SET", "slowlog-log-slower-than", "20000", NULL));
    free(h_redis_cmd(R->port, "SLOWLOG", "RESET", NULL));
    t0 = h_now_ms();
    H_REQ(a, "OK count=0", "UNLOCK %s", name);
    for (int i = 0; i < MANY_CONNS; i++)
        expect_replies(c[i], per, "#w%d OK token=%d count=1", 20000);
    printf("bounds: %d shared waiters granted in %lld ms\n", MANY_WAITERS, (long long)(h_now_ms() - t0));
    for (int i = 0; i < MANY_CONNS; i++)
        h_close(c[i]);
    slow = h_redis_cmd(R->port, "SLOWLOG", "GET", "1000", NULL);
    if (slow != NULL && strstr(slow, "EVAL") == NULL) {
        free(slow);
        return NULL;
    }
    return slow ? slow : strdup("(no answer)");
}

/* 1: one UNLOCK hands a lock to 5000 queued shared waiters in scripts that
 * each stay under 20 ms (Redis SLOWLOG), and an uninvolved lock with a 3 s
 * lease is never lost meanwhile (its waiter is not granted). The scripts
 * take about 4 ms; a loaded machine may stall Redis past 20 ms now and then,
 * so the daemon yields the CPU to Redis and a round may be tried again. */
START_TEST(test_handoff_in_chunks)
{
    struct h_conn *a, *u, *v;
    long long token;
    char *slow = NULL, name[16];
    const char *r;

    D = h_dlockd_start(R->port, H_ARGS("--lock-lease", "3s"));
    setpriority(PRIO_PROCESS, (id_t)D->pid, 10);
    a = H_CLIENT(D, "name=a ttl=300s");
    u = H_CLIENT(D, "name=uninvolved ttl=300s");
    v = H_CLIENT(D, "name=v ttl=300s");
    token = H_LOCK_NEW(u, "other");
    ck_assert_int_eq(h_send(v, "#v LOCK other wait=inf"), 0);
    for (int round = 0; round < 3; round++) {
        free(slow);
        snprintf(name, sizeof name, "big%d", round);
        if ((slow = handoff_round(a, name)) == NULL)
            break;
        printf("bounds: round %d had a script slower than 20 ms: %.300s\n", round, slow);
    }
    ck_assert_msg(slow == NULL, "scripts slower than 20 ms in every round: %.2000s", slow);
    ck_assert_ptr_null(h_reply_tag(v, "v", 0));
    r = H_REQ(u, "OK {%*}", "STATUS other");
    ck_assert_msg(h_json_has(r, "\"client\":\"uninvolved\"") && h_json_int(r, "token") == token,
                  "the uninvolved lock changed hands: %s", r);
}
END_TEST

/* 1: the daemon whose UNLOCK started a long handoff stops before it can go
 * on: the daemon of the next waiters hears of it and hands the rest on, long
 * before any lease could lapse (lock-lease is 30 s). */
START_TEST(test_handoff_survives_granter)
{
    struct h_dlockd *d2;
    struct h_conn *a, *c[MANY_CONNS];
    int per = 2000 / MANY_CONNS;

    D = h_dlockd_start(R->port, NULL);
    d2 = h_dlockd_start(R->port, NULL);
    a = H_CLIENT(D, "name=a ttl=300s");
    H_LOCK_NEW(a, "big");
    for (int i = 0; i < MANY_CONNS; i++) {
        c[i] = H_CLIENT(d2, "ttl=300s");
        send_many(c[i], "w", 0, per, "LOCK big shared wait=inf owner=o%d");
        if (!h_wait_waiters(a, "big", (long long)(i + 1) * per, 30000))
            H_FAIL("waiters of connection %d not queued within 30 s", i);
    }
    /* The UNLOCK reaches Redis, but its daemon never sees the answer. */
    h_redis_pause(R);
    ck_assert_int_eq(h_send(a, "UNLOCK big"), 0);
    h_sleep_ms(200);
    ck_assert_int_eq(kill(D->pid, SIGSTOP), 0);
    h_redis_resume(R);
    for (int i = 0; i < MANY_CONNS; i++)
        expect_replies(c[i], per, "#w%d OK token=%d count=1", 10000);
    ck_assert_int_eq(kill(D->pid, SIGCONT), 0);
}
END_TEST

/* 2: the names a session waits for count against max-holds when it asks,
 * so a grant never takes it past the limit. */
START_TEST(test_max_holds_counts_waits)
{
    struct h_conn *s, *t;

    D = h_dlockd_start(R->port, H_ARGS("--max-holds", "2"));
    s = H_CLIENT(D, "name=s");
    t = H_CLIENT(D, "name=t");
    H_LOCK_NEW(t, "mh1");
    H_LOCK_NEW(t, "mh2");
    H_LOCK_NEW(s, "mh0");
    ck_assert_int_eq(h_send(s, "#1 LOCK mh1 wait=inf"), 0);
    ck_assert(h_wait_waiters(t, "mh1", 1, 5000));
    H_REQ(s, "#2 ERR LIMIT %*max-holds is 2", "#2 LOCK mh2 wait=inf");
    H_REQ(s, "ERR LIMIT %*max-holds is 2", "LOCK mh3");
    H_REQ(t, "OK count=0", "UNLOCK mh1");
    H_REPLY(s, "#1 OK token=%d count=1", H_TIMEOUT);
    H_REQ(t, "OK count=0", "UNLOCK mh2");
    H_REQ(s, "ERR LIMIT %*max-holds is 2", "LOCK mh2");
}
END_TEST

/* 2: max-holds-total bounds the holds of all sessions of a daemon, the names they wait for included. */
START_TEST(test_max_holds_total)
{
    struct h_conn *s1, *s2;

    D = h_dlockd_start(R->port, H_ARGS("--max-holds", "3", "--max-holds-total", "4"));
    s1 = H_CLIENT(D, "name=s1");
    s2 = H_CLIENT(D, "name=s2");
    H_REQ(s1, "OK tokens=%d,%d,%d counts=1,1,1", "LOCK ta tb tc");
    H_LOCK_NEW(s2, "td");
    H_REQ(s2, "ERR LIMIT %*max-holds-total is 4", "LOCK te");
    H_REQ(s2, "OK count=0", "UNLOCK td");
    ck_assert_int_eq(h_send(s2, "#1 LOCK ta wait=inf"), 0);
    ck_assert(h_wait_waiters(s1, "ta", 1, 5000));
    H_REQ(s2, "ERR LIMIT %*max-holds-total is 4", "LOCK tf");
    H_REQ(s1, "OK count=0", "UNLOCK ta");
    H_REPLY(s2, "#1 OK token=%d count=1", H_TIMEOUT);
    H_LOCK_NEW(s2, "tf");
    H_REQ(s2, "ERR LIMIT %*max-holds-total is 4", "ACQUIRE tg limit=1");
}
END_TEST

/* 3: max-waits bounds the LOCK, ACQUIRE and AWAIT requests of one session
 * that wait; max-waiters counts AWAIT too. */
START_TEST(test_wait_limits)
{
    struct h_conn *h, *s, *t, *u;

    D = h_dlockd_start(R->port, H_ARGS("--max-waits", "2", "--max-waiters", "3"));
    h = H_CLIENT(D, "name=h");
    s = H_CLIENT(D, "name=s");
    t = H_CLIENT(D, "name=t");
    u = H_CLIENT(D, "name=u");
    H_LOCK_NEW(h, "wl");
    H_REQ(h, "OK count=1", "LATCH wa count=1");
    H_REQ(h, "OK token=%d held=1 free=0", "ACQUIRE ws limit=1");
    ck_assert_int_eq(h_send(s, "#1 LOCK wl wait=inf"), 0);
    ck_assert_int_eq(h_send(s, "#2 AWAIT wa wait=inf"), 0);
    ck_assert(h_wait_waiters(h, "wl", 1, 5000));
    H_REQ(s, "#3 ERR LIMIT %*max-waits is 2", "#3 ACQUIRE ws limit=1 wait=inf");
    H_REQ(s, "#4 ERR LIMIT %*max-waits is 2", "#4 AWAIT wa wait=10s");
    /* Requests that do not wait do not count. */
    H_REQ(s, "BUSY holder=h ttl=%d", "LOCK wl");
    H_REQ(s, "TIMEOUT", "AWAIT wa");
    ck_assert_int_eq(h_send(t, "#5 AWAIT wa wait=inf"), 0);
    H_REQ(t, "OK", "PING");
    H_REQ(u, "#6 ERR LIMIT %*max-waiters is 3", "#6 AWAIT wa wait=10s");
    H_REQ(u, "#7 ERR LIMIT %*max-waiters is 3", "#7 LOCK wl wait=10s");
    H_REQ(h, "OK count=0", "COUNTDOWN wa");
    H_REPLY(s, "#2 OK", H_TIMEOUT);
    H_REPLY(t, "#5 OK", H_TIMEOUT);
    H_REQ(u, "TIMEOUT", "LOCK wl wait=100ms");
}
END_TEST

/* 4: latches created by a session, and by a daemon, that have not ended are bounded. */
START_TEST(test_latch_limits)
{
    struct h_dlockd *d2;
    struct h_conn *s, *t, *o;

    D = h_dlockd_start(R->port, H_ARGS("--max-latches", "2", "--max-latches-total", "3"));
    d2 = h_dlockd_start(R->port, NULL);
    s = H_CLIENT(D, "name=s");
    t = H_CLIENT(D, "name=t");
    o = H_CLIENT(d2, "name=other");
    H_REQ(s, "OK count=1", "LATCH l1 count=1");
    H_REQ(s, "OK count=1", "LATCH l2 count=1");
    H_REQ(s, "ERR LIMIT %*max-latches is 2", "LATCH l3 count=1");
    /* Counted down here, or through another daemon: the latch has ended. */
    H_REQ(s, "OK count=0", "COUNTDOWN l1");
    H_REQ(s, "OK count=1", "LATCH l3 count=1");
    H_REQ(s, "ERR LIMIT %*max-latches is 2", "LATCH l4 count=1");
    H_REQ(o, "OK count=0", "COUNTDOWN l2");
    for (int i = 0; i < 100; i++) { /* the end of l2 comes by pub/sub */
        const char *r = H_REQ(s, "%*", "LATCH l4 count=1");
        if (h_match(r, "OK count=1"))
            break;
        ck_assert_msg(h_match(r, "ERR LIMIT %*"), "LATCH l4: %s", r);
        h_sleep_ms(20);
    }
    /* s has l3 and l4: the daemon one more, then its ttl ends it. */
    H_REQ(t, "OK count=1", "LATCH l5 count=1 ttl=500ms");
    H_REQ(t, "ERR LIMIT %*max-latches-total is 3", "LATCH l6 count=1");
    h_sleep_ms(800);
    H_REQ(t, "OK count=1", "LATCH l6 count=1");
    /* An existing latch is not created again, and does not count. */
    H_REQ(o, "OK count=1", "LATCH l7 count=1");
    H_REQ(t, "ERR LIMIT %*max-latches-total is 3", "LATCH l7 count=1");
    H_REQ(s, "OK count=0", "COUNTDOWN l3");
    H_REQ(t, "OK count=1", "LATCH l7 count=5");
    H_REQ(t, "OK count=1", "LATCH l8 count=1");
    H_REQ(t, "OK count=0", "COUNTDOWN l8");
}
END_TEST

/* 4: a latch lives at most 7 days, whatever its ttl= says. */
START_TEST(test_latch_ttl_cap)
{
    struct h_conn *s;
    long long pttl;

    D = h_dlockd_start(R->port, NULL);
    s = H_CLIENT(D, "name=s");
    H_REQ(s, "OK count=1", "LATCH cap count=1 ttl=500h");
    pttl = h_redis_int(R->port, "PTTL", "dlock:{cap}:l", NULL);
    ck_assert_msg(pttl > 7LL * 24 * 3600 * 1000 - 60000 && pttl <= 7LL * 24 * 3600 * 1000,
                  "latch PTTL %lld, expected 7 days", pttl);
}
END_TEST

/* 5: every key a daemon writes expires by itself: after a SIGKILL, a lease (or
 * the sessions' ttl, when longer) and a margin later nothing is left of its
 * holds, waiters, semaphore, latch and session records. */
START_TEST(test_keys_expire)
{
    struct h_conn *a, *b;
    int64_t killed, gone = -1;
    char left[1024];
    int n;

    D = h_dlockd_start(R->port, H_ARGS("--lock-lease", "1s"));
    a = H_CLIENT(D, "name=a ttl=2s");
    b = H_CLIENT(D, "name=b ttl=2s");
    H_LOCK_NEW(a, "k1");
    H_REQ(a, "OK tokens=%d,%d counts=1,1", "LOCK k2 k3 shared");
    H_REQ(a, "OK token=%d held=2 free=0", "ACQUIRE sem limit=2 permits=2");
    H_REQ(a, "OK count=2", "LATCH lt count=2 ttl=1s");
    ck_assert_int_eq(h_send(b, "#1 LOCK k1 k2 wait=inf"), 0);
    ck_assert_int_eq(h_send(b, "#2 ACQUIRE sem limit=2 wait=inf"), 0);
    ck_assert(h_wait_waiters(a, "k1", 1, 5000));
    ck_assert(h_wait_waiters(a, "sem", 1, 5000));
    h_sleep_ms(700); /* past a renewal */
    n = expect_all_expire(R->port);
    ck_assert_msg(n >= 12, "only %d keys", n);

    h_dlockd_kill(D);
    killed = h_now_ms();
    expect_all_expire(R->port);
    while (h_now_ms() - killed < 10000) {
        if (keys_left(R->port, left, sizeof left) == 0) {
            gone = h_now_ms() - killed;
            break;
        }
        h_sleep_ms(50);
    }
    ck_assert_msg(gone >= 0, "keys left 10 s after the kill: %s", left);
    printf("bounds: keys gone %lld ms after the kill (lock-lease 1s, ttl 2s)\n", (long long)gone);
    ck_assert_msg(gone <= 2000 + 1000 + 1500, "keys gone only %lld ms after the kill", (long long)gone);
}
END_TEST

/* Counts the holders listed in a STATUS reply. */
static int holders_listed(const char *r)
{
    int n = 0;

    for (const char *p = strstr(r, "\"session\":"); p; p = strstr(p + 1, "\"session\":"))
        n++;
    return n;
}

/* 6: STATUS of a name with 1000 holders answers a short line: the first
 * holders, and how many more there are. */
START_TEST(test_status_bounded)
{
    struct h_conn *a = H_CLIENT(D, "name=a");
    const char *r;
    int listed;

    send_many(a, "h", 0, 1000, "LOCK st shared owner=owner-with-a-long-name-%04d");
    expect_replies(a, 1000, "#h%d OK token=%d count=1", H_TIMEOUT);
    r = H_REQ(a, "OK {%*}", "STATUS st");
    listed = holders_listed(r);
    ck_assert_msg(strlen(r) < 4096, "STATUS is %zu bytes", strlen(r));
    ck_assert_msg(listed > 0 && listed <= 64, "%d holders listed", listed);
    ck_assert_msg(h_json_int(r, "more") == 1000 - listed, "more is %lld with %d listed: %s", h_json_int(r, "more"),
                  listed, r);

    send_many(a, "p", 0, 1000, "ACQUIRE sp limit=1500 owner=o%d");
    expect_replies(a, 1000, "#p%d OK token=%d held=1 free=%d", H_TIMEOUT);
    r = H_REQ(a, "OK {%*}", "STATUS sp");
    listed = holders_listed(r);
    ck_assert_msg(h_json_int(r, "free") == 500 && h_json_int(r, "more") == 1000 - listed, "%s", r);
    r = H_REQ(a, "OK {%*}", "STATUS nothing");
    ck_assert(h_json_has(r, "\"holders\":[]") && h_json_int(r, "more") == 0);
}
END_TEST

/* 7: ERR BACKEND changes nothing: an UNLOCK sent while Redis is paused past
 * backend-timeout does not run when Redis comes back, so the lock stays with
 * its holder and its waiter is not granted. */
START_TEST(test_backend_error_changes_nothing)
{
    struct h_conn *a, *b;
    long long token;
    const char *r;

    D = h_dlockd_start(R->port, H_ARGS("--backend-timeout", "500ms"));
    a = H_CLIENT(D, "name=a ttl=2s");
    b = H_CLIENT(D, "name=b ttl=2s");
    token = H_LOCK_NEW(a, "dl");
    ck_assert_int_eq(h_send(b, "#b LOCK dl wait=inf"), 0);
    ck_assert(h_wait_waiters(a, "dl", 1, 5000));
    h_redis_pause(R);
    H_REQ(a, "ERR BACKEND %*", "UNLOCK dl");
    h_sleep_ms(300);
    h_redis_resume(R);
    r = H_REQ(a, "OK {%*}", "STATUS dl");
    ck_assert_msg(h_json_has(r, "\"client\":\"a\"") && h_json_int(r, "token") == token && h_json_int(r, "waiters") == 1,
                  "after ERR BACKEND: %s", r);
    ck_assert_ptr_null(h_reply_tag(b, "b", 1000));
    H_REQ(a, "OK count=0", "UNLOCK dl");
    H_REPLY(b, "#b OK token=%d count=1", H_TIMEOUT);
}
END_TEST

static Suite *bounds_suite(void)
{
    Suite *s = suite_create("bounds");
    TCase *handoff = tcase_create("handoff"), *limits = tcase_create("limits"), *keys = tcase_create("keys"),
          *status = tcase_create("status"), *deadline = tcase_create("deadline");

    tcase_add_checked_fixture(handoff, h_setup_redis, h_teardown);
    tcase_set_timeout(handoff, 120);
    tcase_add_test(handoff, test_handoff_in_chunks);
    tcase_add_test(handoff, test_handoff_survives_granter);
    tcase_add_checked_fixture(limits, h_setup_redis, h_teardown);
    tcase_add_test(limits, test_max_holds_counts_waits);
    tcase_add_test(limits, test_max_holds_total);
    tcase_add_test(limits, test_wait_limits);
    tcase_add_test(limits, test_latch_limits);
    tcase_add_test(limits, test_latch_ttl_cap);
    tcase_add_checked_fixture(keys, h_setup_redis, h_teardown);
    tcase_add_test(keys, test_keys_expire);
    tcase_add_checked_fixture(status, h_setup_both, h_teardown);
    tcase_add_test(status, test_status_bounded);
    tcase_add_checked_fixture(deadline, h_setup_redis, h_teardown);
    tcase_add_test(deadline, test_backend_error_changes_nothing);
    suite_add_tcase(s, handoff);
    suite_add_tcase(s, limits);
    suite_add_tcase(s, keys);
    suite_add_tcase(s, status);
    suite_add_tcase(s, deadline);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(bounds_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
