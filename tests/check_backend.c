/* check_backend.c - Redis as a trustworthy backend: eviction policy, script errors, jeopardy and SAFE, reconnects. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLICY_ERR_TEXT "Redis maxmemory-policy is allkeys-lru; dlockd needs noeviction"
#define POLICY_ERR "ERR BACKEND " POLICY_ERR_TEXT

/* A dlockd on R with the admin endpoint on *admin_port, and extra (may be NULL) after it. */
static struct h_dlockd *admin_daemon(int *admin_port, const char *const *extra)
{
    static char addr[64];
    const char *args[H_MAX_EXTRA] = {"--admin-listen", addr};
    int n = 2;

    *admin_port = h_free_port();
    snprintf(addr, sizeof addr, "127.0.0.1:%d", *admin_port);
    for (size_t i = 0; extra != NULL && extra[i] != NULL && n < H_MAX_EXTRA - 1; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    return h_dlockd_start(R->port, args);
}

/* Sends a request until its reply matches pattern; fails the test after timeout_ms. */
#define REQ_UNTIL(c, pattern, timeout_ms, ...) req_until(__FILE__, __LINE__, (c), (pattern), (timeout_ms), __VA_ARGS__)
static const char *req_until(const char *file, int line, struct h_conn *c, const char *pattern, int timeout_ms,
                             const char *req)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    const char *r;

    for (;;) {
        r = h_request(c, H_TIMEOUT, "%s", req);
        if (r != NULL && h_match(r, pattern))
            return r;
        if (r == NULL || h_now_ms() > deadline)
            h_fail_at(file, line, "%s -> %s, not %s within %d ms", req, r ? r : "(nothing)", pattern, timeout_ms);
        h_sleep_ms(100);
    }
}

/* GETs /healthz until it answers want; fails the test after timeout_ms. Returns the body (malloc'ed). */
static char *healthz_until(int port, int want, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    char *body = NULL;
    int code;

    for (;;) {
        free(body);
        body = NULL;
        code = h_http_get(port, "/healthz", NULL, &body, H_TIMEOUT);
        if (code == want)
            return body;
        if (h_now_ms() > deadline)
            H_FAIL("/healthz answers %d (%s), not %d within %d ms", code, body ? body : "", want, timeout_ms);
        h_sleep_ms(100);
    }
}

/* This daemon's id, from INFO through c. */
static void daemon_id(struct h_conn *c, char *out, size_t cap)
{
    const char *info = H_REQ(c, "OK {%*}", "INFO"), *p = strstr(info, "\"id\":\"");

    ck_assert_ptr_nonnull(p);
    p += strlen("\"id\":\"");
    snprintf(out, cap, "%.*s", (int)strcspn(p, "\""), p);
}

/* Counts the events of c matching pattern that arrive within ms. */
static int count_events(struct h_conn *c, const char *pattern, int ms)
{
    int64_t deadline = h_now_ms() + ms;
    int n = 0;

    while (h_now_ms() < deadline)
        if (h_event(c, pattern, (int)(deadline - h_now_ms())) != NULL)
            n++;
    return n;
}

