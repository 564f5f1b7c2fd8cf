/* check_primitives.c - integration tests of semaphores, latches, multi-name locks, deadlock detection, lock-delay, safe retries and type safety. */
#include "harness.h"

#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* A daemon measures a wait from a clock that may lag ours by a tick. */
#define EARLY_SLACK_MS 5


/* ACQUIRE expected to succeed with exactly held= and free=; returns the token. */
#define ACQ_OK(c, held, free_, ...) acquire_ok_at(__FILE__, __LINE__, (c), (held), (free_), __VA_ARGS__)
static long long acquire_ok_at(const char *file, int line, struct h_conn *c, int held, int free_, const char *fmt,
                               ...) __attribute__((format(printf, 6, 7)));
static long long acquire_ok_at(const char *file, int line, struct h_conn *c, int held, int free_, const char *fmt, ...)
{
    char args[256], pat[96];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(pat, sizeof pat, "OK token=%%d held=%d free=%d", held, free_);
    return h_kv_int_at(file, line, h_req_at(file, line, c, pat, "ACQUIRE %s", args), "token");
}

/* Fails unless the JSON reply contains needle (compact text). */
#define JHAS(r, needle) ck_assert_msg(h_json_has((r), (needle)), "reply lacks %s: %s", (needle), (r))
#define JHASNT(r, needle) ck_assert_msg(!h_json_has((r), (needle)), "reply has %s: %s", (needle), (r))

/* Number of holder objects in a STATUS reply. */
static int n_holders(const char *r)
{
    int n = 0;

    for (const char *p = strstr(r, "\"session\":"); p != NULL; p = strstr(p + 1, "\"session\":"))
        n++;
    return n;
}

/* STATUS of a name that nobody uses. */
static void expect_unused(struct h_conn *c, const char *name)
{
    const char *r = H_REQ(c, "OK {%*", "STATUS %s", name);

    JHAS(r, "\"type\":null");
    JHAS(r, "\"holders\":[]");
}

/* ------------------------------------------------------------ semaphores */

START_TEST(test_sem_basics)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    struct h_conn *c = H_CLIENT(D, "name=carol");
    char pat[160];
    const char *r;
    long long ta, tb, t;

    /* Numbers: held is this owner's permits, free what is left of the limit. */
    ta = ACQ_OK(a, 2, 3, "s1 limit=5 permits=2");
    ck_assert_int_gt(ta, 0);
    snprintf(pat, sizeof pat, "OK token=%lld held=3 free=2", ta);
    H_REQ(a, pat, "ACQUIRE s1 limit=5"); /* re-enters: same token, held grows; permits defaults to 1 */
    H_REQ(b, "BUSY free=2", "ACQUIRE s1 limit=5 permits=3");
    H_REQ(b, "BUSY free=2", "ACQUIRE s1 limit=5 permits=3 wait=0");
    tb = ACQ_OK(b, 2, 0, "s1 limit=5 permits=2");
    ck_assert_int_gt(tb, ta);
    H_REQ(b, "BUSY free=0", "ACQUIRE s1 limit=5");
    H_REQ(c, "BUSY free=0", "ACQUIRE s1 limit=5");
    /* Another owner of the same session is another holder. */
    H_REQ(a, "BUSY free=0", "ACQUIRE s1 limit=5 owner=w2");

    /* A different limit while held. */
    H_REQ(c, "ERR MISMATCH%*", "ACQUIRE s1 limit=4");
    H_REQ(c, "ERR MISMATCH%*", "ACQUIRE s1 limit=6");
    H_REQ(a, "ERR MISMATCH%*", "ACQUIRE s1 limit=4");
    /* permits > limit */
    H_REQ(c, "ERR SYNTAX%*", "ACQUIRE s1 limit=5 permits=6");
    H_REQ(c, "ERR SYNTAX%*", "ACQUIRE s9 limit=2 permits=3");
    expect_unused(c, "s9");

    r = H_REQ(c, "OK {%*", "STATUS s1");
    JHAS(r, "\"name\":\"s1\"");
    JHAS(r, "\"type\":\"semaphore\"");
    JHAS(r, "\"limit\":5");
    JHAS(r, "\"free\":0");
    JHAS(r, "\"waiters\":0");
    JHAS(r, "\"kind\":\"permits\"");
    JHAS(r, "\"permits\":3");
    JHAS(r, "\"permits\":2");
    JHAS(r, "\"client\":\"alice\"");
    JHAS(r, "\"client\":\"bob\"");
    snprintf(pat, sizeof pat, "\"token\":%lld", ta);
    JHAS(r, pat);
    snprintf(pat, sizeof pat, "\"token\":%lld", tb);
    JHAS(r, pat);
    ck_assert_msg(n_holders(r) == 2, "two holders expected: %s", r);

    /* Release by someone who holds nothing / another owner / more than held. */
    H_REQ(c, "ERR NOTHELD%*", "RELEASE s1");
    H_REQ(a, "ERR NOTHELD%*", "RELEASE s1 owner=other");
    H_REQ(b, "ERR NOTHELD%*", "RELEASE s1 permits=3");
    H_REQ(a, "ERR NOTHELD%*", "RELEASE s1 permits=4");
    H_REQ(a, "OK", "PING"); /* the connection stays usable */
    r = H_REQ(c, "OK {%*", "STATUS s1");
    JHAS(r, "\"free\":0");
    JHAS(r, "\"permits\":3");
    JHAS(r, "\"permits\":2");

    H_REQ(a, "OK held=1 free=2", "RELEASE s1 permits=2");
    H_REQ(a, "OK held=0 free=3", "RELEASE s1");
    H_REQ(a, "ERR NOTHELD%*", "RELEASE s1");
    /* A new hold gets a new, greater token. */
    t = ACQ_OK(a, 1, 2, "s1 limit=5");
    ck_assert_int_gt(t, tb);
    H_REQ(b, "OK held=0 free=4", "RELEASE s1 permits=2");
    H_REQ(a, "OK held=0 free=5", "RELEASE s1");
    expect_unused(c, "s1");

    /* Idle: the next ACQUIRE sets the limit again. */
    ACQ_OK(b, 1, 1, "s1 limit=2");
    r = H_REQ(c, "OK {%*", "STATUS s1");
    JHAS(r, "\"limit\":2");
    JHAS(r, "\"free\":1");
    H_REQ(c, "ERR MISMATCH%*", "ACQUIRE s1 limit=5");
    ACQ_OK(c, 1, 0, "s1 limit=2");
    H_REQ(a, "BUSY free=0", "ACQUIRE s1 limit=2");

    /* QUIT returns the permits of the session. */
    H_REQ(b, "OK", "QUIT");
    H_EOF(b, 3000);
    ACQ_OK(a, 1, 0, "s1 limit=2");
}
END_TEST

