/* check_admin.c - the operator verbs (LIST, SESSIONS, KILL, FORCE) behind adminpass, /locks and /sessions, the audit trail. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADMINPASS "b0ss"

/* ---------------------------------------------------------------- helpers */

/* A dlockd with adminpass and extra arguments (up to 6). */
static struct h_dlockd *start_admin(const char *const *more)
{
    const char *args[H_MAX_EXTRA] = { "--adminpass", ADMINPASS };
    int n = 2;

    for (int i = 0; more && more[i]; i++)
        args[n++] = more[i];
    args[n] = NULL;
    return h_dlockd_start(R->port, args);
}

/* An operator connection to d. */
static struct h_conn *operator(const struct h_dlockd *d)
{
    struct h_conn *c = H_CONNECT(d->port);

    H_REQ(c, "OK", "AUTH %s", ADMINPASS);
    return c;
}

/* The id of the daemon c is connected to, from INFO. */
static void daemon_id(struct h_conn *c, char *out, size_t cap)
{
    const char *info = H_REQ(c, "OK {%*}", "INFO"), *at = strstr(info, "\"id\":\"");

    ck_assert_ptr_nonnull(at);
    snprintf(out, cap, "%.16s", at + 6);
}

/* The LIST entry of name, compact. */
static void entry(char *out, size_t cap, const char *name, const char *type, int holders, int waiters)
{
    snprintf(out, cap, "{\"name\":\"%s\",\"type\":\"%s\",\"holders\":%d,\"waiters\":%d}", name, type, holders, waiters);
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;

    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ---------------------------------------------------------------- refusals */

static const char *const admin_verbs[] = { "LIST", "SESSIONS", "KILL 0123456789abcdef", "FORCE x" };

START_TEST(test_refused_without_adminpass)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--requirepass", "us3r"));
    struct h_conn *c = H_CLIENT(d, "auth=us3r");

    for (size_t i = 0; i < sizeof admin_verbs / sizeof *admin_verbs; i++)
        H_REQ(c, "ERR NOAUTH %*", "%s", admin_verbs[i]);
    /* No adminpass: AUTH with what would be one is just a wrong password. */
    H_REQ(c, "ERR NOAUTH invalid password", "AUTH %s", ADMINPASS);
    H_REQ(c, "ERR NOAUTH %*", "LIST");
}
END_TEST

START_TEST(test_refused_with_requirepass)
{
    const char *args[] = { "--requirepass", "us3r", "--auth-fail-delay", "0", NULL };
    struct h_dlockd *d = start_admin(args);
    struct h_conn *c = H_CLIENT(d, "auth=us3r"), *a = H_CONNECT(d->port), *w = H_CONNECT(d->port);

    for (size_t i = 0; i < sizeof admin_verbs / sizeof *admin_verbs; i++)
        H_REQ(c, "ERR NOAUTH %*", "%s", admin_verbs[i]);
    /* The admin password satisfies requirepass, by AUTH or HELLO auth=. */
    H_REQ(a, "OK session=%x%*", "HELLO auth=%s name=ops", ADMINPASS);
    H_REQ(a, "OK {\"names\":[],\"latches\":[],\"more\":0}", "LIST");
    H_LOCK_NEW(a, "mine");
    /* Wrong admin passwords count like wrong passwords. */
    H_REQ(w, "ERR NOAUTH invalid password", "AUTH x");
    H_REQ(w, "ERR NOAUTH invalid password", "AUTH y");
    H_REQ(w, "ERR NOAUTH%*closing%*", "AUTH z");
    H_EOF(w, 3000);
}
END_TEST

/* Without requirepass everyone is in, but the operator verbs still want adminpass. */
START_TEST(test_refused_open_server)
{
    struct h_dlockd *d = start_admin(NULL);
    struct h_conn *c = H_CLIENT(d, "name=plain"), *o = operator(d);

    for (size_t i = 0; i < sizeof admin_verbs / sizeof *admin_verbs; i++)
        H_REQ(c, "ERR NOAUTH %*", "%s", admin_verbs[i]);
    H_REQ(c, "ERR NOAUTH invalid password", "AUTH nope");
    H_REQ(c, "ERR NOAUTH %*", "LIST");
    H_REQ(o, "OK {\"sessions\":[%*],\"more\":0}", "SESSIONS");
}
END_TEST