START_TEST(test_policy_refused)
{
    int ap;
    struct h_dlockd *d;
    struct h_conn *a;
    const char *info;
    char addr[64], *body;

    /* Redis may evict a hold (and so grant it twice): nothing is granted, and everyone can tell why. */
    free(h_redis_cmd(R->port, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru", NULL));
    d = admin_daemon(&ap, H_ARGS("--log-level", "info"));
    a = H_CLIENT(d, "name=alice");
    REQ_UNTIL(a, POLICY_ERR, 3000, "LOCK pr");
    H_REQ(a, POLICY_ERR, "LOCK pr2 wait=5s");
    body = healthz_until(ap, 503, 3000);
    ck_assert_msg(strstr(body, "allkeys-lru") != NULL, "/healthz body '%s'", body);
    free(body);
    info = H_REQ(a, "OK {%*}", "INFO");
    ck_assert_msg(h_json_has(info, "\"backend\":\"refused\""), "INFO %s", info);
    ck_assert_msg(h_json_has(info, "\"backend_error\":\"" POLICY_ERR_TEXT "\""), "INFO %s", info);
    h_sleep_ms(1500); /* a few reconnects: still one line */
    snprintf(addr, sizeof addr, "127.0.0.1:%d", R->port);
    ck_assert_int_eq(h_log_count(d, H_ARGS(" warn ", addr, "maxmemory-policy is allkeys-lru")), 1);

    /* Fixed in Redis: served again after the next reconnect. */
    free(h_redis_cmd(R->port, "CONFIG", "SET", "maxmemory-policy", "noeviction", NULL));
    REQ_UNTIL(a, "OK token=%d count=1", 5000 + 3000, "LOCK pr");
    free(healthz_until(ap, 200, 3000));
    info = H_REQ(a, "OK {%*}", "INFO");
    ck_assert_msg(h_json_has(info, "\"backend\":\"up\""), "INFO %s", info);
}
END_TEST

START_TEST(test_policy_changed_later)
{
    int ap;
    struct h_dlockd *d = admin_daemon(&ap, H_ARGS("--lock-lease", "3s"));
    struct h_conn *a = H_CLIENT(d, "name=alice");
    struct h_conn *b = H_CLIENT(d, "name=bob");

    H_LOCK_NEW(a, "pl");
    free(healthz_until(ap, 200, 3000));
    /* Checked again as each renewal (every second here) starts. */
    free(h_redis_cmd(R->port, "CONFIG", "SET", "maxmemory-policy", "volatile-lru", NULL));
    H_EVENT(a, "* JEOPARDY", 1000 + 2000);
    H_REQ(b, "ERR BACKEND Redis maxmemory-policy is volatile-lru; dlockd needs noeviction", "LOCK pl2");
    free(healthz_until(ap, 503, 1000));
    ck_assert_ptr_null(h_event(a, "* SAFE", 1500));

    free(h_redis_cmd(R->port, "CONFIG", "SET", "maxmemory-policy", "noeviction", NULL));
    /* Unrenewed while refused, the hold may be gone by then: LOST would come first. */
    H_EVENT(a, "* SAFE", 5000 + 3000);
    H_LOCK_NEW(b, "pl3");
}
END_TEST

START_TEST(test_oom_is_jeopardy)
{
    int ap;
    struct h_dlockd *d = admin_daemon(&ap, H_ARGS("--lock-lease", "6s"));
    struct h_conn *a = H_CLIENT(d, "name=alice");
    struct h_conn *b = H_CLIENT(d, "name=bob");
    char *body, *info, *r, max[32];
    const char *l;
    long long used;

    H_LOCK_NEW(a, "oom");
    /* Another client fills Redis up to a small maxmemory (noeviction): from then on every
     * script that writes fails with OOM, renewals too. */
    info = h_redis_cmd(R->port, "INFO", "memory", NULL);
    ck_assert_ptr_nonnull(info);
    used = strtoll(strstr(info, "used_memory:") + strlen("used_memory:"), NULL, 10);
    free(info);
    snprintf(max, sizeof max, "%lld", used + (1 << 20));
    free(h_redis_cmd(R->port, "CONFIG", "SET", "maxmemory", max, NULL));
    free(h_redis_cmd(R->port, "EVAL", "for i = 1, 2048 do redis.call('SET', 'filler' .. i, string.rep('f', 1024)) end",
                     "0", NULL));
    r = h_redis_cmd(R->port, "SET", "one-more", "x", NULL);
    ck_assert_msg(r != NULL && strncmp(r, "-OOM", 4) == 0, "SET at maxmemory -> %s", r ? r : "(nil)");
    free(r);
    H_EVENT(a, "* JEOPARDY", 2000 + 2000);
    body = healthz_until(ap, 503, 1000);
    ck_assert_msg(strstr(body, "OOM") != NULL, "/healthz body '%s'", body);
    free(body);
    l = h_request(b, H_TIMEOUT, "LOCK oom2");
    ck_assert_msg(l != NULL && h_match(l, "ERR BACKEND%*"), "LOCK at OOM -> %s", l ? l : "(nothing)");
    ck_assert_ptr_null(h_event(a, "* SAFE", 2500));

    free(h_redis_cmd(R->port, "CONFIG", "SET", "maxmemory", "0", NULL));
    H_EVENT(a, "* SAFE", 2000 + 3000);
    free(healthz_until(ap, 200, 1000));
}
END_TEST

START_TEST(test_failed_batch_no_safe)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--lock-lease", "6s", "--backend-timeout", "500ms"));
    struct h_conn *a = H_CLIENT(d, "name=alice");
    struct h_conn *b = H_CLIENT(d, "name=bob");
    struct h_conn *c = H_CLIENT(d, "name=carol");
    char req[2048], lost[400] = {0};
    const char *l;
    int i;

    /* 400 holds make two full renewal batches; bob's queue place comes last, in a third. */
    for (i = 0; i < 400; i += 50) {
        int n = snprintf(req, sizeof req, "LOCK");
        for (int j = i; j < i + 50; j++)
            n += snprintf(req + n, sizeof req - (size_t)n, " n%d", j);
        H_REQ(a, "OK tokens=%* counts=%*", "%s", req);
    }
    ck_assert_int_eq(h_send(b, "LOCK n0 wait=60s"), 0);
    ck_assert(h_wait_waiters(a, "n0", 1, 3000));
    /* A batch that fails on Redis's side: one name's lease key is not a sorted set. */
    free(h_redis_cmd(R->port, "SET", "dlock:{n5}:x", "wrong type", NULL));

    /* A pause puts the daemon in jeopardy whatever it thinks of errors. */
    h_redis_pause(R);
    H_REQ(c, "ERR BACKEND%*", "LOCK zz");
    h_redis_resume(R);
    H_EVENT(a, "* JEOPARDY", 3000);
    ck_assert_ptr_null(h_event(a, "* SAFE", 2 * 2000 + 500));

    /* Once the key is gone the renewal finds that hold lost (and those the failing batch
     * could not renew for a whole lease, if any), then every other hold renewed. */
    free(h_redis_cmd(R->port, "DEL", "dlock:{n5}:x", "dlock:{n5}:k", NULL)); /* and its hold, in the one-key form */
    for (;;) {
        l = h_event(a, "%*", 2000 + 3000);
        ck_assert_msg(l != NULL, "no SAFE after the bad key was deleted");
        if (strcmp(l, "* SAFE") == 0)
            break;
        ck_assert_msg(h_match(l, "* LOST n%d token=%d reason=backend") && sscanf(l, "* LOST n%d", &i) == 1 &&
                          i >= 0 && i < 400,
                      "event %s", l);
        lost[i] = 1;
    }
    ck_assert(lost[5]);
    for (i = 1; i < 399 && lost[i]; i++)
        ;
    H_REQ(a, "OK count=0", "UNLOCK n%d", i);
}
END_TEST

START_TEST(test_wrong_password)
{
    struct h_dlockd *d;
    struct h_conn *a, *admin;
    const char *l;
    char addr[64];
    int64_t t0;

    free(h_redis_cmd(R->port, "CONFIG", "SET", "requirepass", "right", NULL));
    d = h_dlockd_start(R->port, H_ARGS("--redis-password", "wrong", "--log-level", "info"));
    a = H_CLIENT(d, "name=alice");
    t0 = h_now_ms();
    H_REQ(a, "ERR BACKEND Redis is not reachable", "LOCK wp");
    /* Told once, as it attached; then retries back off and neither the log nor the
     * clients hear about each one. */
    H_EVENT(a, "* JEOPARDY", 1000);
    ck_assert_int_eq(count_events(a, "%*", 3000), 0);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", R->port);
    ck_assert_int_eq(h_log_count(d, H_ARGS("backend:")), 1);
    ck_assert_int_eq(h_log_count(d, H_ARGS(" warn ", "backend:", addr, "WRONGPASS")), 1);

    /* Redis takes that password now: the next retry (at most 5 s away) connects. */
    ck_assert_ptr_nonnull(admin = h_connect_try(R->port));
    ck_assert_int_eq(h_send(admin, "AUTH right"), 0);
    ck_assert_int_eq(h_send(admin, "CONFIG SET requirepass wrong"), 0);
    for (int i = 0; i < 2; i++) {
        l = h_line(admin, H_TIMEOUT);
        ck_assert_msg(l != NULL && strcmp(l, "+OK") == 0, "Redis: %s", l ? l : "(nothing)");
    }
    h_close(admin);
    REQ_UNTIL(a, "OK token=%d count=1", 5000 + 3000, "LOCK wp");
    ck_assert_int_eq(h_log_count(d, H_ARGS(" notice ", "backend:", addr, "is up")), 1);
    ck_assert_msg(h_now_ms() - t0 < 3000 + 5000 + 3000, "took %lld ms", (long long)(h_now_ms() - t0));
}
END_TEST

START_TEST(test_redis_user)
{
    struct h_dlockd *user, *nouser;
    struct h_conn *a, *b;
    char *r;

    /* Only the ACL user dl may use Redis. */
    r = h_redis_cmd(R->port, "ACL", "SETUSER", "dl", "on", ">pw", "~*", "&*", "+@all", NULL);
    ck_assert_str_eq(r, "OK");
    free(r);
    r = h_redis_cmd(R->port, "ACL", "SETUSER", "default", "off", NULL);
    ck_assert_str_eq(r, "OK");
    free(r);
    user = h_dlockd_start(R->port, H_ARGS("--redis-user", "dl", "--redis-password", "pw"));
    nouser = h_dlockd_start(R->port, H_ARGS("--redis-password", "pw"));
    a = H_CLIENT(user, "name=alice");
    b = H_CLIENT(nouser, "name=bob");
    REQ_UNTIL(a, "OK token=%d count=1", 3000, "LOCK ru");
    H_REQ(b, "ERR BACKEND Redis is not reachable", "LOCK ru2");
    ck_assert_int_eq(h_log_count(nouser, H_ARGS("backend:", "AUTH")), 1);
}
END_TEST

/* A session that attaches while dlockd is in jeopardy is told so at once: its heartbeats are
 * answered, but they do not mean its holds are renewed. */
START_TEST(test_jeopardy_told_on_hello)
{
    struct h_conn *a = H_CLIENT(D, "name=alice"), *b;

    H_LOCK_NEW(a, "j");
    h_redis_stop(R);
    H_EVENT(a, "* JEOPARDY", 2000 + 3000);
    b = H_CLIENT(D, "name=bob");
    H_EVENT(b, "* JEOPARDY", 1000);
    h_redis_restart(R);
    H_EVENT(b, "* SAFE", 5000 + 3000);
}
END_TEST

/* The latch channel is as open as the daemons' ones: a forged "reached 0" releases nobody
 * until Redis says the count is 0. */
START_TEST(test_forged_latch)
{
    struct h_conn *a = H_CLIENT(D, "name=alice"), *b = H_CLIENT(D, "name=bob");

    H_REQ(a, "OK count=2", "LATCH fl count=2");
    ck_assert_int_eq(h_send(b, "#w AWAIT fl wait=10s"), 0);
    H_REQ(a, "OK {%*\"count\":2%*}", "STATUS fl");
    for (int i = 0; i < 100; i++)
        free(h_redis_cmd(R->port, "PUBLISH", "dlock:latch", "fl", NULL));
    ck_assert_ptr_null(h_reply_tag(b, "w", 1000));
    H_REQ(a, "OK count=0", "COUNTDOWN fl n=2");
    ck_assert_ptr_nonnull(h_reply_tag(b, "w", H_TIMEOUT));
    ck_assert_str_eq(b->last, "#w OK");
}
END_TEST

START_TEST(test_forged_grant)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    struct h_conn *c = H_CLIENT(D, "name=carol");
    char id[64], channel[128], forged[256], *queue, *after, *n;

    H_LOCK_NEW(a, "fg");
    ck_assert_int_eq(h_send(b, "LOCK fg wait=30s"), 0);
    ck_assert(h_wait_waiters(a, "fg", 1, 3000));
    ck_assert_int_eq(h_send(c, "LOCK fg wait=30s"), 0);
    ck_assert(h_wait_waiters(a, "fg", 2, 3000));
    queue = h_redis_cmd(R->port, "ZRANGE", "dlock:{fg}:q", "0", "-1", NULL);
    ck_assert_ptr_nonnull(queue);
    ck_assert_ptr_nonnull(strchr(queue, '\n'));

    /* Anyone who can PUBLISH on the Redis sends bob's wait a grant. */
    daemon_id(a, id, sizeof id);
    snprintf(channel, sizeof channel, "dlock:%s", id);
    snprintf(forged, sizeof forged, "G %.*s 4242 1 0 -1", (int)strcspn(queue, "\n"), queue);
    n = h_redis_cmd(R->port, "PUBLISH", channel, forged, NULL);
    ck_assert_str_eq(n, "1");
    free(n);
    H_SILENT(b, 1000);
    /* Bob's wait kept its place (and its wid), ahead of carol's. */
    after = h_redis_cmd(R->port, "ZRANGE", "dlock:{fg}:q", "0", "-1", NULL);
    ck_assert_str_eq(after, queue);
    ck_assert_int_eq(h_log_count(D, H_ARGS(" warn ", "forged")), 1);

    H_REQ(a, "OK count=0", "UNLOCK fg");
    H_REPLY(b, "OK token=%d count=1", 3000);
    H_SILENT(c, 300);
    H_REQ(b, "OK count=0", "UNLOCK fg");
    H_REPLY(c, "OK token=%d count=1", 3000);
    free(queue);
    free(after);
}
END_TEST