#define SEM_CLIENTS 16
#define SEM_ITERS 40
#define SEM_LIMIT 5

/* One semaphore stress client, in a forked process: no Check assertions here. Returns its exit code. */
static int sem_client(int id)
{
    struct h_conn *c = h_connect_try(D->port);
    const char *r;
    long long max = 0;
    char buf[32];

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    srand((unsigned)(getpid() * 7919 + id));
    if (c == NULL || (r = h_request(c, H_TIMEOUT, "HELLO name=sem-%d ttl=60s", id)) == NULL ||
        strncmp(r, "OK ", 3) != 0)
        return 2;
    for (int i = 0; i < SEM_ITERS; i++) {
        int k = 1 + rand() % 3;
        long long v, fr;
        char pat[64];

        r = h_request(c, 40000, "ACQUIRE stress limit=%d permits=%d wait=30s", SEM_LIMIT, k);
        snprintf(pat, sizeof pat, "OK token=%%d held=%d free=%%d", k);
        if (r == NULL || !h_match(r, pat) || (fr = h_kv_int(r, "free")) < 0 || fr > SEM_LIMIT - k) {
            fprintf(stderr, "sem client %d, iteration %d: ACQUIRE permits=%d -> %s\n", id, i, k, r ? r : "(nothing)");
            return 3;
        }
        snprintf(buf, sizeof buf, "%d", k);
        v = h_redis_int(R->port, "INCRBY", "test:inuse", buf, NULL);
        if (v == LLONG_MIN) {
            fprintf(stderr, "sem client %d: INCRBY failed\n", id);
            return 4;
        }
        if (v > max)
            max = v;
        if (v > SEM_LIMIT)
            fprintf(stderr, "sem client %d, iteration %d: %lld permits in use (limit %d)\n", id, i, v, SEM_LIMIT);
        h_sleep_ms(1 + rand() % 3);
        if (h_redis_int(R->port, "DECRBY", "test:inuse", buf, NULL) == LLONG_MIN) {
            fprintf(stderr, "sem client %d: DECRBY failed\n", id);
            return 4;
        }
        r = h_request(c, 15000, "RELEASE stress permits=%d", k);
        if (r == NULL || !h_match(r, "OK held=0 free=%d")) {
            fprintf(stderr, "sem client %d, iteration %d: RELEASE permits=%d -> %s\n", id, i, k, r ? r : "(nothing)");
            return 5;
        }
    }
    snprintf(buf, sizeof buf, "%lld", max);
    free(h_redis_cmd(R->port, "RPUSH", "test:max", buf, NULL));
    return 0;
}

START_TEST(test_sem_stress)
{
    struct h_conn *mon = H_CLIENT(D, "name=monitor ttl=60s");
    pid_t kids[SEM_CLIENTS];
    int done = 0, polls = 0;
    long long max = 0, n = 0;
    int64_t t0 = h_now_ms();
    char *maxes, *save = NULL, *tok;

    free(h_redis_cmd(R->port, "SET", "test:inuse", "0", NULL));
    for (int i = 0; i < SEM_CLIENTS; i++) {
        kids[i] = fork();
        ck_assert_int_ge(kids[i], 0);
        if (kids[i] == 0)
            _exit(sem_client(i));
    }
    /* Meanwhile STATUS must never show more permits held than the limit. */
    while (done < SEM_CLIENTS) {
        const char *r = H_REQ(mon, "OK {%*", "STATUS stress");
        long long fr = h_json_int(r, "free");

        polls++;
        if (h_json_has(r, "\"type\":\"semaphore\"")) {
            ck_assert_msg(fr >= 0 && fr <= SEM_LIMIT, "STATUS free out of range: %s", r);
            JHAS(r, "\"limit\":5");
        }
        for (int i = 0; i < SEM_CLIENTS; i++) {
            int status;
            pid_t p;

            if (kids[i] <= 0)
                continue;
            p = waitpid(kids[i], &status, WNOHANG);
            ck_assert_int_ge(p, 0);
            if (p == kids[i]) {
                ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "sem client %d failed (status %#x)", i,
                              status);
                kids[i] = 0;
                done++;
            }
        }
        h_sleep_ms(20);
    }
    maxes = h_redis_cmd(R->port, "LRANGE", "test:max", "0", "-1", NULL);
    ck_assert_ptr_nonnull(maxes);
    for (tok = strtok_r(maxes, "\n", &save); tok != NULL; tok = strtok_r(NULL, "\n", &save), n++) {
        long long v = strtoll(tok, NULL, 10);

        if (v > max)
            max = v;
    }
    free(maxes);
    fprintf(stderr, "sem stress: %d x %d acquire/release on limit %d in %lld ms, max permits in use %lld, %d polls\n",
            SEM_CLIENTS, SEM_ITERS, SEM_LIMIT, (long long)(h_now_ms() - t0), max, polls);
    ck_assert_int_eq(n, SEM_CLIENTS);
    ck_assert_msg(max <= SEM_LIMIT, "max permits in use %lld > limit %d", max, SEM_LIMIT);
    ck_assert_int_ge(max, 2); /* the test did run permits concurrently */
    ck_assert_int_eq(h_redis_int(R->port, "GET", "test:inuse", NULL), 0);
    expect_unused(mon, "stress");
}
END_TEST

