/* check_locks.c - integration tests of LOCK/UNLOCK, errors and introspection against a real redis-server and dlockd. */
#include "harness.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * A daemon measures a wait from a clock that may lag ours by a tick; a
 * TIMEOUT this much before `wait` (measured from before the send) is still
 * taken as on time.
 */
#define EARLY_SLACK_MS 5


START_TEST(test_grant)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    long long t1 = H_LOCK_NEW(a, "g1");

    ck_assert_int_gt(t1, 0);
    ck_assert_int_gt(H_LOCK_NEW(b, "g2"), 0);
    H_REQ(a, "OK count=0", "UNLOCK g1");
    H_REQ(b, "OK count=0", "UNLOCK g2");
}
END_TEST

START_TEST(test_busy)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    long long ttl;

    H_LOCK_NEW(a, "b1");
    ttl = H_KV_INT(H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK b1"), "ttl");
    ck_assert_msg(ttl > 0 && ttl <= 30000, "ttl=%lld outside (0, lock-lease 30000]", ttl);
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK b1 wait=0");
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK b1 shared");
    /* A hold belongs to (session, owner): another owner of the same session is another holder. */
    H_REQ(a, "BUSY holder=alice ttl=%d", "LOCK b1 owner=other-thread");
}
END_TEST

START_TEST(test_timeout)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    int64_t t0, el;

    H_LOCK_NEW(a, "t1");
    t0 = h_now_ms();
    ck_assert_int_eq(h_send(b, "LOCK t1 wait=1s"), 0);
    H_REPLY(b, "TIMEOUT", 1000 + 5000);
    el = h_now_ms() - t0;
    ck_assert_msg(el >= 1000 - EARLY_SLACK_MS && el < 1000 + 1500, "TIMEOUT after %lld ms for wait=1s", (long long)el);

    t0 = h_now_ms();
    ck_assert_int_eq(h_send(b, "LOCK t1 wait=300"), 0); /* plain integer = ms */
    H_REPLY(b, "TIMEOUT", 300 + 5000);
    el = h_now_ms() - t0;
    ck_assert_msg(el >= 300 - EARLY_SLACK_MS && el < 300 + 1500, "TIMEOUT after %lld ms for wait=300", (long long)el);

    /* Nothing is held because of a request that timed out. */
    H_REQ(a, "OK count=0", "UNLOCK t1");
    H_LOCK_NEW(b, "t1");
    H_REQ(b, "OK count=0", "UNLOCK t1");
    H_REQ(b, "ERR NOTHELD%*", "UNLOCK t1");
}
END_TEST

START_TEST(test_reentrant)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    char pat[128];
    long long t = H_LOCK_NEW(a, "re");

    for (int count = 2; count <= 3; count++) {
        snprintf(pat, sizeof pat, "OK token=%lld count=%d", t, count);
        H_REQ(a, pat, "LOCK re");
    }
    H_REQ(a, "OK count=2", "UNLOCK re");
    H_REQ(a, "OK count=1", "UNLOCK re");
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(a, pat, "LOCK re wait=5s");
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK re");
    H_REQ(a, "OK count=0", "UNLOCK re all");
    H_REQ(a, "ERR NOTHELD%*", "UNLOCK re");
    ck_assert_int_gt(H_LOCK_NEW(b, "re"), t);
}
END_TEST

START_TEST(test_shared_exclusive)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    struct h_conn *c = H_CLIENT(D, "name=carol");

    H_LOCK_NEW(a, "rw shared");
    H_LOCK_NEW(b, "rw shared");
    H_REQ(c, "BUSY holder=%w ttl=%d", "LOCK rw");
    H_REQ(a, "OK count=0", "UNLOCK rw");
    H_REQ(c, "BUSY holder=bob ttl=%d", "LOCK rw");
    H_REQ(b, "OK count=0", "UNLOCK rw shared");
    H_LOCK_NEW(c, "rw");
    H_REQ(a, "BUSY holder=carol ttl=%d", "LOCK rw shared");
    H_REQ(b, "BUSY holder=carol ttl=%d", "LOCK rw");
    /* "LOCK shared shared" is the lock named "shared" in shared mode. */
    H_LOCK_NEW(a, "shared shared");
    H_LOCK_NEW(b, "shared shared");
    H_REQ(c, "BUSY holder=%w ttl=%d", "LOCK shared");
}
END_TEST

