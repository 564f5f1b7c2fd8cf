/* check_auth.c - sessions with a secret, nothing before AUTH, per-connection limits, closes that free requests. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ---------------------------------------------------------------- helpers */

/* 1 when the 32 characters of s are lower-case hex and nothing follows. */
static int is_secret(const char *s)
{
    return strlen(s) == 32 && strspn(s, "0123456789abcdef") == 32;
}

/* ---------------------------------------------------------------- closes (item 1) */

/*
 * #a waits for lo (held by o) with id=X; #b, with the same id, is parked as
 * its repeat. #b would fail at once if it ran (permits above limit), ending
 * inside whatever ran it: the use-after-free that killed dlockd at a close.
 */
static void park_repeat(struct h_conn *c, struct h_conn *o, const char *lo)
{
    ck_assert_int_eq(h_send(c, "#a LOCK %s wait=inf id=X", lo), 0);
    ck_assert(h_wait_waiters(o, lo, 1, 3000));
    ck_assert_int_eq(h_send(c, "#b ACQUIRE %s-s limit=1 permits=2 id=X", lo), 0);
    H_REQ(c, "#p OK", "#p PING"); /* tagged requests run in order: #b is parked now */
}

/* The daemon lives, and the wait of #a is gone: lo passes to a newcomer at once. */
static void after_close(struct h_conn *o, const char *lo)
{
    struct h_conn *n;

    ck_assert(h_wait_waiters_eq(o, lo, 0, 3000));
    H_REQ(o, "OK count=0", "UNLOCK %s", lo);
    n = H_CLIENT(D, "name=newcomer");
    H_LOCK_NEW(n, lo);
}

static const char *const closes[] = {"close", "half-close", "QUIT"};

START_TEST(test_close_with_parked_repeat)
{
    struct h_conn *o = H_CLIENT(D, "name=owner");
    struct h_conn *c = H_CLIENT(D, "name=victim");

    H_LOCK_NEW(o, "uaf");
    park_repeat(c, o, "uaf");
    if (_i == 0) {
        h_close(c);
    } else if (_i == 1) {
        /* What it sent is answered; whatever waits is cancelled, the repeat with it. */
        ck_assert_int_eq(shutdown(c->fd, SHUT_WR), 0);
        H_EOF(c, 3000);
    } else {
        H_REQ(c, "OK", "QUIT");
        H_EOF(c, 3000);
    }
    after_close(o, "uaf");
}
END_TEST

/* At QUIT with Redis gone, the cancel of #a fails at once (ERR BACKEND), which
 * hands the id to #b inside QUIT's walk: #b must not start there. */
START_TEST(test_quit_with_parked_repeat_redis_down)
{
    struct h_conn *o = H_CLIENT(D, "name=owner");
    struct h_conn *c = H_CLIENT(D, "name=victim");
    int64_t deadline;

    H_LOCK_NEW(o, "uafq");
    park_repeat(c, o, "uafq");
    h_redis_kill(R);
    deadline = h_now_ms() + 5000;
    while (!h_match(H_REQ(o, "OK {%*}", "INFO"), "%*\"backend\":\"down\"%*") && h_now_ms() < deadline)
        h_sleep_ms(20);
    ck_assert_int_eq(h_send(c, "QUIT"), 0);
    H_REPLY(c, "#a ERR BACKEND%*", H_TIMEOUT);
    /* With Redis gone nobody can tell whether another daemon had the session: no OK, a close. */
    ck_assert(h_wait_eof(c, H_TIMEOUT));
    ck_assert_ptr_null(h_reply(c, 0));
    H_REQ(o, "OK", "PING");
}
END_TEST

/* Nothing sent after QUIT runs: a tagged wait behind it would hold QUIT up for good. */
START_TEST(test_nothing_runs_after_quit)
{
    struct h_conn *o = H_CLIENT(D, "name=owner");
    struct h_conn *c = H_CLIENT(D, "name=quitter");
    static const char lines[] = "QUIT\n#t LOCK aq wait=inf\n#u PING\n";

    H_LOCK_NEW(o, "aq");
    ck_assert_int_eq(h_send_raw(c, lines, sizeof(lines) - 1), 0);
    H_REPLY(c, "OK", H_TIMEOUT);
    H_EOF(c, 3000);
    ck_assert(h_wait_waiters_eq(o, "aq", 0, 1000));
}
END_TEST