START_TEST(test_sem_killed_client)
{
    struct h_conn *k = H_CLIENT(D, "name=killed ttl=2s");
    struct h_conn *w = H_CLIENT(D, "name=waiter ttl=30s");
    int64_t sent, replied, granted;
    const char *r;

    sent = h_now_ms();
    ACQ_OK(k, 3, 0, "kp limit=3 permits=3"); /* the killed client's last request */
    replied = h_now_ms();
    h_close(k); /* no QUIT: the session lives on until its ttl runs out */
    r = H_REQ(w, "OK {%*", "STATUS kp");
    JHAS(r, "\"free\":0");
    JHAS(r, "\"client\":\"killed\"");
    H_REQ(w, "BUSY free=0", "ACQUIRE kp limit=3");
    ck_assert_int_eq(h_send(w, "ACQUIRE kp limit=3 permits=2 wait=10s"), 0);
    H_REPLY(w, "OK token=%d held=2 free=1", 10000 + 2000);
    granted = h_now_ms();
    fprintf(stderr, "permit-leak time of a killed client: %lld ms after its last request (session ttl 2000 ms)\n",
            (long long)(granted - replied));
    ck_assert_msg(granted - sent >= 2000 - 20, "permits returned %lld ms after the last request, ttl is 2 s",
                  (long long)(granted - sent));
    ck_assert_msg(granted - replied <= 2000 + 1500, "permits returned %lld ms after the last request, ttl is 2 s",
                  (long long)(granted - replied));
    r = H_REQ(w, "OK {%*", "STATUS kp");
    JHASNT(r, "\"client\":\"killed\"");
    ck_assert_msg(n_holders(r) == 1, "%s", r);
}
END_TEST

START_TEST(test_sem_fifo_large_head)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    struct h_conn *c = H_CLIENT(D, "name=carol");
    const char *r;

    ACQ_OK(a, 2, 1, "ff limit=3 permits=2");
    ck_assert_int_eq(h_send(b, "ACQUIRE ff limit=3 permits=3 wait=20s"), 0);
    ck_assert_msg(h_wait_waiters(a, "ff", 1, 3000), "B is not queued");
    ck_assert_int_eq(h_send(c, "ACQUIRE ff limit=3 permits=1 wait=20s"), 0);
    ck_assert_msg(h_wait_waiters(a, "ff", 2, 3000), "C is not queued");
    /* One permit is free, but C must not overtake B at the head. */
    H_SILENT(c, 500);
    H_SILENT(b, 0);
    r = H_REQ(a, "OK {%*", "STATUS ff");
    JHAS(r, "\"free\":1");
    JHAS(r, "\"waiters\":2");
    /* Not even a holder asking for more overtakes a queued waiter. */
    H_REQ(a, "BUSY free=1", "ACQUIRE ff limit=3");
    H_REQ(a, "BUSY free=1", "ACQUIRE ff limit=3 owner=w2");
    H_SILENT(c, 0);

    H_REQ(a, "OK held=0 free=%d", "RELEASE ff permits=2");
    H_REPLY(b, "OK token=%d held=3 free=0", 3000);
    H_SILENT(c, 300);
    H_REQ(b, "OK held=0 free=%d", "RELEASE ff permits=3");
    H_REPLY(c, "OK token=%d held=1 free=2", 3000);
    r = H_REQ(a, "OK {%*", "STATUS ff");
    JHAS(r, "\"free\":2");
    JHAS(r, "\"waiters\":0");
    JHAS(r, "\"client\":\"carol\"");
}
END_TEST

/* --------------------------------------------------------------- latches */

#define AWAITERS 20

START_TEST(test_latch_many_awaiters)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *w[AWAITERS];
    int64_t t0, el;
    const char *r;

    H_REQ(a, "OK count=3", "LATCH l1 count=3");
    for (int i = 0; i < AWAITERS; i++) {
        char hello[32];

        snprintf(hello, sizeof hello, "name=aw%d ttl=60s", i);
        w[i] = H_CLIENT(D, hello);
        if (i % 2)
            ck_assert_int_eq(h_send(w[i], "#aw%d AWAIT l1 wait=10s", i), 0);
        else
            ck_assert_int_eq(h_send(w[i], "AWAIT l1 wait=10s"), 0);
    }
    h_sleep_ms(300);
    for (int i = 0; i < AWAITERS; i++)
        H_SILENT(w[i], 0);
    H_REQ(a, "OK count=2", "COUNTDOWN l1");
    H_REQ(a, "OK count=2", "LATCH l1 count=9"); /* an existing latch: its current count */
    r = H_REQ(a, "OK {%*", "STATUS l1");
    JHAS(r, "\"name\":\"l1\"");
    JHAS(r, "\"type\":\"latch\"");
    JHAS(r, "\"count\":2");
    H_REQ(a, "OK count=1", "COUNTDOWN l1");
    h_sleep_ms(200);
    for (int i = 0; i < AWAITERS; i++)
        H_SILENT(w[i], 0);
    t0 = h_now_ms();
    H_REQ(a, "OK count=0", "COUNTDOWN l1");
    for (int i = 0; i < AWAITERS; i++) {
        char pat[32];

        if (i % 2)
            snprintf(pat, sizeof pat, "#aw%d OK", i);
        else
            snprintf(pat, sizeof pat, "OK");
        H_REPLY(w[i], pat, 3000);
    }
    el = h_now_ms() - t0;
    fprintf(stderr, "latch: %d awaiters released %lld ms after the last COUNTDOWN\n", AWAITERS, (long long)el);
    ck_assert_msg(el <= 2000, "awaiters released %lld ms after the count reached 0", (long long)el);
    /* Reaching 0 deletes it. */
    expect_unused(a, "l1");
    H_REQ(a, "OK", "AWAIT l1");
    H_REQ(w[0], "OK", "AWAIT l1 wait=5s");
}
END_TEST