/* CPU time (user + system) of process pid so far, in ms. */
static long long cpu_ms(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long utime, stime;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    ck_assert_ptr_nonnull(f = fopen(path, "r"));
    ck_assert_ptr_nonnull(fgets(buf, sizeof buf, f));
    fclose(f);
    /* Past "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt". */
    p = strrchr(buf, ')');
    ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime), 2);
    return (long long)(utime + stime) * 1000 / sysconf(_SC_CLK_TCK);
}

/* Waits until pid has used no CPU for 300 ms (at most 20 s); returns its CPU time then. */
static long long cpu_settled(pid_t pid)
{
    long long prev = cpu_ms(pid), now;
    int64_t deadline = h_now_ms() + 20000;

    for (;;) {
        h_sleep_ms(300);
        now = cpu_ms(pid);
        if (now == prev || h_now_ms() > deadline)
            return now;
        prev = now;
    }
}

/* Saves (back=0) or brings back (back=1) the keys of name that a Redis snapshot holds. */
static void snapshot_keys(const char *name, int back)
{
    char key[128], saved[128];

    for (const char *k = "hxtmk"; *k; k++) {
        snprintf(key, sizeof key, "dlock:{%s}:%c", name, *k);
        snprintf(saved, sizeof saved, "dlock:{%s}:saved-%c", name, *k);
        free(h_redis_cmd(R->port, "COPY", back ? saved : key, back ? key : saved, "REPLACE", NULL));
    }
}