/* ---------------------------------------------------------------- sessions with a secret (item 2) */

#define HELLO_OK "OK session=%x secret=%x ttl=%d proto=1 server=dlockd/%w resumed=%d lease=%d"

START_TEST(test_hello_secret)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--lock-lease", "12s"));
    struct h_conn *c = H_CONNECT(d->port), *n = H_CONNECT(d->port);
    char sid[64], s1[64], s2[64], pat[256];
    const char *r;

    r = H_REQ(c, "OK session=%x secret=%x ttl=10000 proto=1 server=dlockd/%w resumed=0 lease=12000", "HELLO");
    ck_assert_int_eq(h_kv(r, "session", sid, sizeof sid), 0);
    ck_assert_int_eq(h_kv(r, "secret", s1, sizeof s1), 0);
    ck_assert_msg(is_secret(s1), "secret '%s' is not 32 hex digits", s1);
    /* A HELLO without session= gives a new secret; the one before no longer resumes. */
    r = H_REQ(c, HELLO_OK, "HELLO ttl=30s");
    ck_assert_int_eq(h_kv(r, "secret", s2, sizeof s2), 0);
    ck_assert(is_secret(s2));
    ck_assert_str_ne(s1, s2);
    H_REQ(n, "ERR NOSESSION%*", "HELLO session=%s secret=%s", sid, s1);
    snprintf(pat, sizeof pat, "OK session=%s secret=%s ttl=30000 proto=1 server=dlockd/%%w resumed=1 lease=12000", sid,
             s2);
    H_REQ(n, pat, "HELLO session=%s secret=%s", sid, s2);
    H_EVENT(c, "* BYE reason=moved", 3000);
    /* Resuming keeps the secret: a reply lost on the way does not lose the session. */
    H_REQ(n, pat, "HELLO session=%s secret=%s", sid, s2);
}
END_TEST

/* Missing, wrong or cut secret, unknown id: one reply, after auth-fail-delay each. */
START_TEST(test_resume_refusals)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--auth-fail-delay", "300ms"));
    struct h_conn *a = H_CLIENT(d, "name=a"), *n = H_CONNECT(d->port);
    char tries[5][160], first[256], pat[256], cut[64];
    int64_t t0, el;

    snprintf(cut, sizeof cut, "%.31s", a->secret);
    snprintf(tries[0], sizeof tries[0], "HELLO session=%s", a->session);
    snprintf(tries[1], sizeof tries[1], "HELLO session=%s secret=0123456789abcdef0123456789abcdef", a->session);
    snprintf(tries[2], sizeof tries[2], "HELLO session=%s secret=%s", a->session, cut);
    snprintf(tries[3], sizeof tries[3], "HELLO session=%s secret=%sx", a->session, a->secret);
    snprintf(tries[4], sizeof tries[4], "HELLO session=0123456789abcdef secret=%s", a->secret);
    for (int i = 0; i < 5; i++) {
        const char *r;

        t0 = h_now_ms();
        r = H_REQ(n, "ERR NOSESSION %*", "%s", tries[i]);
        el = h_now_ms() - t0;
        ck_assert_msg(el >= 280, "'%s' answered after %lld ms (auth-fail-delay 300ms)", tries[i], (long long)el);
        if (i == 0)
            snprintf(first, sizeof first, "%s", r);
        ck_assert_str_eq(r, first);
    }
    /* None of them touched the session. */
    H_REQ(a, "OK", "PING");
    ck_assert_ptr_null(h_event(a, NULL, 0));
    snprintf(pat, sizeof pat, "OK session=%s secret=%s %%*resumed=1%%*", a->session, a->secret);
    t0 = h_now_ms();
    H_REQ(n, pat, "HELLO session=%s secret=%s", a->session, a->secret);
    ck_assert_int_lt(h_now_ms() - t0, 250);
}
END_TEST