START_TEST(test_upgrade_downgrade)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    long long t1, t2;

    /* Downgrade: holding exclusive, asking shared is granted at once. */
    t1 = H_LOCK_NEW(a, "ud");
    H_REQ(a, "OK token=%d count=1", "LOCK ud shared");
    H_REQ(a, "OK count=0", "UNLOCK ud"); /* drops the exclusive hold first */
    H_LOCK_NEW(b, "ud shared");            /* a now holds shared only */
    /* Upgrade waits for the other owner; a second upgrader is a deadlock. */
    ck_assert_int_eq(h_send(a, "LOCK ud wait=10s"), 0);
    H_SILENT(a, 300);
    H_REQ(b, "ERR DEADLOCK%*", "LOCK ud wait=10s");
    H_REQ(b, "OK count=0", "UNLOCK ud shared");
    /* An upgrade is a new hold with a new token. */
    t2 = H_KV_INT(H_REPLY(a, "OK token=%d count=1", 3000), "token");
    ck_assert_int_gt(t2, t1);
}
END_TEST

START_TEST(test_unlock_notheld)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");

    H_REQ(a, "ERR NOTHELD%*", "UNLOCK n1");
    H_LOCK_NEW(a, "n1");
    H_REQ(b, "ERR NOTHELD%*", "UNLOCK n1");
    H_REQ(a, "ERR NOTHELD%*", "UNLOCK n1 owner=someone-else");
    H_REQ(a, "ERR NOTHELD%*", "UNLOCK n1 shared");
    H_REQ(a, "OK", "PING"); /* the connection stays usable after ERR */
    H_REQ(a, "OK count=0", "UNLOCK n1");
}
END_TEST

START_TEST(test_multi_name)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");

    H_REQ(a, "OK tokens=%d,%d counts=1,1", "LOCK m1 m2");
    H_REQ(a, "OK counts=0,0", "UNLOCK m1 m2");
    /* All or nothing: m2 busy, so m1 is not taken either. */
    H_LOCK_NEW(b, "m2");
    H_REQ(a, "BUSY holder=bob ttl=%d", "LOCK m1 m2");
    H_REQ(a, "TIMEOUT", "LOCK m1 m2 wait=200ms");
    H_LOCK_NEW(b, "m1");
    H_REQ(b, "OK counts=0,0", "UNLOCK m1 m2");
    /* UNLOCK with one name not held releases nothing. */
    H_LOCK_NEW(a, "m1");
    H_REQ(a, "ERR NOTHELD%*", "UNLOCK m1 m2");
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK m1");
    H_REQ(a, "OK count=0", "UNLOCK m1");
}
END_TEST

START_TEST(test_fifo)
{
    struct h_conn *h = H_CLIENT(D, "name=holder");
    struct h_conn *w[3];
    long long prev = H_LOCK_NEW(h, "fq");

    for (int i = 0; i < 3; i++) {
        char name[32];

        snprintf(name, sizeof name, "name=w%d", i + 1);
        w[i] = H_CLIENT(D, name);
        ck_assert_int_eq(h_send(w[i], "LOCK fq wait=20s"), 0);
        ck_assert_msg(h_wait_waiters(h, "fq", i + 1, 3000), "waiter %d not queued", i + 1);
    }
    H_REQ(h, "OK count=0", "UNLOCK fq");
    for (int i = 0; i < 3; i++) {
        long long t = H_KV_INT(H_REPLY(w[i], "OK token=%d count=1", 3000), "token");

        ck_assert_int_gt(t, prev);
        prev = t;
        for (int j = i + 1; j < 3; j++)
            H_SILENT(w[j], 200);
        H_REQ(w[i], "OK count=0", "UNLOCK fq");
    }
}
END_TEST