/* A Redis restored from an older snapshot brings back a hold released
 * since: the next LOCK of that session and owner is a new hold with a new
 * token, not a re-entry of the old one (fencing tokens only rise). */
START_TEST(test_restored_hold_not_reentered)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    long long t1, t2;
    char *v;

    t1 = H_LOCK_NEW(a, "rh");
    snapshot_keys("rh", 0);
    H_REQ(a, "OK count=0", "UNLOCK rh");
    snapshot_keys("rh", 1);
    v = h_holds_at(R->port, "rh");
    ck_assert_msg(v[0] != '\0', "the restored hold is not there");
    free(v);
    t2 = H_LOCK_NEW(a, "rh");
    ck_assert_int_gt(t2, t1);
    H_REQ(a, "OK count=0", "UNLOCK rh");
    H_REQ(a, "ERR NOTHELD %*", "UNLOCK rh");

    t1 = H_KV_INT(H_REQ(a, "OK token=%d held=1 free=1", "ACQUIRE rs limit=2 permits=1"), "token");
    snapshot_keys("rs", 0);
    H_REQ(a, "OK held=0 free=2", "RELEASE rs");
    snapshot_keys("rs", 1);
    t2 = H_KV_INT(H_REQ(a, "OK token=%d held=1 free=1", "ACQUIRE rs limit=2 permits=1"), "token");
    ck_assert_int_gt(t2, t1);
    H_REQ(a, "OK held=0 free=2", "RELEASE rs");

    /* A hold this daemon knows of is still re-entered. */
    t1 = H_LOCK_NEW(a, "rh");
    ck_assert_int_eq(H_KV_INT(H_REQ(a, "OK token=%d count=2", "LOCK rh"), "token"), t1);
}
END_TEST