/* Resuming a session whose connection is open moves it: BYE moved, the old
 * connection's waits are cancelled, the holds stay with the session. */
START_TEST(test_resume_moves)
{
    struct h_conn *a = H_CLIENT(D, "name=a ttl=30s"), *o = H_CLIENT(D, "name=o"), *b = H_CONNECT(D->port);
    char pat[256];
    long long t = H_LOCK_NEW(a, "mv");

    H_LOCK_NEW(o, "mv-w");
    ck_assert_int_eq(h_send(a, "LOCK mv-w wait=inf"), 0);
    ck_assert(h_wait_waiters(o, "mv-w", 1, 3000));
    snprintf(pat, sizeof pat, "OK session=%s secret=%s %%*resumed=1%%*", a->session, a->secret);
    H_REQ(b, pat, "HELLO session=%s secret=%s", a->session, a->secret);
    H_EVENT(a, "* BYE reason=moved", 3000);
    H_EOF(a, 3000);
    ck_assert(h_wait_waiters_eq(o, "mv-w", 0, 3000));
    H_REQ(o, "OK count=0", "UNLOCK mv-w");
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(b, pat, "LOCK mv");
    H_REQ(o, "BUSY holder=a ttl=%d", "LOCK mv");
    H_LOCK_NEW(o, "mv-w"); /* nobody was granted it for the cancelled wait */
}
END_TEST

/* Every value of every key in Redis, one per line. */
static char *redis_dump(int port)
{
    char *keys = h_redis_cmd(port, "KEYS", "*", NULL), *out = strdup(""), *save = NULL;

    for (char *k = keys ? strtok_r(keys, "\n", &save) : NULL; k; k = strtok_r(NULL, "\n", &save)) {
        char *type = h_redis_cmd(port, "TYPE", k, NULL), *v = NULL, *more;

        if (type && strcmp(type, "hash") == 0)
            v = h_redis_cmd(port, "HGETALL", k, NULL);
        else if (type && strcmp(type, "zset") == 0)
            v = h_redis_cmd(port, "ZRANGE", k, "0", "-1", NULL);
        else if (type && strcmp(type, "string") == 0)
            v = h_redis_cmd(port, "GET", k, NULL);
        if (asprintf(&more, "%s%s\n%s\n", out, k, v ? v : "") < 0)
            H_FAIL("out of memory");
        free(out);
        out = more;
        free(type);
        free(v);
    }
    free(keys);
    return out;
}

START_TEST(test_secret_stays_secret)
{
    int http = h_free_port();
    char admin[64], *log, *dump, *body = NULL;
    struct h_dlockd *d;
    struct h_conn *a, *b, *o;
    const char *where[5];

    snprintf(admin, sizeof admin, "127.0.0.1:%d", http);
    d = h_dlockd_start(R->port, H_ARGS("--admin-listen", admin));
    a = H_CLIENT(d, "name=a");
    o = H_CLIENT(d, "name=o");
    b = H_CONNECT(d->port);
    H_LOCK_NEW(a, "ss");
    H_LOCK_NEW(o, "ss-w");
    ck_assert_int_eq(h_send(a, "#w LOCK ss-w wait=inf"), 0);
    ck_assert(h_wait_waiters(o, "ss-w", 1, 3000));
    H_REQ(b, "OK session=%x secret=%x %*resumed=1%*", "HELLO session=%s secret=%s", a->session, a->secret);
    H_REQ(b, "ERR NOSESSION%*", "HELLO session=%s secret=%s", o->session, a->secret);
    H_REQ(o, "BUSY holder=a ttl=%d", "LOCK ss");
    where[0] = H_REQ(b, "OK {%*}", "STATUS ss");
    where[1] = H_REQ(o, "OK {%*}", "INFO");
    ck_assert_int_eq(h_http_get(http, "/metrics", NULL, &body, H_TIMEOUT), 200);
    where[2] = body;
    where[3] = log = h_dlockd_log_read(d);
    where[4] = dump = redis_dump(R->port);
    ck_assert_ptr_nonnull(strstr(log, a->session));
    ck_assert_ptr_nonnull(strstr(dump, a->session));
    for (int i = 0; i < 5; i++)
        ck_assert_msg(strstr(where[i], a->secret) == NULL, "the secret is in %s", (const char *[]){
                          "STATUS", "INFO", "/metrics", "the log", "Redis"}[i]);
    free(body);
    free(log);
    free(dump);
}
END_TEST