START_TEST(test_latch_edges)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    int64_t t0, el;

    H_REQ(a, "OK", "AWAIT nolatch");
    H_REQ(a, "OK", "AWAIT nolatch wait=0");
    H_REQ(a, "OK", "AWAIT nolatch wait=5s");
    H_REQ(a, "OK count=0", "COUNTDOWN nolatch");
    H_REQ(a, "OK count=0", "COUNTDOWN nolatch n=3");
    expect_unused(a, "nolatch"); /* COUNTDOWN does not create one */

    H_REQ(a, "OK count=2", "LATCH l2 count=2");
    H_REQ(a, "OK count=2", "LATCH l2 count=1");
    H_REQ(a, "TIMEOUT", "AWAIT l2 wait=0");
    H_REQ(a, "TIMEOUT", "AWAIT l2"); /* wait defaults to 0 */
    t0 = h_now_ms();
    H_REQ(a, "TIMEOUT", "AWAIT l2 wait=300ms");
    el = h_now_ms() - t0;
    ck_assert_msg(el >= 300 - EARLY_SLACK_MS && el < 300 + 1500, "TIMEOUT after %lld ms for wait=300ms",
                  (long long)el);
    H_REQ(a, "#t OK count=1", "#t COUNTDOWN l2");
    H_REQ(a, "OK count=0", "COUNTDOWN l2 n=1");
    H_REQ(a, "OK", "AWAIT l2");
    expect_unused(a, "l2");
    H_REQ(a, "OK count=5", "LATCH l2 count=5"); /* a new one once deleted */
    H_REQ(a, "OK count=2", "COUNTDOWN l2 n=3");
}
END_TEST

START_TEST(test_latch_two_daemons)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(d2, "name=bob");
    struct h_conn *b2 = H_CLIENT(d2, "name=bob2");
    int64_t t0, el;

    H_REQ(a, "OK count=2", "LATCH xl count=2");
    H_REQ(b, "OK count=2", "LATCH xl count=7"); /* the same latch seen from the other daemon */
    ck_assert_int_eq(h_send(b, "AWAIT xl wait=10s"), 0);
    ck_assert_int_eq(h_send(b2, "#q AWAIT xl wait=10s"), 0);
    H_REQ(a, "OK count=1", "COUNTDOWN xl");
    H_SILENT(b, 300);
    H_SILENT(b2, 0);
    t0 = h_now_ms();
    H_REQ(a, "OK count=0", "COUNTDOWN xl");
    H_REPLY(b, "OK", 3000);
    H_REPLY(b2, "#q OK", 3000);
    el = h_now_ms() - t0;
    ck_assert_msg(el <= 2000, "awaiters on the other daemon released after %lld ms", (long long)el);
}
END_TEST

/* ----------------------------------------------------- multi-name locks */

START_TEST(test_multi_atomic)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    struct h_conn *c = H_CLIENT(D, "name=carol");
    int64_t t0, el;
    const char *r;

    H_LOCK_NEW(a, "mb");
    /* A waiting multi-lock holds nothing while it waits. */
    t0 = h_now_ms();
    ck_assert_int_eq(h_send(b, "LOCK ma mb wait=1500ms"), 0);
    ck_assert_msg(h_wait_waiters(c, "ma", 1, 1000), "the multi-lock is not queued on ma");
    r = H_REQ(c, "OK {%*", "STATUS ma");
    JHAS(r, "\"holders\":[]");
    JHAS(r, "\"waiters\":1");
    r = H_REQ(c, "OK {%*", "STATUS mb");
    JHAS(r, "\"waiters\":1");
    ck_assert_msg(n_holders(r) == 1 && h_json_has(r, "\"client\":\"alice\""), "%s", r);
    /* A later plain LOCK of ma queues behind it (FIFO): BUSY, though nobody holds ma. */
    H_REQ(c, "BUSY%*", "LOCK ma");
    r = H_REQ(c, "OK {%*", "STATUS ma");
    JHAS(r, "\"holders\":[]");
    H_REPLY(b, "TIMEOUT", 1500 + 3000);
    el = h_now_ms() - t0;
    ck_assert_msg(el >= 1500 - EARLY_SLACK_MS && el < 1500 + 1500, "TIMEOUT after %lld ms for wait=1500ms",
                  (long long)el);
    /* On TIMEOUT nothing is held and nothing waits. */
    r = H_REQ(c, "OK {%*", "STATUS ma");
    JHAS(r, "\"holders\":[]");
    JHAS(r, "\"waiters\":0");
    r = H_REQ(c, "OK {%*", "STATUS mb");
    JHAS(r, "\"waiters\":0");
    ck_assert_msg(n_holders(r) == 1 && h_json_has(r, "\"client\":\"alice\""), "%s", r);
    H_REQ(b, "ERR NOTHELD%*", "UNLOCK ma");
    H_LOCK_NEW(c, "ma");
    H_REQ(c, "OK count=0", "UNLOCK ma");

    /* wait=0 with one name busy: BUSY, and the free name is not held. */
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK ma mb");
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK mb ma wait=0");
    expect_unused(c, "ma");
    H_REQ(b, "ERR NOTHELD%*", "UNLOCK ma");

    /* A waiting multi-lock is granted all names at once when the last one frees. */
    ck_assert_int_eq(h_send(b, "LOCK ma mb mc wait=10s"), 0);
    ck_assert(h_wait_waiters(c, "mc", 1, 3000));
    H_SILENT(b, 200);
    H_REQ(a, "OK count=0", "UNLOCK mb");
    H_REPLY(b, "OK tokens=%d,%d,%d counts=1,1,1", 3000);
    H_REQ(c, "BUSY holder=bob ttl=%d", "LOCK ma");
    H_REQ(c, "BUSY holder=bob ttl=%d", "LOCK mb");
    H_REQ(c, "BUSY holder=bob ttl=%d", "LOCK mc");

    /* Multi UNLOCK with one name not held releases nothing. */
    H_REQ(b, "ERR NOTHELD%*", "UNLOCK ma md");
    H_REQ(b, "ERR NOTHELD%*", "UNLOCK md mb");
    r = H_REQ(c, "OK {%*", "STATUS ma");
    JHAS(r, "\"client\":\"bob\"");
    JHAS(r, "\"count\":1");
    r = H_REQ(c, "OK {%*", "STATUS mb");
    JHAS(r, "\"client\":\"bob\"");
    JHAS(r, "\"count\":1");
    H_REQ(c, "BUSY holder=bob ttl=%d", "LOCK mb");
    /* Reentrant and new holds in one request; counts and tokens in request order. */
    r = H_REQ(b, "OK tokens=%d,%d counts=2,1", "LOCK ma md");
    H_REQ(b, "OK counts=1,0,0", "UNLOCK ma md mb");
    H_REQ(b, "OK counts=0,0", "UNLOCK mc ma");
    H_REQ(b, "ERR NOTHELD%*", "UNLOCK ma");
    H_REQ(c, "OK tokens=%d,%d,%d,%d counts=1,1,1,1", "LOCK ma mb mc md");
}
END_TEST