START_TEST(test_writer_preference)
{
    struct h_conn *r1 = H_CLIENT(D, "name=r1");
    struct h_conn *w = H_CLIENT(D, "name=w");
    struct h_conn *r2 = H_CLIENT(D, "name=r2");

    H_LOCK_NEW(r1, "wp shared");
    ck_assert_int_eq(h_send(w, "LOCK wp wait=20s"), 0);
    ck_assert(h_wait_waiters(r1, "wp", 1, 3000));
    ck_assert_int_eq(h_send(r2, "LOCK wp shared wait=20s"), 0);
    ck_assert(h_wait_waiters(r1, "wp", 2, 3000));
    /* r2 is compatible with r1 but must not overtake the queued writer. */
    H_SILENT(r2, 500);
    H_SILENT(w, 0);
    H_REQ(r1, "OK count=0", "UNLOCK wp");
    H_REPLY(w, "OK token=%d count=1", 3000);
    H_SILENT(r2, 300);
    H_REQ(w, "OK count=0", "UNLOCK wp");
    H_REPLY(r2, "OK token=%d count=1", 3000);
}
END_TEST

START_TEST(test_tagged_overtaking)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    int64_t t0;

    H_LOCK_NEW(b, "ov");
    ck_assert_int_eq(h_send(a, "LOCK ov wait=5s"), 0);
    ck_assert_int_eq(h_send(a, "PING"), 0);
    t0 = h_now_ms();
    ck_assert_int_eq(h_send(a, "#p PING"), 0);
    H_REPLY(a, "#p OK", 1000);
    ck_assert_int_lt(h_now_ms() - t0, 1000);
    /* The untagged PING waits behind the untagged LOCK. */
    H_SILENT(a, 300);
    H_REQ(b, "OK count=0", "UNLOCK ov");
    H_REPLY(a, "OK token=%d count=1", 3000);
    H_REPLY(a, "OK", 3000);
    /* A tagged LOCK carries its tag. */
    H_REQ(a, "#t2 OK token=%d count=1", "#t2 LOCK ov2");
    H_REQ(a, "#t2 BUSY holder=alice ttl=%d", "#t2 LOCK ov2 owner=x");
}
END_TEST

START_TEST(test_fencing_tokens)
{
    struct h_conn *c[2] = {H_CLIENT(D, "name=alice"), H_CLIENT(D, "name=bob")};
    long long prev = 0;

    for (int i = 0; i < 10; i++) {
        long long t = H_LOCK_NEW(c[i % 2], "fence");

        ck_assert_msg(t > prev, "grant %d: token %lld after %lld", i, t, prev);
        prev = t;
        H_REQ(c[i % 2], "OK count=0", "UNLOCK fence");
    }
    for (int i = 0; i < 2; i++) {
        long long t = H_LOCK_NEW(c[i], "fence shared");

        ck_assert_msg(t > prev, "shared grant %d: token %lld after %lld", i, t, prev);
        prev = t;
    }
}
END_TEST

START_TEST(test_errors)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    char name[256], tag[64];

    H_REQ(a, "ERR SYNTAX%*", "LOCK");
    H_REQ(a, "ERR SYNTAX%*", "LOCK x wait=abc");
    H_REQ(a, "ERR SYNTAX%*", "LOCK x wait=-1");
    H_REQ(a, "ERR SYNTAX%*", "LOCK x bogus=1");
    H_REQ(a, "ERR SYNTAX%*", "LOCK x lease=inf");
    H_REQ(a, "ERR SYNTAX%*", "LOCK x wait=2147483648");
    H_REQ(a, "ERR SYNTAX%*", "#bad!tag PING"); /* malformed tag: answered untagged */
    memset(tag, 't', 33);
    tag[33] = '\0';
    H_REQ(a, "ERR SYNTAX%*", "#%s PING", tag);
    tag[32] = '\0';
    H_REQ(a, "#%w OK", "#%s PING", tag);
    H_REQ(a, "#e1 ERR SYNTAX%*", "#e1 LOCK");
    memset(name, 'n', 201);
    name[201] = '\0';
    H_REQ(a, "ERR SYNTAX%*", "LOCK %s", name);
    name[200] = '\0';
    H_LOCK_NEW(a, name);

    H_REQ(a, "ERR UNKNOWN%*", "FROB");
    H_REQ(a, "#u ERR UNKNOWN%*", "#u FROB");
    H_REQ(a, "OK", "ping");
    H_REQ(a, "OK", "PiNg");
    H_REQ(a, "OK token=%d count=1", "lock\tx1\twait=0");

    /* Empty lines are ignored; "\r\n" ends a line too. */
    ck_assert_int_eq(h_send_raw(a, "\n\r\n  \nPING\r\n", 12), 0);
    H_REPLY(a, "OK", H_TIMEOUT);
    H_SILENT(a, 200);

    H_REQ(a, "ERR NOSESSION%*", "HELLO session=0123456789abcdef");
    H_REQ(a, "ERR NOAUTH%*", "AUTH secret"); /* no password configured */
    H_REQ(a, "OK", "PING");
    H_LOCK_NEW(a, "x2"); /* still its own session */
}
END_TEST