/* The batch library is a Redis function: one removed by FUNCTION FLUSH is
 * loaded again by the next call, which then runs. */
START_TEST(test_function_flushed)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    long long loads;
    char *r;

    H_LOCK_NEW(a, "ff1");
    loads = h_redis_cmdstat(R->port, "function|load");
    r = h_redis_cmd(R->port, "FUNCTION", "FLUSH", NULL);
    ck_assert_str_eq(r, "OK");
    free(r);
    H_LOCK_NEW(a, "ff2");
    ck_assert_int_eq(h_redis_cmdstat(R->port, "function|load"), loads + 1);
    H_REQ(a, "OK count=0", "UNLOCK ff1");
    H_REQ(a, "OK count=0", "UNLOCK ff2");
}
END_TEST

/* A script reaches keys only through KEYS: the UNLOCK of mh1 does not
 * declare mh2, so it does not grant the waiter for both; it tells the
 * waiter's daemon (R on its channel), whose poke declares both and grants. */
START_TEST(test_multi_name_handoff_declared)
{
    struct h_conn *a = H_CLIENT(D, "name=alice"), *b = H_CLIENT(D, "name=bob");
    long long pubs;
    const char *r;

    H_LOCK_NEW(a, "mh1");
    ck_assert_int_eq(h_send(b, "#w LOCK mh1 mh2 wait=10s"), 0);
    ck_assert(h_wait_waiters(a, "mh1", 1, H_TIMEOUT));
    pubs = h_redis_cmdstat(R->port, "publish");
    H_REQ(a, "OK count=0", "UNLOCK mh1");
    r = h_reply_tag(b, "w", 5000);
    ck_assert_msg(r && h_match(r, "#w OK tokens=%d,%d counts=1,1"), "got '%s'", r ? r : "(nothing)");
    ck_assert_int_gt(h_redis_cmdstat(R->port, "publish"), pubs);
}
END_TEST