/* ---------------------------------------------------------------- before AUTH (item 3) */

static struct h_dlockd *start_auth(const char *delay)
{
    return h_dlockd_start(R->port, H_ARGS("--requirepass", "s3cret", "--auth-fail-delay", delay));
}

START_TEST(test_preauth_leaves_nothing)
{
    struct h_dlockd *d = start_auth("100ms");
    struct h_conn *a = H_CLIENT(d, "auth=s3cret name=a"), *c = H_CONNECT(d->port), *c2, *c3;
    long long sessions = h_info_num(a, "sessions");
    char pat[256];

    H_REQ(c, "ERR NOAUTH%*", "HELLO ttl=1h name=pre");
    H_REQ(c, "ERR NOAUTH%*", "HELLO");
    H_REQ(c, "ERR NOAUTH%*", "HELLO session=%s secret=%s", a->session, a->secret);
    ck_assert_int_eq(h_info_num(a, "sessions"), sessions);
    H_REQ(c, "OK", "QUIT");
    H_EOF(c, 3000);
    H_REQ(a, "OK", "PING");
    ck_assert_ptr_null(h_event(a, NULL, 200));
    ck_assert_int_eq(h_info_num(a, "sessions"), sessions);

    /* With auth= the HELLO's options apply to the session it opens, or resumes. */
    c2 = H_CONNECT(d->port);
    H_REQ(c2, "OK session=%x secret=%x ttl=3600000 %*", "HELLO ttl=1h name=pre auth=s3cret");
    H_LOCK_NEW(c2, "pl");
    H_REQ(a, "BUSY holder=pre ttl=%d", "LOCK pl");
    c3 = H_CONNECT(d->port);
    snprintf(pat, sizeof pat, "OK session=%s secret=%s %%*resumed=1%%*", a->session, a->secret);
    H_REQ(c3, pat, "HELLO auth=s3cret session=%s secret=%s", a->session, a->secret);
    H_EVENT(a, "* BYE reason=moved", 3000);
}
END_TEST

START_TEST(test_three_wrong_passwords)
{
    static const char burst[] = "#a1 AUTH w1\n#a2 AUTH w2\n#a3 AUTH w3\n#a4 AUTH w4\n#a5 AUTH w5\nAUTH s3cret\n";
    struct h_dlockd *d = start_auth("100ms");
    struct h_conn *c = H_CONNECT(d->port), *h = H_CONNECT(d->port), *ok = H_CONNECT(d->port);
    int64_t t0 = h_now_ms(), el;

    /* Pipelined and tagged, they are still checked one at a time, and only three of them. */
    ck_assert_int_eq(h_send_raw(c, burst, sizeof(burst) - 1), 0);
    H_REPLY(c, "#a1 ERR NOAUTH invalid password", H_TIMEOUT);
    H_REPLY(c, "#a2 ERR NOAUTH invalid password", H_TIMEOUT);
    H_REPLY(c, "#a3 ERR NOAUTH invalid password; closing after 3 wrong passwords", H_TIMEOUT);
    el = h_now_ms() - t0;
    ck_assert_msg(el >= 280, "three wrong passwords answered in %lld ms (auth-fail-delay 100ms each)", (long long)el);
    H_EOF(c, 3000);
    ck_assert_int_eq(h_log_count(d, H_ARGS("wrong password from")), 3);

    /* HELLO auth= counts too. */
    H_REQ(h, "ERR NOAUTH invalid password", "AUTH x");
    H_REQ(h, "ERR NOAUTH invalid password", "HELLO auth=y");
    H_REQ(h, "ERR NOAUTH%*closing%*", "HELLO auth=z name=n");
    H_EOF(h, 3000);

    /* Fewer than three leave the connection open. */
    H_REQ(ok, "ERR NOAUTH invalid password", "AUTH x");
    H_REQ(ok, "ERR NOAUTH invalid password", "AUTH y");
    H_REQ(ok, "OK", "AUTH s3cret");
    H_LOCK_NEW(ok, "tw");
}
END_TEST