START_TEST(test_toobig)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b;
    char line[4200];

    /* Exactly max-line (4096) bytes with the terminator is accepted. */
    memset(line, ' ', sizeof line);
    memcpy(line, "PING", 4);
    line[4095] = '\n';
    ck_assert_int_eq(h_send_raw(a, line, 4096), 0);
    H_REPLY(a, "OK", H_TIMEOUT);
    /* One byte more is not, and closes the connection. */
    line[4095] = ' ';
    line[4096] = '\n';
    ck_assert_int_eq(h_send_raw(a, line, 4097), 0);
    H_REPLY(a, "ERR TOOBIG%*", H_TIMEOUT);
    H_EOF(a, 3000);
    b = H_CLIENT(D, "name=bob");
    H_REQ(b, "OK", "PING");
}
END_TEST

START_TEST(test_example_session)
{
    struct h_conn *c = H_CONNECT(D->port);
    char sid[64], pat[160];
    const char *r;
    long long t;

    r = H_REQ(c, "OK session=%x secret=%x ttl=30000 proto=1 server=dlockd/%w resumed=0 lease=30000",
              "HELLO name=billing-7 ttl=30s");
    ck_assert_int_eq(h_kv(r, "session", sid, sizeof sid), 0);
    ck_assert_int_eq(strlen(sid), 16);
    t = H_LOCK_NEW(c, "invoices wait=5s");
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(c, pat, "LOCK invoices");
    H_REQ(c, "#a OK token=%d count=1", "#a LOCK reports shared");
    r = H_REQ(c, "OK {%*", "STATUS invoices");
    ck_assert_msg(h_json_has(r, "\"name\":\"invoices\""), "%s", r);
    ck_assert_msg(h_json_has(r, "\"type\":\"lock\""), "%s", r);
    snprintf(pat, sizeof pat, "\"session\":\"%s\"", sid);
    ck_assert_msg(h_json_has(r, pat), "%s", r);
    ck_assert_msg(h_json_has(r, "\"client\":\"billing-7\""), "%s", r);
    ck_assert_msg(h_json_has(r, "\"owner\":\"\""), "%s", r);
    ck_assert_msg(h_json_has(r, "\"mode\":\"exclusive\""), "%s", r);
    ck_assert_msg(h_json_has(r, "\"count\":2"), "%s", r);
    snprintf(pat, sizeof pat, "\"token\":%lld", t);
    ck_assert_msg(h_json_has(r, pat), "%s", r);
    ck_assert_msg(h_json_int(r, "held_ms") >= 0, "%s", r);
    ck_assert_msg(h_json_has(r, "\"waiters\":0"), "%s", r);
    H_REQ(c, "OK count=0", "UNLOCK invoices all");
    H_REQ(c, "ERR UNKNOWN unknown verb 'FROB'", "FROB");
    H_REQ(c, "OK", "QUIT");
    H_EOF(c, 3000);
}
END_TEST