/* ---------------------------------------------------------------- LIST and SESSIONS */

START_TEST(test_list_across_daemons)
{
    char admin[32], e[256];
    const char *args[] = { "--admin-listen", admin, NULL };
    struct h_dlockd *d1, *d2;
    struct h_conn *a, *b, *w, *o;
    const char *r;
    char *body = NULL;
    int port = h_free_port();

    snprintf(admin, sizeof admin, "127.0.0.1:%d", port);
    d1 = start_admin(args);
    d2 = start_admin(NULL);
    a = H_CLIENT(d1, "name=alice");
    b = H_CLIENT(d2, "name=bob");
    w = H_CLIENT(d2, "name=walt");
    o = operator(d1);
    H_LOCK_NEW(a, "la-1");
    H_LOCK_NEW(a, "la-2");
    H_LOCK_NEW(b, "la-3 shared");
    H_REQ(b, "OK token=%d held=1 free=1", "ACQUIRE lb-1 limit=2");
    ck_assert_int_eq(h_send(w, "#w LOCK la-1 wait=inf"), 0);
    ck_assert(h_wait_waiters(o, "la-1", 1, 3000));

    r = H_REQ(o, "OK {\"names\":[%*],\"more\":0}", "LIST");
    entry(e, sizeof e, "la-1", "lock", 1, 1);
    ck_assert_msg(h_json_has(r, e), "%s", r);
    entry(e, sizeof e, "la-3", "lock", 1, 0);
    ck_assert_msg(h_json_has(r, e), "%s", r);
    entry(e, sizeof e, "lb-1", "semaphore", 1, 0);
    ck_assert_msg(h_json_has(r, e), "%s", r);
    ck_assert_int_eq(count_of(r, "\"name\":"), 4);

    r = H_REQ(o, "OK {\"names\":[%*],\"more\":0}", "LIST la-*");
    ck_assert_msg(count_of(r, "\"name\":") == 3 && !strstr(r, "lb-1"), "%s", r);
    r = H_REQ(o, "OK {\"names\":[%*],\"more\":0}", "LIST la-? limit=3");
    ck_assert_int_eq(count_of(r, "\"name\":"), 3);
    r = H_REQ(o, "OK {\"names\":[%*],\"more\":1}", "LIST limit=2");
    ck_assert_int_eq(count_of(r, "\"name\":"), 2);
    H_REQ(o, "OK {\"names\":[],\"latches\":[],\"more\":0}", "LIST nothing-*");

    /* The admin endpoint shows the same document. */
    ck_assert_int_eq(h_http_get_auth(port, "/locks?pattern=la-*", "Bearer " ADMINPASS, NULL, &body, 5000), 200);
    ck_assert_msg(count_of(body, "\"name\":") == 3 && strstr(body, "\"more\":0"), "%s", body);
    free(body);
    ck_assert_int_eq(h_http_get_auth(port, "/locks?limit=5000", "Bearer " ADMINPASS, NULL, NULL, 5000), 400);
    ck_assert_int_eq(h_http_get_auth(port, "/sessions?limit=1", "Bearer " ADMINPASS, NULL, &body, 5000), 200);
    ck_assert_msg(count_of(body, "\"session\":") == 1 && strstr(body, "\"more\":1"), "%s", body);
    free(body);
}
END_TEST