/* Before AUTH a few lines may wait behind the one that runs; one more closes the connection. */
START_TEST(test_preauth_queue_bounded)
{
    struct h_dlockd *d = start_auth("300ms");
    struct h_conn *c = H_CONNECT(d->port), *fits = H_CONNECT(d->port);
    char lines[256] = "AUTH wrong\n";

    for (int i = 0; i < 8; i++)
        strcat(lines, "PING\n");
    ck_assert_int_eq(h_send_raw(fits, lines, strlen(lines)), 0);
    strcat(lines, "PING\n");
    ck_assert_int_eq(h_send_raw(c, lines, strlen(lines)), 0);
    H_REPLY(c, "ERR LIMIT more than 8 requests before AUTH", H_TIMEOUT);
    H_EOF(c, 3000);

    H_REPLY(fits, "ERR NOAUTH invalid password", H_TIMEOUT);
    for (int i = 0; i < 8; i++)
        H_REPLY(fits, "OK", H_TIMEOUT);
    H_REQ(fits, "OK", "AUTH s3cret");
}
END_TEST

/* ---------------------------------------------------------------- per-connection limits (item 4) */

START_TEST(test_max_queued)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--max-queued", "4"));
    struct h_conn *o = H_CLIENT(d, "name=o"), *c = H_CLIENT(d, "name=c");
    static const char lines[] = "LOCK mq wait=inf\nPING\nPING\nPING\nPING\n";

    H_LOCK_NEW(o, "mq");
    ck_assert_int_eq(h_send_raw(c, lines, sizeof(lines) - 1), 0);
    ck_assert(h_wait_waiters(o, "mq", 1, 3000));
    H_REQ(c, "#t OK", "#t PING"); /* tagged lines do not queue */
    ck_assert_int_eq(h_send(c, "PING"), 0);
    H_REPLY(c, "ERR LIMIT more than 4 requests wait their turn (max-queued)", H_TIMEOUT);
    H_EOF(c, 3000);
    ck_assert(h_wait_waiters_eq(o, "mq", 0, 3000));
}
END_TEST

START_TEST(test_max_inflight)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--max-inflight", "3"));
    struct h_conn *o = H_CLIENT(d, "name=o"), *c = H_CLIENT(d, "name=c");

    H_REQ(o, "OK tokens=%*", "LOCK mi1 mi2 mi3");
    for (int i = 1; i <= 3; i++)
        ck_assert_int_eq(h_send(c, "#w%d LOCK mi%d wait=inf", i, i), 0);
    ck_assert(h_wait_waiters(o, "mi3", 1, 3000));
    H_REQ(c, "#x ERR LIMIT more than 3 requests at once on this connection (max-inflight)", "#x PING");
    H_REQ(c, "ERR LIMIT%*", "PING");
    H_REQ(o, "OK count=0", "UNLOCK mi1");
    H_REPLY(c, "#w1 OK token=%d count=1", H_TIMEOUT);
    H_REQ(c, "#y OK", "#y PING");
}
END_TEST

/* ---------------------------------------------------------------- framing (item 5) and long replies (item 6) */