START_TEST(test_status_json)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    char pat[160];
    const char *r;
    long long t, held;

    r = H_REQ(a, "OK {%*", "STATUS st1");
    ck_assert_msg(h_json_has(r, "\"name\":\"st1\""), "%s", r);
    ck_assert_msg(h_json_has(r, "\"type\":null"), "%s", r);
    ck_assert_msg(h_json_has(r, "\"holders\":[]"), "%s", r);

    t = H_LOCK_NEW(a, "st1 owner=worker-1");
    H_REQ(a, "OK token=%d count=2", "LOCK st1 owner=worker-1");
    ck_assert_int_eq(h_send(b, "LOCK st1 wait=20s"), 0);
    ck_assert(h_wait_waiters(a, "st1", 1, 3000));
    h_sleep_ms(300);
    r = H_REQ(a, "OK {%*", "STATUS st1");
    ck_assert_msg(h_json_has(r, "\"type\":\"lock\""), "%s", r);
    snprintf(pat, sizeof pat, "\"session\":\"%s\"", a->session);
    ck_assert_msg(h_json_has(r, pat), "%s", r);
    ck_assert_msg(h_json_has(r, "\"client\":\"alice\""), "%s", r);
    ck_assert_msg(h_json_has(r, "\"owner\":\"worker-1\""), "%s", r);
    ck_assert_msg(h_json_has(r, "\"mode\":\"exclusive\""), "%s", r);
    ck_assert_msg(h_json_has(r, "\"count\":2"), "%s", r);
    snprintf(pat, sizeof pat, "\"token\":%lld", t);
    ck_assert_msg(h_json_has(r, pat), "%s", r);
    held = h_json_int(r, "held_ms");
    ck_assert_msg(held >= 290 && held < 60000, "held_ms=%lld: %s", held, r);
    ck_assert_msg(h_json_has(r, "\"waiters\":1"), "%s", r);

    H_REQ(a, "OK count=0", "UNLOCK st1 owner=worker-1 all");
    H_REPLY(b, "OK token=%d count=1", 3000);
    H_REQ(b, "OK count=0", "UNLOCK st1");

    H_LOCK_NEW(a, "st2 shared");
    H_LOCK_NEW(b, "st2 shared");
    r = H_REQ(a, "OK {%*", "STATUS st2");
    ck_assert_msg(h_json_has(r, "\"client\":\"alice\"") && h_json_has(r, "\"client\":\"bob\""), "%s", r);
    ck_assert_msg(h_json_has(r, "\"mode\":\"shared\"") && !h_json_has(r, "\"mode\":\"exclusive\""), "%s", r);
    ck_assert_msg(h_json_has(r, "\"owner\":\"\""), "%s", r);
}
END_TEST

START_TEST(test_info_json)
{
    static const char *const keys[] = {"\"version\":", "\"uptime_ms\":", "\"connections\":", "\"sessions\":",
                                       "\"holds\":", "\"waiters\":", "\"backend\":\"up\"", "\"requests\":{",
                                       "\"grants\":", "\"timeouts\":", "\"expired_sessions\":"};
    struct h_conn *a = H_CLIENT(D, "name=alice");
    const char *r;

    H_LOCK_NEW(a, "i1");
    r = H_REQ(a, "OK {%*", "INFO");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        ck_assert_msg(h_json_has(r, keys[i]), "INFO lacks %s: %s", keys[i], r);
    ck_assert_msg(h_json_int(r, "holds") >= 1, "%s", r);
    ck_assert_msg(h_json_int(r, "grants") >= 1, "%s", r);
    ck_assert_msg(h_json_int(r, "connections") >= 1, "%s", r);
    ck_assert_msg(h_json_int(r, "sessions") >= 1, "%s", r);
    ck_assert_msg(r[strlen(r) - 1] == '}', "INFO is not one JSON object: %s", r);
}
END_TEST

START_TEST(test_lease_expiry)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    int64_t t0 = h_now_ms(), el;
    long long t = H_LOCK_NEW(a, "le lease=500ms");
    char pat[128];

    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK le");
    snprintf(pat, sizeof pat, "* LOST le token=%lld reason=lease", t);
    H_EVENT(a, pat, 3000);
    el = h_now_ms() - t0;
    ck_assert_msg(el >= 400 && el <= 2000, "LOST reason=lease after %lld ms for lease=500ms", (long long)el);
    ck_assert_int_gt(H_LOCK_NEW(b, "le"), t);
    H_REQ(a, "ERR NOTHELD%*", "UNLOCK le");
}
END_TEST