/* ------------------------------------------------------------- deadlocks */

START_TEST(test_deadlock_upgraders)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    int64_t t0, el;
    long long t1, t2;

    t1 = H_LOCK_NEW(a, "du shared");
    H_LOCK_NEW(b, "du shared");
    ck_assert_int_eq(h_send(a, "LOCK du wait=5s"), 0);
    ck_assert(h_wait_waiters(b, "du", 1, 3000));
    H_SILENT(a, 200);
    t0 = h_now_ms();
    H_REQ(b, "ERR DEADLOCK%*", "LOCK du wait=5s");
    el = h_now_ms() - t0;
    ck_assert_msg(el < 1000, "ERR DEADLOCK after %lld ms, not at once", (long long)el);
    H_SILENT(a, 0);
    H_REQ(b, "OK count=0", "UNLOCK du shared");
    t2 = H_KV_INT(H_REPLY(a, "OK token=%d count=1", 3000), "token");
    ck_assert_int_gt(t2, t1);
    /* a now holds both modes: the exclusive UNLOCK first, then the shared one. */
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK du shared");
    H_REQ(a, "OK count=0", "UNLOCK du");
    H_REQ(a, "OK count=0", "UNLOCK du");
    H_REQ(a, "ERR NOTHELD%*", "UNLOCK du");
}
END_TEST

START_TEST(test_deadlock_cross)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    int64_t t0, el;

    H_LOCK_NEW(a, "dx");
    H_LOCK_NEW(b, "dy");
    ck_assert_int_eq(h_send(a, "LOCK dy wait=5s"), 0);
    ck_assert(h_wait_waiters(b, "dy", 1, 3000));
    t0 = h_now_ms();
    H_REQ(b, "ERR DEADLOCK%*", "LOCK dx wait=5s");
    el = h_now_ms() - t0;
    ck_assert_msg(el < 1000, "ERR DEADLOCK after %lld ms, not at once", (long long)el);
    H_SILENT(a, 200);
    H_REQ(b, "OK count=0", "UNLOCK dy");
    H_REPLY(a, "OK token=%d count=1", 3000);
    /* Owners of one session are distinct parties in the wait-for graph too. */
    H_LOCK_NEW(b, "dz owner=t2");
    ck_assert_int_eq(h_send(b, "#w LOCK dx owner=t2 wait=5s"), 0);
    ck_assert(h_wait_waiters(a, "dx", 1, 3000));
    H_REQ(a, "ERR DEADLOCK%*", "LOCK dz wait=5s");
    H_REQ(a, "OK count=0", "UNLOCK dx");
    H_REPLY(b, "#w OK token=%d count=1", 3000);
}
END_TEST

START_TEST(test_deadlock_two_daemons)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(d2, "name=bob");
    int64_t t0, el;

    H_LOCK_NEW(a, "dd shared");
    H_LOCK_NEW(b, "dd shared");
    ck_assert_int_eq(h_send(a, "LOCK dd wait=5s"), 0);
    ck_assert(h_wait_waiters(b, "dd", 1, 3000));
    t0 = h_now_ms();
    H_REQ(b, "ERR DEADLOCK%*", "LOCK dd wait=5s");
    el = h_now_ms() - t0;
    ck_assert_msg(el < 1000, "ERR DEADLOCK after %lld ms, not at once", (long long)el);
    H_SILENT(a, 200);
    H_REQ(b, "OK count=0", "UNLOCK dd shared");
    H_REPLY(a, "OK token=%d count=1", 3000);
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK dd shared");
}
END_TEST

/* ------------------------------------------------------------ lock-delay */