START_TEST(test_control_bytes)
{
    struct h_conn *c = H_CLIENT(D, "name=c"), *o = H_CLIENT(D, "name=o");
    static const char nul[] = "LOCK nb\0 shared\n";

    ck_assert_int_eq(h_send_raw(c, nul, sizeof(nul) - 1), 0);
    H_REPLY(c, "ERR SYNTAX NUL byte in request", H_TIMEOUT);
    H_REQ(c, "#t ERR SYNTAX control byte 0x01 in request", "#t LOCK nb\x01");
    H_REQ(c, "ERR SYNTAX control byte 0x0d in request", "LOCK nb\r shared");
    H_REQ(o, "OK {%*\"type\":null%*}", "STATUS nb");
    H_REQ(c, "OK token=%d count=1", "LOCK\tnb\tshared\r");
    /* '}' first would give the name's keys an empty hash tag; later it is fine. */
    H_REQ(c, "ERR SYNTAX bad name '}b'", "LOCK }b");
    H_LOCK_NEW(c, "b}");
}
END_TEST

START_TEST(test_long_reply)
{
    char name[256], hello[300], owner[200];
    struct h_conn *c;
    const char *r;
    size_t len;

    memset(name, 'n', 200);
    name[200] = '\0';
    snprintf(hello, sizeof hello, "name=%s", name);
    c = H_CLIENT(D, hello);
    memset(owner, 'o', 190);
    owner[190] = '\0';
    for (int i = 0; i < 40; i++)
        H_REQ(c, "OK token=%d count=1", "LOCK big shared owner=%s%02d", owner, i);
    /* Pipelined: a reply dropped for its size would pair the next one with STATUS. */
    ck_assert_int_eq(h_send(c, "STATUS big\nPING"), 0);
    r = H_REPLY(c, "OK {%*\"more\":%d}", H_TIMEOUT);
    len = strlen(r);
    ck_assert_msg(len < 8192, "STATUS of 40 holders is %zu bytes", len);
    H_REPLY(c, "OK", H_TIMEOUT);
}
END_TEST

/* ---------------------------------------------------------------- safe retries (item 7) */

START_TEST(test_replay_while_held)
{
    struct h_conn *a = H_CLIENT(D, "name=a"), *b = H_CLIENT(D, "name=b");
    char pat[128];
    long long t = H_LOCK_NEW(a, "rr id=1"), t2, m1, m2;
    const char *r;

    snprintf(pat, sizeof pat, "OK token=%lld count=1", t);
    H_REQ(a, pat, "LOCK rr id=1"); /* still held: the first reply, nothing reentered */
    H_REQ(a, "OK count=0", "UNLOCK rr");
    t2 = H_LOCK_NEW(b, "rr");
    ck_assert_int_gt(t2, t);
    /* The hold it granted is gone and b has the lock: no OK for a. */
    H_REQ(a, "BUSY holder=b ttl=%d", "LOCK rr id=1");

    r = H_REQ(a, "OK tokens=%d,%d counts=1,1", "LOCK m1 m2 id=2");
    ck_assert_int_eq(sscanf(r, "OK tokens=%lld,%lld", &m1, &m2), 2);
    H_REQ(a, "OK count=0", "UNLOCK m1");
    snprintf(pat, sizeof pat, "OK tokens=%%d,%lld counts=1,2", m2);
    r = H_REQ(a, pat, "LOCK m1 m2 id=2");
    ck_assert_int_gt(strtoll(strchr(r, '=') + 1, NULL, 10), m1);

    t = H_KV_INT(H_REQ(a, "OK token=%d held=1 free=1", "ACQUIRE sem limit=2 id=3"), "token");
    H_REQ(a, "OK held=0 free=2", "RELEASE sem");
    ck_assert_int_gt(H_KV_INT(H_REQ(a, "OK token=%d held=1 free=1", "ACQUIRE sem limit=2 id=3"), "token"), t);
}
END_TEST