START_TEST(test_lease_waiter)
{
    struct h_conn *a = H_CLIENT(D, "name=alice");
    struct h_conn *b = H_CLIENT(D, "name=bob");
    int64_t t0 = h_now_ms(), el;
    long long t = H_LOCK_NEW(a, "lw lease=800ms");

    ck_assert_int_eq(h_send(b, "LOCK lw wait=10s"), 0);
    ck_assert_int_gt(H_KV_INT(H_REPLY(b, "OK token=%d count=1", 5000), "token"), t);
    el = h_now_ms() - t0;
    ck_assert_msg(el >= 700 && el <= 800 + 1500, "waiter granted %lld ms after a lease=800ms grant", (long long)el);
    H_EVENT(a, "* LOST lw token=%d reason=lease", 2000);
}
END_TEST

/* ---- "config": tests that start their own daemon */

START_TEST(test_noauth_requirepass)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--requirepass", "secret"));
    struct h_conn *c = H_CONNECT(d->port);

    H_REQ(c, "ERR NOAUTH%*", "LOCK a");
    H_REQ(c, "OK", "PING");
    H_REQ(c, "OK", "AUTH secret");
    H_LOCK_NEW(c, "a");
}
END_TEST

START_TEST(test_limit_maxclients)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--maxclients", "2"));
    struct h_conn *c1, *c2, *c3;

    h_sleep_ms(300); /* let the daemon see the start-up probe's connection close */
    c1 = H_CONNECT(d->port);
    H_REQ(c1, "OK", "PING");
    c2 = H_CONNECT(d->port);
    H_REQ(c2, "OK", "PING");
    c3 = H_CONNECT(d->port);
    H_REPLY(c3, "ERR LIMIT%*", 3000);
    H_EOF(c3, 3000);
    H_REQ(c1, "OK", "PING");
    h_close(c1);
    h_sleep_ms(300);
    c1 = H_CONNECT(d->port);
    H_REQ(c1, "OK", "PING");
}
END_TEST

START_TEST(test_key_prefix)
{
    struct h_dlockd *d1 = h_dlockd_start(R->port, H_ARGS("--key-prefix", "kp1:"));
    struct h_dlockd *d2 = h_dlockd_start(R->port, H_ARGS("--key-prefix", "kp2:"));
    struct h_conn *a = H_CLIENT(d1, "name=alice");
    struct h_conn *b = H_CLIENT(d2, "name=bob");

    H_LOCK_NEW(a, "same");
    H_LOCK_NEW(b, "same"); /* another prefix is another name space */
    ck_assert_int_gt(h_redis_count_keys(R->port, "kp1:*"), 0);
    ck_assert_int_gt(h_redis_count_keys(R->port, "kp2:*"), 0);
    ck_assert_int_eq(h_redis_count_keys(R->port, "dlock:*"), 0);
}
END_TEST

/* Script calls Redis has run: a waiting request must cause none. */
static long long script_calls(int port)
{
    static const char *const cmds[] = {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"};
    long long sum = 0;

    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        long long n = h_redis_cmdstat(port, cmds[i]);

        ck_assert_msg(n >= 0, "INFO commandstats failed");
        sum += n;
    }
    return sum;
}

START_TEST(test_no_polling)
{
    /* Renewal runs every lock-lease/3 = 10 s: none falls in the 2 s window. */
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--lock-lease", "30s"));
    struct h_conn *a = H_CLIENT(d, "name=alice");
    struct h_conn *b = H_CLIENT(d, "name=bob");
    long long before, after;

    H_LOCK_NEW(a, "np");
    ck_assert_int_eq(h_send(b, "LOCK np wait=20s"), 0);
    ck_assert(h_wait_waiters(a, "np", 1, 3000));
    h_sleep_ms(300);
    before = script_calls(R->port);
    h_sleep_ms(2000);
    after = script_calls(R->port);
    ck_assert_msg(after == before, "%lld script calls while a request waited 2 s", after - before);
    H_SILENT(b, 0);
    H_REQ(a, "OK count=0", "UNLOCK np");
    H_REPLY(b, "OK token=%d count=1", 3000);
}
END_TEST