/* An UNLOCK releases only holds the client may know of: one granted to a
 * LOCK of the session that is still queued here (granted by a release that
 * Redis runs first, its answer not sent yet) is not the client's to release
 * yet. Without this, a grant the daemon confirms before answering (a short
 * lease left) could be released and then answered TIMEOUT. */
START_TEST(test_unlock_spares_unanswered_grant)
{
    struct h_conn *a = H_CLIENT(D, "name=alice"), *b = H_CLIENT(D, "name=bob");
    const char *r;

    H_LOCK_NEW(a, "ug");
    ck_assert_int_eq(h_send(b, "#w LOCK ug wait=10s"), 0);
    ck_assert(h_wait_waiters(a, "ug", 1, H_TIMEOUT));
    h_redis_pause(R);
    ck_assert_int_eq(h_send(a, "#u UNLOCK ug"), 0);
    h_sleep_ms(150);
    ck_assert_int_eq(h_send(b, "#v UNLOCK ug"), 0);
    h_sleep_ms(150);
    h_redis_resume(R);
    r = h_reply_tag(a, "u", H_TIMEOUT);
    ck_assert_msg(r && h_match(r, "#u OK count=0"), "got '%s'", r ? r : "(nothing)");
    r = h_reply_tag(b, "w", H_TIMEOUT);
    ck_assert_msg(r && h_match(r, "#w OK token=%d count=1"), "got '%s'", r ? r : "(nothing)");
    r = h_reply_tag(b, "v", H_TIMEOUT);
    ck_assert_msg(r && h_match(r, "#v ERR NOTHELD %*"), "got '%s'", r ? r : "(nothing)");
    H_REQ(a, "OK {%*\"client\":\"bob\"%*}", "STATUS ug");
    H_REQ(b, "OK count=0", "UNLOCK ug");
}
END_TEST