START_TEST(test_ids_bounded)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--max-ids", "2", "--max-ids-total", "3"));
    struct h_conn *a = H_CLIENT(d, "name=a"), *b = H_CLIENT(d, "name=b");

    for (int i = 1; i <= 3; i++)
        H_REQ(a, "OK token=%d count=1", "LOCK i%d id=%d", i, i);
    /* max-ids 2: id 1, the oldest, is forgotten, and runs again (reentered). */
    H_REQ(a, "OK token=%d count=1", "LOCK i3 id=3");
    H_REQ(a, "OK token=%d count=1", "LOCK i2 id=2");
    H_REQ(a, "OK token=%d count=2", "LOCK i1 id=1");
    /* a remembers ids 3 and 1; two more of b make four: max-ids-total 3 forgets a's id 3. */
    H_REQ(b, "OK token=%d count=1", "LOCK j1 id=1");
    H_REQ(b, "OK token=%d count=1", "LOCK j2 id=2");
    H_REQ(a, "OK token=%d count=2", "LOCK i3 id=3");
    H_REQ(b, "OK token=%d count=1", "LOCK j1 id=1");
}
END_TEST

/* A half-close answers what was sent and needs no waiting: an AWAIT with wait=0 too. */
START_TEST(test_await_half_close)
{
    struct h_conn *a = H_CLIENT(D, "name=alice"), *b = H_CLIENT(D, "name=bob");

    H_REQ(a, "OK count=1", "LATCH hc count=1");
    ck_assert_int_eq(h_send(b, "AWAIT hc\nAWAIT nolatch\nAWAIT hc wait=10s"), 0);
    ck_assert_int_eq(shutdown(b->fd, SHUT_WR), 0);
    H_REPLY(b, "TIMEOUT", H_TIMEOUT);
    H_REPLY(b, "OK", H_TIMEOUT);
    H_EOF(b, H_TIMEOUT); /* the AWAIT that would wait is dropped, as a LOCK that would queue */
}
END_TEST

/* A repeat parked behind its first request on the same connection is answered with it after a half-close. */
START_TEST(test_repeat_half_close)
{
    struct h_conn *a = H_CLIENT(D, "name=alice"), *b = H_CLIENT(D, "name=bob");

    H_LOCK_NEW(a, "rh");
    ck_assert_int_eq(h_send(b, "#a LOCK rh id=X\n#b LOCK rh id=X"), 0);
    ck_assert_int_eq(shutdown(b->fd, SHUT_WR), 0);
    ck_assert_ptr_nonnull(h_reply_tag(b, "a", H_TIMEOUT));
    ck_assert_msg(h_match(b->last, "#a BUSY holder=alice ttl=%d"), "%s", b->last);
    ck_assert_ptr_nonnull(h_reply_tag(b, "b", H_TIMEOUT));
    ck_assert_msg(h_match(b->last, "#b BUSY holder=alice ttl=%d"), "%s", b->last);
    H_EOF(b, H_TIMEOUT);
}
END_TEST

static Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("shared");
    TCase *cfg = tcase_create("config");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_close_with_parked_repeat, 0, (int)(sizeof closes / sizeof closes[0]));
    tcase_add_test(tc, test_quit_with_parked_repeat_redis_down);
    tcase_add_test(tc, test_nothing_runs_after_quit);
    tcase_add_test(tc, test_await_half_close);
    tcase_add_test(tc, test_repeat_half_close);
    tcase_add_test(tc, test_resume_moves);
    tcase_add_test(tc, test_control_bytes);
    tcase_add_test(tc, test_long_reply);
    tcase_add_test(tc, test_replay_while_held);
    suite_add_tcase(s, tc);

    tcase_add_checked_fixture(cfg, h_setup_redis, h_teardown);
    tcase_set_timeout(cfg, 60);
    tcase_add_test(cfg, test_hello_secret);
    tcase_add_test(cfg, test_resume_refusals);
    tcase_add_test(cfg, test_secret_stays_secret);
    tcase_add_test(cfg, test_preauth_leaves_nothing);
    tcase_add_test(cfg, test_three_wrong_passwords);
    tcase_add_test(cfg, test_preauth_queue_bounded);
    tcase_add_test(cfg, test_max_queued);
    tcase_add_test(cfg, test_max_inflight);
    tcase_add_test(cfg, test_ids_bounded);
    suite_add_tcase(s, cfg);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(auth_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