/* ---- "stress" */

/* A LOCK that queues and is granted by a release in the same round (one loop turn): the grant
 * reaches the daemon in the same reply as the LOCK's own answer, before it; a grant from a
 * finite wait is checked before it is answered, and that check must not wait for the next
 * renewal round (10 s): it runs once the LOCK's answer is in (test_stress_counter hit it). */
START_TEST(test_grant_heard_while_sent)
{
    struct h_conn *c = H_CLIENT(D, "name=both");
    const char *r;
    int64_t t0;

    H_REQ(c, "OK token=%d count=1", "LOCK heard owner=a");
    t0 = h_now_ms();
    h_send(c, "#l LOCK heard wait=5s owner=b\n#u UNLOCK heard owner=a");
    r = h_reply_tag(c, "u", 5000);
    ck_assert_msg(r && strcmp(r, "#u OK count=0") == 0, "the UNLOCK: %s", r ? r : "(none)");
    r = h_reply_tag(c, "l", 8000);
    ck_assert_msg(r && h_match(r, "#l OK token=%d count=1"), "the LOCK: %s", r ? r : "(none)");
    ck_assert_msg(h_now_ms() - t0 < 3000, "the LOCK was answered after %lld ms", (long long)(h_now_ms() - t0));
}
END_TEST

#define STRESS_CLIENTS 20
#define STRESS_ITERS 50

/* One stress client, in a forked process: no Check assertions here. Returns its exit code. */
static int stress_client(int id)
{
    struct h_conn *c = h_connect_try(D->port);
    const char *r;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (c == NULL || (r = h_request(c, H_TIMEOUT, "HELLO name=stress-%d ttl=60s", id)) == NULL ||
        strncmp(r, "OK ", 3) != 0)
        return 2;
    for (int i = 0; i < STRESS_ITERS; i++) {
        char val[32], tok[32];
        long long v;
        char *s;

        r = h_request(c, 15000, "LOCK counter wait=10s");
        if (r == NULL || !h_match(r, "OK token=%d count=1") || h_kv(r, "token", tok, sizeof tok) < 0) {
            fprintf(stderr, "stress client %d, iteration %d: LOCK -> %s\n", id, i, r ? r : "(nothing)");
            return 3;
        }
        v = h_redis_int(R->port, "GET", "test:counter", NULL);
        free(h_redis_cmd(R->port, "RPUSH", "test:tokens", tok, NULL));
        snprintf(val, sizeof val, "%lld", v + 1);
        s = h_redis_cmd(R->port, "SET", "test:counter", val, NULL);
        if (v == LLONG_MIN || s == NULL || strcmp(s, "OK") != 0) {
            fprintf(stderr, "stress client %d, iteration %d: redis GET/SET failed\n", id, i);
            return 4;
        }
        free(s);
        r = h_request(c, 15000, "UNLOCK counter");
        if (r == NULL || strcmp(r, "OK count=0") != 0) {
            fprintf(stderr, "stress client %d, iteration %d: UNLOCK -> %s\n", id, i, r ? r : "(nothing)");
            return 5;
        }
    }
    return 0;
}

START_TEST(test_stress_counter)
{
    pid_t kids[STRESS_CLIENTS];
    char *tokens, *save = NULL, *tok;
    long long prev = 0, n = 0;
    int64_t t0 = h_now_ms();

    free(h_redis_cmd(R->port, "SET", "test:counter", "0", NULL));
    for (int i = 0; i < STRESS_CLIENTS; i++) {
        kids[i] = fork();
        ck_assert_int_ge(kids[i], 0);
        if (kids[i] == 0)
            _exit(stress_client(i));
    }
    for (int i = 0; i < STRESS_CLIENTS; i++) {
        int status;

        ck_assert_int_eq(waitpid(kids[i], &status, 0), kids[i]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "stress client %d failed (status %#x)", i,
                      status);
    }
    fprintf(stderr, "stress: %d x %d lock/update/unlock in %lld ms\n", STRESS_CLIENTS, STRESS_ITERS,
            (long long)(h_now_ms() - t0));
    ck_assert_int_eq(h_redis_int(R->port, "GET", "test:counter", NULL), STRESS_CLIENTS * STRESS_ITERS);
    /* Tokens pushed inside the critical sections: strictly growing. */
    tokens = h_redis_cmd(R->port, "LRANGE", "test:tokens", "0", "-1", NULL);
    ck_assert_ptr_nonnull(tokens);
    for (tok = strtok_r(tokens, "\n", &save); tok != NULL; tok = strtok_r(NULL, "\n", &save), n++) {
        long long t = strtoll(tok, NULL, 10);

        ck_assert_msg(t > prev, "grant %lld: token %lld after %lld", n, t, prev);
        prev = t;
    }
    free(tokens);
    ck_assert_int_eq(n, STRESS_CLIENTS * STRESS_ITERS);
}
END_TEST