START_TEST(test_lease_end_flood)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *w[2] = {H_CLIENT(D, "name=w0"), H_CLIENT(D, "name=w1")};
    char id[64], channel[128], count[16];
    const char *l;
    long long cpu0, cpu;
    int nwaits = 2 * 4000, nmsgs = 50000;

    H_LOCK_NEW(a, "lf");
    for (int i = 0; i < nwaits; i++)
        ck_assert_int_eq(h_send(w[i % 2], "#%d LOCK lf wait=60s owner=o%d", i, i), 0);
    ck_assert(h_wait_waiters(a, "lf", nwaits, 20000));

    /* A flood of "a lease ends" messages for a name nobody waits on. */
    daemon_id(a, id, sizeof id);
    snprintf(channel, sizeof channel, "dlock:%s", id);
    snprintf(count, sizeof count, "%d", nmsgs);
    cpu0 = cpu_settled(D->pid);
    free(h_redis_cmd(R->port, "EVAL",
                     "for i = 1, tonumber(ARGV[2]) do redis.call('PUBLISH', ARGV[1], 'R other 1000') end", "0",
                     channel, count, NULL));
    cpu = cpu_settled(D->pid) - cpu0;
    fprintf(stderr, "%d R messages with %d waits: %lld ms of CPU\n", nmsgs, nwaits, cpu);
    ck_assert_msg(cpu < 1000, "%d R messages cost %lld ms of CPU", nmsgs, cpu);

    H_REQ(a, "OK count=0", "UNLOCK lf");
    l = h_reply(w[0], 3000);
    ck_assert_msg(l != NULL && h_match(l, "#0 OK token=%d count=1"), "first waiter: %s", l ? l : "(nothing)");
}
END_TEST

static Suite *backend_suite(void)
{
    Suite *s = suite_create("backend");
    TCase *policy = tcase_create("policy"), *errors = tcase_create("errors"), *link = tcase_create("link");
    TCase *pubsub = tcase_create("pubsub");

    tcase_add_checked_fixture(policy, h_setup_redis, h_teardown);
    tcase_add_test(policy, test_policy_refused);
    tcase_add_test(policy, test_policy_changed_later);
    tcase_add_checked_fixture(errors, h_setup_redis, h_teardown);
    tcase_add_test(errors, test_oom_is_jeopardy);
    tcase_add_test(errors, test_failed_batch_no_safe);
    tcase_add_checked_fixture(link, h_setup_redis, h_teardown);
    tcase_add_test(link, test_wrong_password);
    tcase_add_test(link, test_redis_user);
    tcase_add_checked_fixture(pubsub, h_setup_both, h_teardown);
    tcase_add_test(pubsub, test_jeopardy_told_on_hello);
    tcase_add_test(pubsub, test_forged_grant);
    tcase_add_test(pubsub, test_forged_latch);
    tcase_add_test(pubsub, test_lease_end_flood);
    tcase_add_test(pubsub, test_restored_hold_not_reentered);
    tcase_add_test(pubsub, test_function_flushed);
    tcase_add_test(pubsub, test_multi_name_handoff_declared);
    tcase_add_test(pubsub, test_unlock_spares_unanswered_grant);
    for (TCase **tc = (TCase *[]){policy, errors, link, pubsub, NULL}; *tc != NULL; tc++) {
        tcase_set_timeout(*tc, 60);
        suite_add_tcase(s, *tc);
    }
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(backend_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