START_TEST(test_sessions)
{
    struct h_dlockd *d = start_admin(NULL);
    struct h_conn *a = H_CLIENT(d, "name=alice ttl=30s"), *o = operator(d);
    char want[256];
    const char *r;

    H_LOCK_NEW(a, "s-1");
    H_LOCK_NEW(a, "s-2");
    r = H_REQ(o, "OK {\"sessions\":[%*],\"more\":0}", "SESSIONS");
    snprintf(want, sizeof want, "{\"session\":\"%s\",\"client\":\"alice\",\"peer\":\"127.0.0.1:", a->session);
    ck_assert_msg(h_json_has(r, want), "%s", r);
    ck_assert_msg(h_json_has(r, "\"holds\":2,\"waits\":0}"), "%s", r);
    ck_assert_int_ge(count_of(r, "\"session\":"), 2); /* and the operator's, and the harness's PING */
    r = H_REQ(o, "OK {\"sessions\":[%*],\"more\":1}", "SESSIONS limit=1");
    ck_assert_int_eq(count_of(r, "\"session\":"), 1);

    /* Detached, it is still there, with no peer. */
    snprintf(want, sizeof want, "{\"session\":\"%s\",\"client\":\"alice\",\"peer\":\"\",", a->session);
    h_close(a);
    for (int i = 0; i < 50 && !h_json_has(r = H_REQ(o, "OK {%*}", "SESSIONS"), want); i++)
        h_sleep_ms(50);
    ck_assert_msg(h_json_has(r, want), "%s", r);
}
END_TEST

/* ---------------------------------------------------------------- KILL and FORCE */

START_TEST(test_kill)
{
    /* With lock-delay, an expiry would keep k-1 from b for 30 s: KILL does not. */
    const char *args[] = { "--lock-delay", "30s", NULL };
    struct h_dlockd *d = start_admin(args);
    struct h_conn *a = H_CLIENT(d, "name=alice"), *b = H_CLIENT(d, "name=bob"), *o = operator(d);

    H_LOCK_NEW(a, "k-1");
    ck_assert_int_eq(h_send(b, "#w LOCK k-1 wait=20s"), 0);
    ck_assert(h_wait_waiters(o, "k-1", 1, 3000));
    H_REQ(o, "OK", "KILL %s", a->session);
    H_EVENT(a, "* LOST k-1 token=%d reason=admin", 3000);
    H_EVENT(a, "* BYE reason=expired", 3000);
    ck_assert(h_wait_eof(a, 3000));
    ck_assert_ptr_nonnull(h_reply_tag(b, "w", 3000));
    ck_assert_msg(h_match(b->last, "#w OK token=%d count=1"), "%s", b->last);
    H_REQ(o, "ERR NOSESSION %*", "KILL %s", a->session);
    H_REQ(o, "ERR NOSESSION %*", "KILL 0123456789abcdef");
    ck_assert_int_ge(h_log_wait(d, H_ARGS("audit: admin KILL", a->session), 1, 3000), 1);
}
END_TEST

/* KILL reaches a session on another daemon, one that died included: taken over, then ended
 * there too (its client hears LOST reason=admin, as for a KILL on its own daemon). */
START_TEST(test_kill_across_daemons)
{
    struct h_dlockd *d1 = start_admin(NULL), *d2 = start_admin(NULL), *d3 = start_admin(NULL);
    struct h_conn *a = H_CLIENT(d1, "name=alice ttl=60s"), *c = H_CLIENT(d3, "name=carol ttl=60s");
    struct h_conn *b = H_CLIENT(d2, "name=bob"), *o = operator(d2), *x;

    H_LOCK_NEW(a, "k-2");
    H_LOCK_NEW(c, "k-3");
    ck_assert_int_eq(h_send(b, "#w LOCK k-2 wait=20s"), 0);
    ck_assert(h_wait_waiters(o, "k-2", 1, 3000));
    H_REQ(o, "OK", "KILL %s", a->session);
    H_EVENT(a, "* LOST k-2 token=%d reason=admin", 3000);
    H_EVENT(a, "* BYE reason=expired", 3000);
    ck_assert(h_wait_eof(a, 3000));
    ck_assert_ptr_nonnull(h_reply_tag(b, "w", 3000));
    ck_assert_msg(h_match(b->last, "#w OK token=%d count=1"), "%s", b->last);
    x = H_CONNECT(d1->port);
    H_REQ(x, "ERR NOSESSION %*", "HELLO session=%s secret=%s", a->session, a->secret);
    H_REQ(o, "ERR NOSESSION %*", "KILL %s", a->session);

    /* carol's daemon died: her hold would last her 60 s ttl; KILL frees it now. */
    h_dlockd_kill(d3);
    H_REQ(b, "BUSY holder=carol ttl=%d", "LOCK k-3");
    H_REQ(o, "OK", "KILL %s", c->session);
    H_REQ(b, "OK token=%d count=1", "LOCK k-3 wait=5s");
    ck_assert_int_ge(h_log_wait(d2, H_ARGS("audit: admin KILL", c->session), 1, 3000), 1);
}
END_TEST