/*
 * Two waits of one owner on one name, handed it by a release on another daemon: the second is a reentry of
 * the hold the first made. Its grant, heard by pub/sub, was confirmed by the waiter the hold names, which is
 * the first's only: the second was sent again and re-entered once more, count 3 for two LOCKs.
 */
START_TEST(test_reentry_waits_handed_across)
{
    struct h_dlockd *d1 = h_dlockd_start(R->port, NULL), *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(d1, "name=alice"), *b = H_CLIENT(d2, "name=bob");

    for (int round = 0; round < 5; round++) {
        H_LOCK_NEW(b, "twice");
        h_send(a, "#1 LOCK twice wait=10s\r\n#2 LOCK twice wait=10s\r\n");
        ck_assert(h_wait_waiters(b, "twice", 2, 5000));
        H_REQ(b, "OK count=0", "UNLOCK twice");
        H_REPLY(a, "#1 OK token=%d count=%d", 5000);
        H_REPLY(a, "#2 OK token=%d count=%d", 5000);
        H_REQ(a, "OK count=1", "UNLOCK twice");
        H_REQ(a, "OK count=0", "UNLOCK twice");
    }
    h_dlockd_stop(d1);
    h_dlockd_stop(d2);
}
END_TEST

static Suite *locks_suite(void)
{
    Suite *s = suite_create("locks");
    TCase *tc = tcase_create("locks");
    TCase *cfg = tcase_create("config");
    TCase *stress = tcase_create("stress");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_grant);
    tcase_add_test(tc, test_grant_heard_while_sent);
    tcase_add_test(tc, test_busy);
    tcase_add_test(tc, test_timeout);
    tcase_add_test(tc, test_reentrant);
    tcase_add_test(tc, test_shared_exclusive);
    tcase_add_test(tc, test_upgrade_downgrade);
    tcase_add_test(tc, test_unlock_notheld);
    tcase_add_test(tc, test_multi_name);
    tcase_add_test(tc, test_fifo);
    tcase_add_test(tc, test_writer_preference);
    tcase_add_test(tc, test_tagged_overtaking);
    tcase_add_test(tc, test_fencing_tokens);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_toobig);
    tcase_add_test(tc, test_example_session);
    tcase_add_test(tc, test_status_json);
    tcase_add_test(tc, test_info_json);
    tcase_add_test(tc, test_lease_expiry);
    tcase_add_test(tc, test_lease_waiter);
    suite_add_tcase(s, tc);

    tcase_add_checked_fixture(cfg, h_setup_redis, h_teardown);
    tcase_set_timeout(cfg, 60);
    tcase_add_test(cfg, test_noauth_requirepass);
    tcase_add_test(cfg, test_limit_maxclients);
    tcase_add_test(cfg, test_key_prefix);
    tcase_add_test(cfg, test_no_polling);
    tcase_add_test(cfg, test_reentry_waits_handed_across);
    suite_add_tcase(s, cfg);

    tcase_add_checked_fixture(stress, h_setup_both, h_teardown);
    tcase_set_timeout(stress, 180);
    tcase_add_test(stress, test_stress_counter);
    suite_add_tcase(s, stress);
    return s;
}

int main(void)
{
    /* h_run_suite: srunner with CK_NORMAL between h_init() and h_fini(). */
    return h_run_suite(locks_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