START_TEST(test_lock_delay)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--lock-delay", "2s"));
    struct h_conn *h = H_CLIENT(d, "name=holder ttl=1s");
    struct h_conn *w = H_CLIENT(d, "name=waiter ttl=30s");
    struct h_conn *o = H_CLIENT(d, "name=other ttl=30s");
    int64_t sent, replied, bye, granted;
    long long ttl, t;
    const char *r;

    /* A waiter is granted about lock-delay after the holder's session expired. */
    sent = h_now_ms();
    t = H_LOCK_NEW(h, "ld1"); /* the holder's last request */
    replied = h_now_ms();
    ck_assert_int_eq(h_send(w, "LOCK ld1 wait=10s"), 0);
    H_EVENT(h, "* BYE reason=expired", 1000 + 1500 + 2000);
    bye = h_now_ms();
    r = H_REQ(o, "BUSY holder=- ttl=%d", "LOCK ld1");
    ttl = H_KV_INT(r, "ttl");
    ck_assert_msg(ttl > 0 && ttl <= 2000, "BUSY during lock-delay: %s (lock-delay 2000 ms)", r);
    H_SILENT(w, 0);
    ck_assert_int_gt(H_KV_INT(H_REPLY(w, "OK token=%d count=1", 2000 + 5000), "token"), t);
    granted = h_now_ms();
    fprintf(stderr, "lock-delay 2s, ttl 1s: expiry (BYE) %lld ms, grant %lld ms after the holder's last request\n",
            (long long)(bye - replied), (long long)(granted - replied));
    ck_assert_msg(granted - sent >= 1000 + 1500, "granted %lld ms after the last request (ttl 1s + lock-delay 2s)",
                  (long long)(granted - sent));
    ck_assert_msg(granted - bye >= 1500 && granted - bye <= 2000 + 2000,
                  "granted %lld ms after the session expired (lock-delay 2s)", (long long)(granted - bye));
    ck_assert_msg(granted - replied <= 1000 + 1500 + 2000 + 2000, "granted %lld ms after the last request",
                  (long long)(granted - replied));
    H_REQ(w, "OK count=0", "UNLOCK ld1");

    /* Without a waiter: BUSY holder=- until about expiry + 2 s, then OK. */
    h = H_CLIENT(d, "name=holder2 ttl=1s");
    H_LOCK_NEW(h, "ld2");
    H_EVENT(h, "* BYE reason=expired", 1000 + 1500 + 2000);
    bye = h_now_ms();
    for (;;) {
        r = H_REQ(o, "%*", "LOCK ld2");
        if (strncmp(r, "OK ", 3) == 0)
            break;
        ck_assert_msg(h_match(r, "BUSY holder=- ttl=%d"), "LOCK during lock-delay: %s", r);
        ck_assert_msg(h_now_ms() - bye < 2000 + 3000, "still BUSY %lld ms after expiry", (long long)(h_now_ms() - bye));
        h_sleep_ms(50);
    }
    granted = h_now_ms();
    ck_assert_msg(granted - bye >= 1500 && granted - bye <= 2000 + 2000, "free %lld ms after expiry (lock-delay 2s)",
                  (long long)(granted - bye));

    /* Not after QUIT (nor UNLOCK): granted at once. */
    h = H_CLIENT(d, "name=holder4 ttl=10s");
    H_LOCK_NEW(h, "ld3");
    ck_assert_int_eq(h_send(w, "LOCK ld3 wait=10s"), 0);
    ck_assert(h_wait_waiters(o, "ld3", 1, 800));
    sent = h_now_ms();
    H_REQ(h, "OK", "QUIT");
    H_REPLY(w, "OK token=%d count=1", 3000);
    granted = h_now_ms();
    ck_assert_msg(granted - sent < 500, "granted %lld ms after the holder's QUIT", (long long)(granted - sent));
    ck_assert_int_eq(h_send(o, "LOCK ld3 wait=10s"), 0);
    ck_assert(h_wait_waiters(w, "ld3", 1, 3000));
    sent = h_now_ms();
    H_REQ(w, "OK count=0", "UNLOCK ld3");
    H_REPLY(o, "OK token=%d count=1", 3000);
    ck_assert_msg(h_now_ms() - sent < 500, "granted %lld ms after UNLOCK", (long long)(h_now_ms() - sent));

    /* Permits of an expired session are delayed too, all of them (last: a failure here hides nothing). */
    h = H_CLIENT(d, "name=holder3 ttl=1s");
    ACQ_OK(h, 2, 0, "lds limit=2 permits=2");
    H_EVENT(h, "* BYE reason=expired", 1000 + 1500 + 2000);
    bye = h_now_ms();
    H_REQ(o, "BUSY free=0", "ACQUIRE lds limit=2");
    ck_assert_int_eq(h_send(o, "ACQUIRE lds limit=2 wait=10s"), 0);
    H_REPLY(o, "OK token=%d held=1 free=1", 2000 + 5000);
    granted = h_now_ms();
    ck_assert_msg(granted - bye >= 1500 && granted - bye <= 2000 + 2000,
                  "permits free %lld ms after expiry (lock-delay 2s)", (long long)(granted - bye));
}
END_TEST

/* ----------------------------------------------------------- safe retries */

START_TEST(test_safe_retry_lock)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    char first[256], pat[300];
    const char *r;

    r = H_REQ(a, "OK token=%d count=1", "LOCK rx id=r1");
    snprintf(first, sizeof first, "%s", r);
    H_REQ(a, first, "LOCK rx id=r1");
    r = H_REQ(a, "OK {%*", "STATUS rx");
    JHAS(r, "\"count\":1");
    /* The repeat carries its own tag. */
    r = H_REQ(a, "#t1 OK token=%d count=1", "#t1 LOCK rx2 id=r2");
    snprintf(pat, sizeof pat, "#t2 %s", r + 4);
    H_REQ(a, pat, "#t2 LOCK rx2 id=r2");
    r = H_REQ(b, "OK {%*", "STATUS rx2");
    JHAS(r, "\"count\":1");
    /* Ids belong to the session: another session's r1 runs. */
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK rx id=r1");

    /* UNLOCK id=: the second changes nothing. */
    H_REQ(a, "OK token=%d count=2", "LOCK rx"); /* no id: reentrant */
    H_REQ(a, "OK count=1", "UNLOCK rx id=u1");
    H_REQ(a, "OK count=1", "UNLOCK rx id=u1");
    r = H_REQ(a, "OK {%*", "STATUS rx");
    JHAS(r, "\"count\":1");
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK rx");
    /* A remembered BUSY stays BUSY, even after the lock freed. */
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK rx id=b1");
    H_REQ(a, "OK count=0", "UNLOCK rx id=u2");
    H_REQ(a, "OK count=0", "UNLOCK rx id=u2"); /* not ERR NOTHELD: the remembered reply */
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK rx id=b1");
    H_LOCK_NEW(b, "rx id=b2");
}
END_TEST