START_TEST(test_force_across_daemons)
{
    struct h_dlockd *d1 = start_admin(NULL), *d2 = start_admin(NULL);
    struct h_conn *h = H_CLIENT(d2, "name=holder"), *w = H_CLIENT(d1, "name=waiter"), *o = operator(d1);
    long long token = H_LOCK_NEW(h, "f-1");
    char lost[128];

    ck_assert_int_eq(h_send(w, "#w LOCK f-1 wait=20s"), 0);
    ck_assert(h_wait_waiters(o, "f-1", 1, 3000));
    H_REQ(o, "OK count=1", "FORCE f-1");
    ck_assert_ptr_nonnull(h_reply_tag(w, "w", 3000));
    ck_assert_msg(h_match(w->last, "#w OK token=%d count=1"), "%s", w->last);
    snprintf(lost, sizeof lost, "* LOST f-1 token=%lld reason=admin", token);
    H_EVENT(h, lost, 3000);
    H_REQ(h, "ERR NOTHELD %*", "UNLOCK f-1");
    /* A name nobody holds frees nothing. */
    H_REQ(o, "OK count=0", "FORCE f-none");
}
END_TEST

/* Anyone who can reach Redis can PUBLISH: a forged F on a daemon's channel drops nothing. */
START_TEST(test_forged_force)
{
    struct h_dlockd *d = start_admin(NULL);
    struct h_conn *h = H_CLIENT(d, "name=holder");
    char id[32], channel[64], *n;

    H_LOCK_NEW(h, "g-1");
    daemon_id(h, id, sizeof id);
    snprintf(channel, sizeof channel, "dlock:%s", id);
    n = h_redis_cmd(R->port, "PUBLISH", channel, "F g-1", NULL);
    ck_assert_msg(n && strcmp(n, "1") == 0, "PUBLISH reached %s", n ? n : "nobody");
    free(n);
    ck_assert_ptr_null(h_event(h, "* LOST%*", 1000));
    H_REQ(h, "OK count=0", "UNLOCK g-1");
}
END_TEST

/* ---------------------------------------------------------------- bad input */

static const char *const bad[] = {
    "LIST a b", "LIST limit=0", "LIST limit=x", "LIST limit=1001", "LIST a limit=2 limit=3", "LIST a wait=1s",
    "SESSIONS x", "SESSIONS limit=0", "SESSIONS limit=100000", "KILL", "KILL a b", "KILL a=b", "FORCE",
    "FORCE a b", "FORCE owner=x", "FORCE a shared",
};

START_TEST(test_bad_input)
{
    struct h_dlockd *d = start_admin(NULL);
    struct h_conn *o = operator(d);
    char huge[400];

    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        H_REQ(o, "ERR SYNTAX %*", "%s", bad[i]);
    memset(huge, 'a', sizeof huge - 2);
    huge[sizeof huge - 2] = '*';
    huge[sizeof huge - 1] = '\0';
    H_REQ(o, "ERR SYNTAX %*", "LIST %s", huge);
    H_REQ(o, "ERR SYNTAX %*", "FORCE %s", huge);
    H_REQ(o, "OK", "PING");
}
END_TEST