START_TEST(test_safe_retry_sem)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    char first[256];
    const char *r;

    r = H_REQ(a, "OK token=%d held=2 free=1", "ACQUIRE rs limit=3 permits=2 id=a1");
    snprintf(first, sizeof first, "%s", r);
    H_REQ(a, first, "ACQUIRE rs limit=3 permits=2 id=a1");
    r = H_REQ(b, "OK {%*", "STATUS rs");
    JHAS(r, "\"permits\":2");
    JHAS(r, "\"free\":1");
    H_REQ(a, "OK held=1 free=2", "RELEASE rs id=r1");
    H_REQ(a, "OK held=1 free=2", "RELEASE rs id=r1");
    r = H_REQ(b, "OK {%*", "STATUS rs");
    JHAS(r, "\"permits\":1");
    JHAS(r, "\"free\":2");
    H_REQ(a, "OK held=0 free=3", "RELEASE rs id=r2");
    H_REQ(a, "OK held=0 free=3", "RELEASE rs id=r2");
    expect_unused(b, "rs");
}
END_TEST

START_TEST(test_safe_retry_reconnect)
{
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    struct h_conn *a2;
    char first[256], sfirst[256], sid[64], secret[64], pat[200];
    const char *r;

    snprintf(sid, sizeof sid, "%s", a->session);
    snprintf(secret, sizeof secret, "%s", a->secret);
    r = H_REQ(a, "OK token=%d count=1", "LOCK rr id=k1");
    snprintf(first, sizeof first, "%s", r);
    r = H_REQ(a, "OK token=%d held=1 free=1", "ACQUIRE rrs limit=2 id=k2");
    snprintf(sfirst, sizeof sfirst, "%s", r);
    h_close(a); /* as if the reply had been lost with the connection */
    a2 = H_CONNECT(D->port);
    snprintf(pat, sizeof pat, "OK session=%s secret=%s ttl=30000 proto=1 server=dlockd/%%w resumed=1 lease=%%d", sid,
             secret);
    H_REQ(a2, pat, "HELLO session=%s secret=%s", sid, secret);
    H_REQ(a2, first, "LOCK rr id=k1");
    H_REQ(a2, sfirst, "ACQUIRE rrs limit=2 id=k2");
    r = H_REQ(b, "OK {%*", "STATUS rr");
    JHAS(r, "\"count\":1");
    r = H_REQ(b, "OK {%*", "STATUS rrs");
    JHAS(r, "\"permits\":1");
    H_REQ(a2, "OK count=0", "UNLOCK rr id=k3");
    H_REQ(a2, "OK held=0 free=2", "RELEASE rrs id=k4");
    H_LOCK_NEW(b, "rr");
}
END_TEST

START_TEST(test_safe_retry_running)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    char l1[256], l2[256];
    const char *r;

    H_LOCK_NEW(a, "rw");
    ck_assert_int_eq(h_send(b, "#r1 LOCK rw wait=10s id=w1"), 0);
    ck_assert(h_wait_waiters(a, "rw", 1, 3000));
    /* The repeat while the first still waits: same reply when it finishes; it does not queue again. */
    ck_assert_int_eq(h_send(b, "#r2 LOCK rw wait=10s id=w1"), 0);
    H_SILENT(b, 300);
    r = H_REQ(a, "OK {%*", "STATUS rw");
    JHAS(r, "\"waiters\":1");
    H_REQ(a, "OK count=0", "UNLOCK rw");
    r = h_reply_tag(b, "r1", 3000);
    ck_assert_msg(r != NULL && h_match(r, "#r1 OK token=%d count=1"), "first: %s", r ? r : "(nothing)");
    snprintf(l1, sizeof l1, "%s", r + 4);
    r = h_reply_tag(b, "r2", 3000);
    ck_assert_msg(r != NULL, "the repeat got no reply");
    snprintf(l2, sizeof l2, "%s", r + 4);
    ck_assert_str_eq(l2, l1);
    r = H_REQ(a, "OK {%*", "STATUS rw");
    JHAS(r, "\"count\":1");
    JHAS(r, "\"waiters\":0");
    H_REQ(b, "OK count=0", "UNLOCK rw");
    H_REQ(b, "ERR NOTHELD%*", "UNLOCK rw");
}
END_TEST

/* -------------------------------------------------------------- WRONGTYPE */