/* ---------------------------------------------------------------- the audit trail */

START_TEST(test_audit_lines)
{
    struct h_dlockd *d = start_admin(NULL);
    struct h_conn *a = H_CLIENT(d, "name=alice"), *b = H_CLIENT(d, "name=bob"), *o = operator(d), *e;
    char *log;

    H_LOCK_NEW(a, "au-1");
    H_REQ(a, "OK count=0", "UNLOCK au-1");
    H_LOCK_NEW(a, "au-2");
    H_REQ(b, "TIMEOUT", "LOCK au-2 wait=100ms");
    H_REQ(a, "OK token=%d count=1", "LOCK au-3 lease=300ms");
    H_EVENT(a, "* LOST au-3 token=%d reason=lease", 3000);
    e = H_CLIENT(d, "name=eve ttl=1s");
    H_LOCK_NEW(e, "au-4");
    H_EVENT(e, "* BYE reason=expired", 5000);
    H_REQ(o, "OK count=1", "FORCE au-2");

    ck_assert_int_ge(h_log_wait(d, H_ARGS("info audit: grant name=au-1", a->session, "client=alice"), 1, 3000), 1);
    ck_assert_int_ge(h_log_wait(d, H_ARGS("info audit: release name=au-1", a->session, "client=alice"), 1, 3000), 1);
    ck_assert_int_ge(h_log_wait(d, H_ARGS("info audit: timeout name=au-2", b->session, "client=bob"), 1, 3000), 1);
    ck_assert_int_ge(h_log_wait(d, H_ARGS("info audit: lost name=au-3", "client=alice", "reason=lease"), 1, 3000), 1);
    ck_assert_int_ge(h_log_wait(d, H_ARGS("info audit: lost name=au-4", "client=eve", "reason=expired"), 1, 3000), 1);
    ck_assert_int_ge(h_log_wait(d, H_ARGS("info audit: expired", e->session, "client=eve"), 1, 3000), 1);
    ck_assert_int_ge(h_log_wait(d, H_ARGS("info audit: lost name=au-2", "client=alice", "reason=admin"), 1, 3000), 1);
    ck_assert_int_ge(h_log_wait(d, H_ARGS("info audit: admin FORCE name=au-2 freed=1"), 1, 3000), 1);
    log = h_dlockd_log_read(d);
    ck_assert_msg(!strstr(log, ADMINPASS) && !strstr(log, a->secret), "a secret in the log");
    free(log);
}
END_TEST

START_TEST(test_audit_silenced_at_notice)
{
    const char *args[] = { "--log-level", "notice", NULL };
    struct h_dlockd *d = start_admin(args);
    struct h_conn *a = H_CLIENT(d, "name=alice"), *o = operator(d);

    H_LOCK_NEW(a, "n-1");
    H_REQ(a, "OK count=0", "UNLOCK n-1");
    H_REQ(o, "OK count=0", "FORCE n-1");
    H_REQ(a, "OK", "PING");
    ck_assert_int_eq(h_log_count(d, H_ARGS("audit:")), 0);
    ck_assert_int_eq(h_log_count(d, H_ARGS("notice server: listening on")), 1);
}
END_TEST

static Suite *admin_suite(void)
{
    Suite *s = suite_create("admin");
    TCase *tc = tcase_create("admin");

    tcase_add_checked_fixture(tc, h_setup_redis, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_refused_without_adminpass);
    tcase_add_test(tc, test_refused_with_requirepass);
    tcase_add_test(tc, test_refused_open_server);
    tcase_add_test(tc, test_list_across_daemons);
    tcase_add_test(tc, test_sessions);
    tcase_add_test(tc, test_kill);
    tcase_add_test(tc, test_kill_across_daemons);
    tcase_add_test(tc, test_force_across_daemons);
    tcase_add_test(tc, test_forged_force);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_audit_lines);
    tcase_add_test(tc, test_audit_silenced_at_notice);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(admin_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