START_TEST(test_wrongtype)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    char pat[160];
    const char *r;
    long long t;

    /* A lock name, held. */
    t = H_LOCK_NEW(a, "wl");
    H_REQ(b, "ERR WRONGTYPE%*", "ACQUIRE wl limit=2");
    H_REQ(a, "ERR WRONGTYPE%*", "ACQUIRE wl limit=2");
    H_REQ(b, "ERR WRONGTYPE%*", "LATCH wl count=1");
    H_REQ(b, "ERR WRONGTYPE%*", "AWAIT wl");
    H_REQ(b, "ERR WRONGTYPE%*", "COUNTDOWN wl");
    /* UNLOCK and RELEASE do not look at the type (PROTOCOL.md, "Names and types"). */
    H_REQ(b, "ERR NOTHELD%*", "RELEASE wl");
    H_REQ(a, "ERR NOTHELD%*", "RELEASE wl");
    r = H_REQ(b, "OK {%*", "STATUS wl");
    JHAS(r, "\"name\":\"wl\"");
    JHAS(r, "\"type\":\"lock\"");
    JHAS(r, "\"holders\":[{");
    snprintf(pat, sizeof pat, "\"session\":\"%s\"", a->session);
    JHAS(r, pat);
    JHAS(r, "\"client\":\"alice\"");
    JHAS(r, "\"owner\":\"\"");
    JHAS(r, "\"mode\":\"exclusive\"");
    JHAS(r, "\"count\":1");
    snprintf(pat, sizeof pat, "\"token\":%lld", t);
    JHAS(r, pat);
    JHAS(r, "\"held_ms\":");
    JHAS(r, "\"waiters\":0");
    JHASNT(r, "\"limit\"");
    H_REQ(a, "OK count=0", "UNLOCK wl");
    /* Idle again: the name may become another type. */
    ACQ_OK(b, 1, 1, "wl limit=2");
    H_REQ(a, "ERR WRONGTYPE%*", "LOCK wl");
    H_REQ(b, "OK held=0 free=2", "RELEASE wl");

    /* A semaphore name, held. */
    t = ACQ_OK(a, 2, 1, "ws limit=3 permits=2 owner=o1");
    H_REQ(b, "ERR WRONGTYPE%*", "LOCK ws");
    H_REQ(b, "ERR WRONGTYPE%*", "LOCK ws shared wait=2s");
    H_REQ(a, "ERR WRONGTYPE%*", "LOCK ws owner=o1");
    H_REQ(b, "ERR WRONGTYPE%*", "LOCK free1 ws");
    expect_unused(b, "free1"); /* nothing of a refused multi-lock is held */
    H_REQ(b, "ERR WRONGTYPE%*", "LATCH ws count=1");
    H_REQ(b, "ERR WRONGTYPE%*", "AWAIT ws");
    H_REQ(b, "ERR WRONGTYPE%*", "COUNTDOWN ws");
    H_REQ(b, "ERR NOTHELD%*", "UNLOCK ws");
    H_REQ(a, "ERR NOTHELD%*", "UNLOCK ws owner=o1");
    r = H_REQ(b, "OK {%*", "STATUS ws");
    JHAS(r, "\"name\":\"ws\"");
    JHAS(r, "\"type\":\"semaphore\"");
    snprintf(pat, sizeof pat, "\"session\":\"%s\"", a->session);
    JHAS(r, pat);
    JHAS(r, "\"client\":\"alice\"");
    JHAS(r, "\"owner\":\"o1\"");
    JHAS(r, "\"kind\":\"permits\"");
    JHAS(r, "\"permits\":2");
    snprintf(pat, sizeof pat, "\"token\":%lld", t);
    JHAS(r, pat);
    JHAS(r, "\"held_ms\":");
    JHAS(r, "\"waiters\":0");
    JHAS(r, "\"limit\":3");
    JHAS(r, "\"free\":1");
    JHASNT(r, "\"mode\"");

    /* A latch. */
    H_REQ(a, "OK count=2", "LATCH wt count=2");
    H_REQ(b, "ERR WRONGTYPE%*", "LOCK wt");
    H_REQ(b, "ERR WRONGTYPE%*", "LOCK wt shared wait=1s");
    H_REQ(b, "ERR WRONGTYPE%*", "ACQUIRE wt limit=2");
    H_REQ(b, "ERR WRONGTYPE%*", "LOCK free1 wt");
    expect_unused(b, "free1");
    r = H_REQ(b, "OK {%*", "STATUS wt");
    JHAS(r, "\"name\":\"wt\"");
    JHAS(r, "\"type\":\"latch\"");
    JHAS(r, "\"count\":2");
    H_REQ(b, "ERR NOTHELD%*", "UNLOCK wt");
    H_REQ(b, "ERR NOTHELD%*", "RELEASE wt");
    H_REQ(a, "OK count=0", "COUNTDOWN wt n=2");
    H_LOCK_NEW(b, "wt"); /* a deleted latch's name is free */

    /* A lock name only waited for is in use as well. */
    H_LOCK_NEW(a, "wq");
    ck_assert_int_eq(h_send(b, "LOCK wq wait=10s"), 0);
    ck_assert(h_wait_waiters(a, "wq", 1, 3000));
    H_REQ(a, "ERR WRONGTYPE%*", "LATCH wq count=1");
    H_REQ(a, "OK count=0", "UNLOCK wq");
    H_REPLY(b, "OK token=%d count=1", 3000);
}
END_TEST

static Suite *primitives_suite(void)
{
    Suite *s = suite_create("primitives");
    TCase *sem = tcase_create("semaphores");
    TCase *latch = tcase_create("latches");
    TCase *multi = tcase_create("multi-deadlock");
    TCase *cfg = tcase_create("lock-delay");
    TCase *retry = tcase_create("retries-types");

    tcase_add_checked_fixture(sem, h_setup_both, h_teardown);
    tcase_set_timeout(sem, 180);
    tcase_add_test(sem, test_sem_basics);
    tcase_add_test(sem, test_sem_stress);
    tcase_add_test(sem, test_sem_killed_client);
    tcase_add_test(sem, test_sem_fifo_large_head);
    suite_add_tcase(s, sem);

    tcase_add_checked_fixture(latch, h_setup_both, h_teardown);
    tcase_set_timeout(latch, 60);
    tcase_add_test(latch, test_latch_many_awaiters);
    tcase_add_test(latch, test_latch_edges);
    tcase_add_test(latch, test_latch_two_daemons);
    suite_add_tcase(s, latch);

    tcase_add_checked_fixture(multi, h_setup_both, h_teardown);
    tcase_set_timeout(multi, 60);
    tcase_add_test(multi, test_multi_atomic);
    tcase_add_test(multi, test_deadlock_upgraders);
    tcase_add_test(multi, test_deadlock_cross);
    tcase_add_test(multi, test_deadlock_two_daemons);
    suite_add_tcase(s, multi);

    tcase_add_checked_fixture(cfg, h_setup_redis, h_teardown);
    tcase_set_timeout(cfg, 90);
    tcase_add_test(cfg, test_lock_delay);
    suite_add_tcase(s, cfg);

    tcase_add_checked_fixture(retry, h_setup_both, h_teardown);
    tcase_set_timeout(retry, 60);
    tcase_add_test(retry, test_safe_retry_lock);
    tcase_add_test(retry, test_safe_retry_sem);
    tcase_add_test(retry, test_safe_retry_reconnect);
    tcase_add_test(retry, test_safe_retry_running);
    tcase_add_test(retry, test_wrongtype);
    suite_add_tcase(s, retry);
    return s;
}

int main(void)
{
    return h_run_suite(primitives_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
