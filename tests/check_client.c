/* check_client.c - libdlock against a real dlockd and redis-server: every call, many threads on one
 * handle, a blocked lock beside other calls, reconnect and resume, expiry reported as lost holds. */
#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dlock.h"


/* ---------------------------------------------------------------- events seen by the callback */

#define MAX_EV 64

struct seen {
    int type;
    char name[64], owner[64], reason[32];
    unsigned long long token;
    int held_in_cb;     /* dlock_held_ex() called from the callback */
    int blocking_in_cb; /* dlock_ping() called from the callback: must be refused */
};

static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct seen events[MAX_EV];
static int nevents;

static void on_event(dlock_t *h, const struct dlock_event *ev, void *arg)
{
    struct seen s = {.type = ev->type, .token = ev->token};

    (void)arg;
    snprintf(s.name, sizeof s.name, "%s", ev->name ? ev->name : "");
    snprintf(s.owner, sizeof s.owner, "%s", ev->owner ? ev->owner : "");
    snprintf(s.reason, sizeof s.reason, "%s", ev->reason ? ev->reason : "");
    if (ev->type == DLOCK_EVENT_LOST) {
        s.held_in_cb = dlock_held_ex(h, ev->name, ev->owner, ev->flags & DLOCK_SHARED);
        s.blocking_in_cb = dlock_ping(h);
    }
    pthread_mutex_lock(&ev_mu);
    if (nevents < MAX_EV)
        events[nevents++] = s;
    pthread_mutex_unlock(&ev_mu);
}

/* Index (from from on) of the first event of type (and name, unless NULL) within timeout_ms, or -1. */
static int wait_event_from(int from, int type, const char *name, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    do {
        pthread_mutex_lock(&ev_mu);
        for (int i = from; i < nevents; i++) {
            if (events[i].type == type && (name == NULL || strcmp(events[i].name, name) == 0)) {
                pthread_mutex_unlock(&ev_mu);
                return i;
            }
        }
        pthread_mutex_unlock(&ev_mu);
        h_sleep_ms(10);
    } while (h_now_ms() < deadline);
    return -1;
}

static int wait_event(int type, const char *name, int timeout_ms)
{
    return wait_event_from(0, type, name, timeout_ms);
}

/* The number of events so far: where wait_event_from() looks for the next ones. */
static int events_now(void)
{
    int n;

    pthread_mutex_lock(&ev_mu);
    n = nevents;
    pthread_mutex_unlock(&ev_mu);
    return n;
}

static int count_events(int type)
{
    int n = 0;

    pthread_mutex_lock(&ev_mu);
    for (int i = 0; i < nevents; i++)
        n += events[i].type == type;
    pthread_mutex_unlock(&ev_mu);
    return n;
}

/* ---------------------------------------------------------------- helpers */

static dlock_options_t *options_for(int port, long long ttl_ms, const char *name)
{
    dlock_options_t *o = dlock_options_new();
    char addr[64];

    ck_assert_ptr_nonnull(o);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    ck_assert_int_eq(dlock_options_add_address(o, addr), 0);
    if (ttl_ms)
        ck_assert_int_eq(dlock_options_set_ttl(o, ttl_ms), 0);
    if (name)
        ck_assert_int_eq(dlock_options_set_name(o, name), 0);
    ck_assert_int_eq(dlock_options_set_timeouts(o, 2000, 3000), 0);
    ck_assert_int_eq(dlock_options_set_event_callback(o, on_event, NULL), 0);
    return o;
}

/* Connects to dlockd d; fails the test when it cannot. */
static dlock_t *connect_to(const struct h_dlockd *d, long long ttl_ms, const char *name)
{
    dlock_options_t *o = options_for(d->port, ttl_ms, name);
    dlock_t *h = NULL;
    int rc = dlock_connect(&h, o);

    dlock_options_free(o);
    ck_assert_msg(rc == 0, "dlock_connect: %s", dlock_strerror(rc));
    return h;
}

/* A call made in a thread of its own. */
struct job {
    dlock_t *h;
    const char *name;
    unsigned flags;
    long long wait_ms;
    int unlock_after;           /* unlock once granted */
    int rc;
    struct dlock_grant g;
    int64_t took;               /* ms the call took */
    atomic_int done;
    pthread_t t;
};

static void *lock_job(void *arg)
{
    struct job *j = arg;
    int64_t t0 = h_now_ms();

    j->rc = dlock_lock(j->h, j->name, j->flags, j->wait_ms, &j->g);
    j->took = h_now_ms() - t0;
    if (j->rc == 0 && j->unlock_after)
        dlock_unlock(j->h, j->name, j->flags);
    atomic_store(&j->done, 1);
    return NULL;
}

static void job_start(struct job *j, dlock_t *h, const char *name, unsigned flags, long long wait_ms)
{
    memset(j, 0, sizeof *j);
    j->h = h;
    j->name = name;
    j->flags = flags;
    j->wait_ms = wait_ms;
    ck_assert_int_eq(pthread_create(&j->t, NULL, lock_job, j), 0);
}

/* Runs a lock call in another thread (another owner) and waits for it. */
static int lock_other(dlock_t *h, const char *name, unsigned flags, long long wait_ms, int unlock_after)
{
    struct job j;

    job_start(&j, h, name, flags, wait_ms);
    j.unlock_after = unlock_after;
    pthread_join(j.t, NULL);
    return j.rc;
}

static void assert_token(unsigned long long t)
{
    ck_assert_msg(t >= 1000000000000000ULL && t <= 9999999999999999ULL, "token %llu is not 16 digits", t);
}

/* ---------------------------------------------------------------- connecting */

START_TEST(test_connect_ping_info)
{
    dlock_t *h = connect_to(D, 0, "lib-1");
    char sid[32], *json = NULL;

    ck_assert_int_eq(dlock_session(h, sid, sizeof sid), 0);
    ck_assert_msg(strlen(sid) == 16 && strspn(sid, "0123456789abcdef") == 16, "session id '%s'", sid);
    ck_assert_int_eq(dlock_session(h, sid, 16), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_ping(h), 0);
    ck_assert_str_eq(dlock_version(), PACKAGE_VERSION);
    ck_assert_int_eq(dlock_info(h, &json), 0);
    ck_assert_msg(h_json_has(json, "\"version\":"), "INFO: %s", json);
    ck_assert_int_ge(h_json_int(json, "sessions"), 1);
    free(json);
    ck_assert_int_eq(dlock_status(h, "nobody-uses-this", &json), 0);
    ck_assert_msg(h_json_has(json, "\"type\":null"), "STATUS: %s", json);
    free(json);
    dlock_close(h);
}
END_TEST

START_TEST(test_connect_failures)
{
    dlock_options_t *o = dlock_options_new();
    dlock_t *h = (dlock_t *)&h;
    char addr[96];

    /* Nobody listens there. */
    snprintf(addr, sizeof addr, "127.0.0.1:%d", h_free_port());
    ck_assert_int_eq(dlock_options_add_address(o, addr), 0);
    ck_assert_int_eq(dlock_options_set_timeouts(o, 500, 500), 0);
    ck_assert_int_eq(dlock_connect(&h, o), DLOCK_ERR_CONN);
    ck_assert_ptr_null(h);
    /* A list: the dead address first, then the live one. */
    snprintf(addr, sizeof addr, "127.0.0.1:%d", D->port);
    ck_assert_int_eq(dlock_options_add_address(o, addr), 0);
    ck_assert_int_eq(dlock_connect(&h, o), 0);
    ck_assert_int_eq(dlock_ping(h), 0);
    dlock_close(h);
    dlock_options_free(o);

    /* Malformed options. */
    o = dlock_options_new();
    ck_assert_int_eq(dlock_options_add_address(o, ""), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_options_add_address(o, "host:notaport"), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_options_add_address(o, "unix:"), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_options_add_address(o, "[::1]:7411,unix:/tmp/x.sock,h"), 0);
    ck_assert_int_eq(dlock_options_set_name(o, "has space"), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_options_set_ttl(o, -1), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_options_set_timeouts(o, -1, 0), DLOCK_ERR_INVAL);
    dlock_options_free(o);
}
END_TEST

START_TEST(test_unix_socket_and_env)
{
    char sock[300], addr[320];
    dlock_t *h;

    h_teardown();
    R = h_redis_start(NULL);
    snprintf(sock, sizeof sock, "/tmp/check_client.%d.sock", (int)getpid());
    snprintf(addr, sizeof addr, "unix:%s", sock);
    D = h_dlockd_start(R->port, H_ARGS("--listen", addr));
    /* No address in the options: $DLOCK_ADDR. */
    setenv("DLOCK_ADDR", addr, 1);
    ck_assert_int_eq(dlock_connect(&h, NULL), 0);
    unsetenv("DLOCK_ADDR");
    ck_assert_int_eq(dlock_lock(h, "over-unix", 0, 0, NULL), 0);
    ck_assert_int_eq(dlock_held(h, "over-unix"), 1);
    dlock_close(h);
    unlink(sock);
}
END_TEST

START_TEST(test_auth)
{
    dlock_options_t *o;
    dlock_t *h = NULL;

    h_teardown();
    R = h_redis_start(NULL);
    D = h_dlockd_start(R->port, H_ARGS("--requirepass", "sesame"));
    o = options_for(D->port, 0, NULL);
    ck_assert_int_eq(dlock_options_set_password(o, "wrong"), 0);
    ck_assert_int_eq(dlock_connect(&h, o), DLOCK_ERR_NOAUTH);
    ck_assert_int_eq(dlock_options_set_password(o, "sesame"), 0);
    ck_assert_int_eq(dlock_connect(&h, o), 0);
    ck_assert_int_eq(dlock_lock(h, "authed", 0, 0, NULL), 0);
    dlock_close(h);
    dlock_options_free(o);
}
END_TEST

/* ---------------------------------------------------------------- locks */

START_TEST(test_lock_unlock_reentrant)
{
    dlock_t *h = connect_to(D, 0, "lib-lock");
    struct dlock_grant g1, g2, g3;
    char *json, owner[64], pat[128];

    ck_assert_int_eq(dlock_held(h, "inv"), 0);
    ck_assert_int_eq(dlock_lock(h, "inv", 0, 1000, &g1), 0);
    assert_token(g1.token);
    ck_assert_int_eq(g1.count, 1);
    ck_assert_int_eq(g1.free, -1);
    ck_assert_int_eq(dlock_trylock(h, "inv", 0, &g2), 0);
    ck_assert(g2.token == g1.token);
    ck_assert_int_eq(g2.count, 2);
    ck_assert_int_eq(dlock_held(h, "inv"), 2);

    /* The owner is the calling thread, and STATUS shows it. */
    ck_assert_int_eq(dlock_owner(owner, sizeof owner), 0);
    ck_assert_int_eq(dlock_status(h, "inv", &json), 0);
    snprintf(pat, sizeof pat, "\"owner\":\"%s\",\"mode\":\"exclusive\",\"count\":2,\"token\":%llu", owner, g1.token);
    ck_assert_msg(h_json_has(json, pat), "STATUS %s lacks %s", json, pat);
    ck_assert_msg(h_json_has(json, "\"client\":\"lib-lock\""), "STATUS: %s", json);
    free(json);

    /* Another thread is another owner. */
    ck_assert_int_eq(lock_other(h, "inv", 0, 0, 0), DLOCK_ERR_BUSY);
    ck_assert_int_eq(lock_other(h, "inv", DLOCK_SHARED, 0, 0), DLOCK_ERR_BUSY);

    ck_assert_int_eq(dlock_unlock(h, "inv", 0), 1);
    ck_assert_int_eq(dlock_unlock(h, "inv", 0), 0);
    ck_assert_int_eq(dlock_held(h, "inv"), 0);
    ck_assert_int_eq(dlock_unlock(h, "inv", 0), DLOCK_ERR_NOTHELD);

    /* A new hold gets a greater token; DLOCK_ALL drops every count. */
    ck_assert_int_eq(dlock_lock(h, "inv", 0, 0, &g3), 0);
    ck_assert_msg(g3.token > g1.token, "token %llu after %llu", g3.token, g1.token);
    ck_assert_int_eq(dlock_lock(h, "inv", 0, 0, NULL), 0);
    ck_assert_int_eq(dlock_lock(h, "inv", 0, 0, NULL), 0);
    ck_assert_int_eq(dlock_unlock(h, "inv", DLOCK_ALL), 0);
    ck_assert_int_eq(lock_other(h, "inv", 0, 0, 1), 0);
    dlock_close(h);
}
END_TEST

START_TEST(test_shared_and_timeout)
{
    dlock_t *h = connect_to(D, 0, NULL);
    struct dlock_grant g;
    struct job j;

    ck_assert_int_eq(dlock_lock(h, "rw", DLOCK_SHARED, 0, &g), 0);
    ck_assert_int_eq(lock_other(h, "rw", DLOCK_SHARED, 0, 1), 0);  /* readers share */
    job_start(&j, h, "rw", 0, 300);                                  /* a writer waits, then gives up */
    pthread_join(j.t, NULL);
    ck_assert_int_eq(j.rc, DLOCK_ERR_TIMEOUT);
    ck_assert_msg(j.took >= 280 && j.took < 3000, "TIMEOUT after %lld ms", (long long)j.took);
    ck_assert_int_eq(dlock_held_ex(h, "rw", NULL, DLOCK_SHARED), 1);
    ck_assert_int_eq(dlock_unlock(h, "rw", DLOCK_SHARED), 0);
    ck_assert_int_eq(lock_other(h, "rw", 0, 0, 1), 0);
    dlock_close(h);
}
END_TEST

START_TEST(test_multi_names_owner_lease)
{
    dlock_t *h = connect_to(D, 0, NULL);
    const char *names[] = {"m1", "m2", "m3"};
    struct dlock_grant g[3];
    int counts[3];
    char *json;
    int i;

    ck_assert_int_eq(dlock_lock_ex(h, names, 3, 0, 1000, 0, "job-7", g), 0);
    for (i = 0; i < 3; i++) {
        assert_token(g[i].token);
        ck_assert_int_eq(g[i].count, 1);
        ck_assert_int_eq(dlock_held_ex(h, names[i], "job-7", 0), 1);
    }
    ck_assert_int_eq(dlock_held(h, "m1"), 0); /* the calling thread is not job-7 */
    ck_assert_int_eq(dlock_status(h, "m2", &json), 0);
    ck_assert_msg(h_json_has(json, "\"owner\":\"job-7\""), "STATUS: %s", json);
    free(json);
    /* All or nothing: m3 is taken, so m4 is not taken either. */
    const char *other[] = {"m4", "m3"};
    ck_assert_int_eq(dlock_lock_ex(h, other, 2, 0, 0, 0, "job-8", NULL), DLOCK_ERR_BUSY);
    ck_assert_int_eq(dlock_held_ex(h, "m4", "job-8", 0), 0);
    ck_assert_int_eq(dlock_unlock_ex(h, names, 3, 0, "job-7", counts), 0);
    for (i = 0; i < 3; i++)
        ck_assert_int_eq(counts[i], 0);
    ck_assert_int_eq(dlock_unlock_ex(h, names, 1, 0, "job-7", NULL), DLOCK_ERR_NOTHELD);

    /* A lease ends the hold: a LOST event, then dlock_held and dlock_unlock say so. */
    ck_assert_int_eq(dlock_lock_ex(h, names, 1, 0, 0, 300, "job-9", g), 0);
    i = wait_event(DLOCK_EVENT_LOST, "m1", 5000);
    ck_assert_int_ge(i, 0);
    ck_assert_str_eq(events[i].reason, "lease");
    ck_assert_str_eq(events[i].owner, "job-9");
    ck_assert(events[i].token == g[0].token);
    ck_assert_int_eq(events[i].held_in_cb, DLOCK_ERR_LOST);
    ck_assert_int_eq(events[i].blocking_in_cb, DLOCK_ERR_INVAL); /* no blocking calls from the callback */
    ck_assert_int_eq(dlock_held_ex(h, "m1", "job-9", 0), DLOCK_ERR_LOST);
    ck_assert_int_eq(dlock_unlock_ex(h, names, 1, 0, "job-9", NULL), DLOCK_ERR_LOST);
    ck_assert_int_eq(dlock_held_ex(h, "m1", "job-9", 0), 0);
    ck_assert_int_eq(lock_other(h, "m1", 0, 0, 1), 0);

    /* Unlocking several names of which one was lost releases the others and reports the loss. */
    const char *pair[] = {"m5", "m6"};
    ck_assert_int_eq(dlock_lock_ex(h, pair, 1, 0, 0, 300, "job-10", NULL), 0);
    ck_assert_int_eq(dlock_lock_ex(h, pair + 1, 1, 0, 0, 0, "job-10", NULL), 0);
    ck_assert_int_ge(wait_event(DLOCK_EVENT_LOST, "m5", 5000), 0);
    ck_assert_int_eq(dlock_unlock_ex(h, pair, 2, 0, "job-10", counts), DLOCK_ERR_LOST);
    ck_assert_int_eq(dlock_held_ex(h, "m6", "job-10", 0), 0);
    ck_assert_int_eq(lock_other(h, "m6", 0, 0, 1), 0);
    dlock_close(h);
}
END_TEST

START_TEST(test_semaphore)
{
    dlock_t *h = connect_to(D, 0, NULL);
    struct dlock_grant g, g2;

    ck_assert_int_eq(dlock_acquire(h, "pool", 3, 2, 0, &g), 0);
    assert_token(g.token);
    ck_assert_int_eq(g.count, 2);
    ck_assert_int_eq(g.free, 1);
    ck_assert_int_eq(dlock_held(h, "pool"), 2);
    ck_assert_int_eq(dlock_acquire_ex(h, "pool", 3, 1, 0, 0, "other", &g2), 0);
    ck_assert_int_eq(g2.free, 0);
    ck_assert_int_eq(dlock_acquire_ex(h, "pool", 3, 1, 200, 0, "third", NULL), DLOCK_ERR_TIMEOUT);
    ck_assert_int_eq(dlock_acquire_ex(h, "pool", 3, 1, 0, 0, "third", NULL), DLOCK_ERR_BUSY);
    ck_assert_int_eq(dlock_acquire_ex(h, "pool", 5, 1, 0, 0, "third", NULL), DLOCK_ERR_MISMATCH);
    ck_assert_int_eq(dlock_lock(h, "pool", 0, 0, NULL), DLOCK_ERR_WRONGTYPE);
    ck_assert_int_eq(dlock_release(h, "pool", 1), 1);
    ck_assert_int_eq(dlock_release(h, "pool", 2), DLOCK_ERR_NOTHELD);
    ck_assert_int_eq(dlock_release(h, "pool", 1), 0);
    ck_assert_int_eq(dlock_held(h, "pool"), 0);
    ck_assert_int_eq(dlock_release_ex(h, "pool", 1, "other"), 0);
    ck_assert_int_eq(dlock_acquire(h, "pool", 0, 1, 0, NULL), DLOCK_ERR_INVAL);
    dlock_close(h);
}
END_TEST

START_TEST(test_latch)
{
    dlock_t *h = connect_to(D, 0, NULL);
    char *json;

    ck_assert_int_eq(dlock_latch(h, "gate", 2, 0), 2);
    ck_assert_int_eq(dlock_latch(h, "gate", 5, 60000), 2); /* exists: its count */
    ck_assert_int_eq(dlock_await(h, "gate", 0), DLOCK_ERR_TIMEOUT);
    ck_assert_int_eq(dlock_await(h, "gate", 200), DLOCK_ERR_TIMEOUT);
    ck_assert_int_eq(dlock_status(h, "gate", &json), 0);
    ck_assert_msg(h_json_has(json, "\"type\":\"latch\""), "STATUS: %s", json);
    free(json);
    ck_assert_int_eq(dlock_countdown(h, "gate", 1), 1);
    ck_assert_int_eq(dlock_countdown(h, "gate", 1), 0);
    ck_assert_int_eq(dlock_await(h, "gate", 0), 0);
    ck_assert_int_eq(dlock_countdown(h, "gone", 1), 0);
    ck_assert_int_eq(dlock_lock(h, "gate", 0, 0, NULL), 0); /* the latch is gone: the name is free */
    dlock_close(h);
}
END_TEST

START_TEST(test_invalid_arguments)
{
    dlock_t *h = connect_to(D, 0, NULL);
    const char *names[] = {"a", "b c"};
    char longname[300];

    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ck_assert_int_eq(dlock_lock(h, "", 0, 0, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock(h, "a=b", 0, 0, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock(h, longname, 0, 0, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock(h, NULL, 0, 0, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock(h, "a", 0x80, 0, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock(h, "a", DLOCK_ALL, 0, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock(h, "a", 0, -5, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock(h, "a", 0, 1LL << 40, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock_ex(h, names, 2, 0, 0, 0, NULL, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock_ex(h, names, 0, 0, 0, 0, NULL, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock_ex(h, names, 1, 0, 0, 0, "two words", NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_lock_ex(h, names, 1, 0, 0, -1, NULL, NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_unlock(h, "a", 0x80), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_release(h, "a", 0), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_countdown(h, "a", 0), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_latch(h, "a", -1, 0), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_status(h, "a", NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_ping(NULL), DLOCK_ERR_INVAL);
    ck_assert_int_eq(dlock_ping(h), 0); /* still fine */
    dlock_close(h);
}
END_TEST

/* ---------------------------------------------------------------- a fake server */

#define FAKE_SECRET "5be0c1d2e3f405162738495a6b7c8d9e"

/* A server thread answering one connection at a time. With lease 0 it answers like dlockd
 * before issue 3 (no semaphores, latches or several names; a name "err-CODE" gets ERR CODE)
 * and before issue 12 (no secret=, no lease=); with lease > 0, HELLO gives secret= and lease=,
 * and resuming the session takes its secret. Single-name LOCK and UNLOCK are always granted. */
struct fake {
    int lfd, port;
    pthread_t t;
    int lease;              /* lease= in HELLO; 0: no lease= and no secret= */
    pthread_mutex_t mu;     /* guards the fields below and the writes on fd */
    int fd;                 /* the connection being served, -1 between connections */
    int sessions;           /* sessions handed out; the last one is the live one */
    int mute;               /* answer nothing, as a dlockd that hangs */
    char resume[256];       /* the last HELLO with session= */
};

/* The value of key=VALUE in the request line args into out ("" when absent). */
static void fake_arg(const char *args, const char *key, char *out, size_t cap)
{
    const char *p = strstr(args, key);

    snprintf(out, cap, "%.*s", p ? (int)strcspn(p + strlen(key), " \r\n") : 0, p ? p + strlen(key) : "");
}

static void fake_hello(struct fake *f, FILE *out, const char *args)
{
    char sid[64], secret[64], live[20];
    int ok = 1;

    fake_arg(args, "session=", sid, sizeof sid);
    fake_arg(args, "secret=", secret, sizeof secret);
    if (sid[0]) {
        snprintf(f->resume, sizeof f->resume, "%.255s", args);
        snprintf(live, sizeof live, "%016x", f->sessions);
        ok = strcmp(sid, live) == 0 && (f->lease == 0 || strcmp(secret, FAKE_SECRET) == 0);
    } else {
        snprintf(live, sizeof live, "%016x", ++f->sessions);
    }
    if (!ok)
        fprintf(out, "ERR NOSESSION no such session\n");
    else if (f->lease)
        fprintf(out, "OK session=%s secret=" FAKE_SECRET " ttl=10000 proto=1 server=fake/0 resumed=%d lease=%d\n",
                live, sid[0] != '\0', f->lease);
    else
        fprintf(out, "OK session=%s ttl=10000 proto=1 server=fake/0 resumed=%d\n", live, sid[0] != '\0');
}

/* One request line (f->mu held). */
static void fake_answer(struct fake *f, FILE *out, char *line)
{
    char *tag = "", *verb, *arg, *more, *save = NULL, args[4096];

    line[strcspn(line, "\r\n")] = '\0';
    snprintf(args, sizeof args, "%s", line);
    verb = strtok_r(line, " ", &save);
    if (verb && verb[0] == '#') {
        tag = verb;
        verb = strtok_r(NULL, " ", &save);
    }
    if (verb == NULL || f->mute)
        return;
    arg = strtok_r(NULL, " ", &save);
    more = strtok_r(NULL, " ", &save);
    fprintf(out, "%s%s", tag, *tag ? " " : "");
    if (strcmp(verb, "HELLO") == 0)
        fake_hello(f, out, args);
    else if (arg && strncmp(arg, "err-", 4) == 0)
        fprintf(out, "ERR %s injected\n", arg + 4);
    else if (strcmp(verb, "PING") == 0 || strcmp(verb, "QUIT") == 0)
        fprintf(out, "OK\n");
    else if ((strcmp(verb, "LOCK") == 0 || strcmp(verb, "UNLOCK") == 0) && more && !strchr(more, '='))
        fprintf(out, "ERR SYNTAX several names in one %s are not supported yet\n", verb);
    else if (strcmp(verb, "LOCK") == 0)
        fprintf(out, "OK token=1000000000000001 count=1\n");
    else if (strcmp(verb, "UNLOCK") == 0)
        fprintf(out, "OK count=0\n");
    else
        fprintf(out, "ERR UNKNOWN %s is not implemented yet\n", verb);
    fflush(out);
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    int fd;

    while ((fd = accept(f->lfd, NULL, NULL)) >= 0) {
        FILE *in = fdopen(fd, "r"), *out = fdopen(dup(fd), "w");
        char line[4096];

        pthread_mutex_lock(&f->mu);
        f->fd = fd;
        pthread_mutex_unlock(&f->mu);
        while (fgets(line, sizeof line, in)) {
            pthread_mutex_lock(&f->mu);
            fake_answer(f, out, line);
            pthread_mutex_unlock(&f->mu);
        }
        pthread_mutex_lock(&f->mu);
        f->fd = -1;
        pthread_mutex_unlock(&f->mu);
        fclose(in);
        fclose(out);
    }
    return NULL;
}

static void fake_start(struct fake *f)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;

    pthread_mutex_init(&f->mu, NULL);
    f->fd = -1;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(f->lfd, 0);
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(f->lfd, 4), 0);
    ck_assert_int_eq(getsockname(f->lfd, (struct sockaddr *)&sa, &len), 0);
    f->port = ntohs(sa.sin_port);
    ck_assert_int_eq(pthread_create(&f->t, NULL, fake_main, f), 0);
}

/* Sends text on the connection being served (an event, say). */
static void fake_send(struct fake *f, const char *text)
{
    pthread_mutex_lock(&f->mu);
    ck_assert_int_ge(f->fd, 0);
    ck_assert_int_eq(write(f->fd, text, strlen(text)), (ssize_t)strlen(text));
    pthread_mutex_unlock(&f->mu);
}

/* Breaks the connection being served; the next one is accepted. */
static void fake_drop(struct fake *f)
{
    pthread_mutex_lock(&f->mu);
    if (f->fd >= 0)
        shutdown(f->fd, SHUT_RDWR);
    pthread_mutex_unlock(&f->mu);
}

/* As kill -9: the connection breaks and nobody listens any more. */
static void fake_kill(struct fake *f)
{
    shutdown(f->lfd, SHUT_RDWR);
    fake_drop(f);
    pthread_join(f->t, NULL);
    close(f->lfd);
}

START_TEST(test_error_codes)
{
    static const char *codes[] = {"SYNTAX", "UNKNOWN", "TOOBIG", "NOAUTH", "NOSESSION", "NOTHELD",
                                  "WRONGTYPE", "MISMATCH", "DEADLOCK", "LIMIT", "BACKEND"};
    const char *two[] = {"a", "b"};
    struct fake f = {0};
    dlock_options_t *o;
    dlock_t *h;
    char name[64], *json;

    fake_start(&f);
    o = options_for(f.port, 0, NULL);
    ck_assert_int_eq(dlock_connect(&h, o), 0);
    dlock_options_free(o);
    /* One to one: ERR <code number i> is -i. */
    for (int i = 0; i < (int)(sizeof codes / sizeof codes[0]); i++) {
        snprintf(name, sizeof name, "err-%s", codes[i]);
        ck_assert_int_eq(dlock_status(h, name, &json), -(i + 1));
        ck_assert_ptr_null(json);
        ck_assert_str_ne(dlock_strerror(-(i + 1)), "unknown error");
    }
    ck_assert_int_eq(dlock_status(h, "err-FROBNICATED", &json), DLOCK_ERR_PROTO);
    /* Calls for verbs an older server lacks. */
    ck_assert_int_eq(dlock_acquire(h, "s", 2, 1, 0, NULL), DLOCK_ERR_UNKNOWN);
    ck_assert_int_eq(dlock_release(h, "s", 1), DLOCK_ERR_UNKNOWN);
    ck_assert_int_eq(dlock_latch(h, "l", 1, 0), DLOCK_ERR_UNKNOWN);
    ck_assert_int_eq(dlock_countdown(h, "l", 1), DLOCK_ERR_UNKNOWN);
    ck_assert_int_eq(dlock_await(h, "l", 0), DLOCK_ERR_UNKNOWN);
    ck_assert_int_eq(dlock_lock_ex(h, two, 2, 0, 0, 0, NULL, NULL), DLOCK_ERR_SYNTAX);
    ck_assert_int_eq(dlock_unlock_ex(h, two, 2, 0, NULL, NULL), DLOCK_ERR_SYNTAX);
    ck_assert_int_eq(dlock_held(h, "a"), 0);
    for (int e = -100; e >= -108; e--)
        ck_assert_str_ne(dlock_strerror(e), "unknown error");
    ck_assert_str_eq(dlock_strerror(-99), "unknown error");
    dlock_close(h);
    fake_kill(&f); /* its thread uses f, on this stack */
}
END_TEST

/* ---------------------------------------------------------------- threads */

#define NTHREADS 16
#define NCYCLES 100

struct counter {
    dlock_t *h;
    long value;           /* updated under the lock only, without atomics */
    atomic_int inside;    /* threads inside the critical section */
    atomic_int max_inside;
    atomic_int errors;
};

static void *counter_thread(void *arg)
{
    struct counter *c = arg;

    for (int i = 0; i < NCYCLES; i++) {
        if (dlock_lock(c->h, "counter", 0, DLOCK_WAIT_INF, NULL) != 0) {
            atomic_fetch_add(&c->errors, 1);
            continue;
        }
        int in = atomic_fetch_add(&c->inside, 1) + 1;
        if (in > atomic_load(&c->max_inside))
            atomic_store(&c->max_inside, in);
        long v = c->value;
        sched_yield();
        c->value = v + 1;
        atomic_fetch_sub(&c->inside, 1);
        if (dlock_unlock(c->h, "counter", 0) != 0)
            atomic_fetch_add(&c->errors, 1);
    }
    return NULL;
}

START_TEST(test_threads_shared_counter)
{
    struct counter c = {.h = connect_to(D, 0, "counter")};
    pthread_t t[NTHREADS];
    char *json;

    for (int i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, counter_thread, &c), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(atomic_load(&c.errors), 0);
    ck_assert_int_eq(atomic_load(&c.max_inside), 1);
    ck_assert_int_eq(c.value, NTHREADS * NCYCLES);
    ck_assert_int_eq(dlock_status(c.h, "counter", &json), 0);
    ck_assert_msg(h_json_has(json, "\"holders\":[]"), "left over: %s", json);
    free(json);
    dlock_close(c.h);
}
END_TEST

START_TEST(test_blocked_lock_does_not_block_others)
{
    dlock_t *h = connect_to(D, 0, NULL);
    struct dlock_grant g;
    struct job j;
    struct h_conn *raw = H_CLIENT(D, "name=raw");
    char *json;

    ck_assert_int_eq(dlock_lock(h, "door", 0, 0, &g), 0);
    job_start(&j, h, "door", 0, DLOCK_WAIT_INF);
    ck_assert_msg(h_wait_waiters(raw, "door", 1, 5000), "the second thread does not wait");
    /* While it waits, the other threads' calls go through at once. */
    for (int i = 0; i < 20; i++) {
        int64_t t0 = h_now_ms();

        ck_assert_int_eq(dlock_ping(h), 0);
        ck_assert_int_eq(dlock_lock(h, "window", 0, 0, NULL), 0);
        ck_assert_int_eq(dlock_status(h, "door", &json), 0);
        free(json);
        ck_assert_int_eq(dlock_unlock(h, "window", 0), 0);
        ck_assert_int_lt(h_now_ms() - t0, 1000);
    }
    ck_assert_int_eq(lock_other(h, "window", 0, 0, 1), 0);
    ck_assert(!atomic_load(&j.done));
    ck_assert_int_eq(dlock_unlock(h, "door", 0), 0);
    pthread_join(j.t, NULL);
    ck_assert_int_eq(j.rc, 0);
    ck_assert(j.g.token > g.token);
    dlock_close(h);
}
END_TEST

START_TEST(test_shutdown_and_close)
{
    dlock_t *h = connect_to(D, 0, NULL), *h2 = connect_to(D, 0, NULL);
    struct job j;
    struct h_conn *raw = H_CLIENT(D, "name=raw");

    ck_assert_int_eq(dlock_lock(h2, "held", 0, 0, NULL), 0);
    ck_assert_int_eq(dlock_lock(h, "mine", 0, 0, NULL), 0);
    job_start(&j, h, "held", 0, DLOCK_WAIT_INF);
    ck_assert(h_wait_waiters(raw, "held", 1, 5000));
    /* dlock_shutdown() from another thread ends the blocked call; the handle stays valid. */
    dlock_shutdown(h);
    pthread_join(j.t, NULL);
    ck_assert_int_eq(j.rc, DLOCK_ERR_CLOSED);
    ck_assert_int_eq(dlock_ping(h), DLOCK_ERR_CLOSED);
    ck_assert_int_eq(dlock_lock(h, "other", 0, 0, NULL), DLOCK_ERR_CLOSED);
    dlock_shutdown(h); /* again: nothing happens */
    /* QUIT released "mine" at once. */
    H_REQ(raw, "OK token=%d count=1", "LOCK mine");
    dlock_close(h);

    /* dlock_close() alone does the same for a call blocked in another thread. */
    job_start(&j, h2, "mine", 0, DLOCK_WAIT_INF);
    ck_assert(h_wait_waiters(raw, "mine", 1, 5000));
    dlock_close(h2);
    pthread_join(j.t, NULL);
    ck_assert_int_eq(j.rc, DLOCK_ERR_CLOSED);
    H_REQ(raw, "OK token=%d count=1", "LOCK held");
}
END_TEST

/* ---------------------------------------------------------------- reconnects and expiry */

START_TEST(test_reconnect_resumes_session)
{
    dlock_t *h = connect_to(D, 3000, "resumer");
    struct h_conn *raw = H_CLIENT(D, "name=raw");
    struct dlock_grant gx, gs;
    char sid[32], sid2[32], *json, pat[96];
    struct job j;
    int i;

    ck_assert_int_eq(dlock_session(h, sid, sizeof sid), 0);
    ck_assert_int_eq(dlock_lock(h, "keep-x", 0, 0, &gx), 0);
    ck_assert_int_eq(dlock_lock(h, "keep-s", DLOCK_SHARED, 0, &gs), 0);
    ck_assert_int_eq(dlock_acquire(h, "keep-p", 4, 2, 0, NULL), 0);
    H_REQ(raw, "OK token=%d count=1", "LOCK busy");
    job_start(&j, h, "busy", 0, 20000); /* waits across the reconnect */
    ck_assert(h_wait_waiters(raw, "busy", 1, 5000));

    dlock_debug_drop_connection(h);
    ck_assert_int_ge(wait_event(DLOCK_EVENT_JEOPARDY, NULL, 3000), 0);
    ck_assert_str_eq(events[wait_event(DLOCK_EVENT_JEOPARDY, NULL, 0)].reason, "connection");
    ck_assert_int_ge(wait_event(DLOCK_EVENT_SAFE, NULL, 5000), 0);
    ck_assert_int_eq(dlock_ping(h), 0);
    ck_assert_int_eq(dlock_session(h, sid2, sizeof sid2), 0);
    ck_assert_str_eq(sid, sid2);
    ck_assert_int_eq(count_events(DLOCK_EVENT_LOST), 0);

    /* The holds are intact, on the server as well. */
    ck_assert_int_eq(dlock_held(h, "keep-x"), 1);
    ck_assert_int_eq(dlock_held(h, "keep-s"), 1);
    ck_assert_int_eq(dlock_held(h, "keep-p"), 2);
    ck_assert_int_eq(dlock_status(h, "keep-x", &json), 0);
    snprintf(pat, sizeof pat, "\"session\":\"%s\"", sid);
    ck_assert_msg(h_json_has(json, pat), "STATUS: %s", json);
    free(json);
    H_REQ(raw, "BUSY holder=resumer ttl=%d", "LOCK keep-x");

    /* The waiting lock was sent again and is granted when the raw client lets go. */
    ck_assert(h_wait_waiters(raw, "busy", 1, 5000));
    ck_assert(!atomic_load(&j.done));
    H_REQ(raw, "OK count=0", "UNLOCK busy");
    pthread_join(j.t, NULL);
    ck_assert_int_eq(j.rc, 0);

    /* Drop again and again while calls are on their way: every call still gets one answer. */
    for (i = 0; i < 5; i++) {
        dlock_debug_drop_connection(h);
        ck_assert_int_eq(dlock_lock(h, "keep-x", 0, 2000, &gx), 0);
        ck_assert_int_eq(gx.count, 2);
        ck_assert_int_eq(dlock_unlock(h, "keep-x", 0), 1);
    }
    ck_assert_int_eq(dlock_unlock(h, "keep-x", 0), 0);
    ck_assert_int_eq(dlock_unlock(h, "keep-s", 0), 0);
    ck_assert_int_eq(dlock_release(h, "keep-p", 2), 0);
    H_REQ(raw, "OK token=%d count=1", "LOCK keep-x");
    dlock_close(h);
}
END_TEST

/* Two dlockd on one Redis: the one the library is on is killed with SIGKILL; the library resumes
 * the session on the other, whose renewal keeps the hold (two leases), and tells no LOST. */
START_TEST(test_failover_after_kill)
{
    static const char *const lease[] = { "--lock-lease", "2s", NULL };
    struct h_dlockd *d1 = h_dlockd_start(R->port, lease), *d2 = h_dlockd_start(R->port, lease);
    dlock_options_t *o = options_for(d1->port, 10000, "mover");
    struct h_conn *raw = H_CLIENT(d2, "name=raw");
    char addr[64], sid[32], sid2[32];
    dlock_t *h = NULL;

    snprintf(addr, sizeof addr, "127.0.0.1:%d", d2->port);
    ck_assert_int_eq(dlock_options_add_address(o, addr), 0);
    ck_assert_int_eq(dlock_connect(&h, o), 0);
    dlock_options_free(o);
    ck_assert_int_eq(dlock_session(h, sid, sizeof sid), 0);
    ck_assert_int_eq(dlock_lock(h, "fo-x", 0, 0, NULL), 0);
    h_dlockd_kill(d1);
    ck_assert_int_ge(wait_event(DLOCK_EVENT_SAFE, NULL, 5000), 0);
    for (int i = 0; i < 4; i++) {
        h_sleep_ms(1000);
        H_REQ(raw, "BUSY holder=mover ttl=%d", "LOCK fo-x");
    }
    ck_assert_int_eq(dlock_held(h, "fo-x"), 1);
    ck_assert_int_eq(count_events(DLOCK_EVENT_LOST), 0);
    ck_assert_int_eq(dlock_session(h, sid2, sizeof sid2), 0);
    ck_assert_str_eq(sid, sid2);
    ck_assert_int_eq(dlock_unlock(h, "fo-x", 0), 0);
    H_REQ(raw, "OK token=%d count=1", "LOCK fo-x");
    dlock_close(h);
}
END_TEST

START_TEST(test_session_gone_reports_every_hold_lost)
{
    dlock_t *h = connect_to(D, 10000, NULL);
    char sid[32], sid2[32], key[64];
    int i;

    ck_assert_int_eq(dlock_session(h, sid, sizeof sid), 0);
    ck_assert_int_eq(dlock_lock(h, "g-x", 0, 0, NULL), 0);
    ck_assert_int_eq(dlock_lock(h, "g-s", DLOCK_SHARED, 0, NULL), 0);
    ck_assert_int_eq(dlock_lock_ex(h, (const char *[]){"g-o"}, 1, 0, 0, 0, "someone", NULL), 0);
    ck_assert_int_eq(dlock_acquire(h, "g-p", 3, 1, 0, NULL), 0);

    /* The daemon dies, its session's record with it, and it comes back: the session is unknown
     * there (ERR NOSESSION). */
    h_dlockd_kill(D);
    snprintf(key, sizeof key, "dlock:{%s}:session", sid);
    ck_assert_int_eq(h_redis_int(R->port, "DEL", key, NULL), 1);
    h_dlockd_restart(D);
    for (const char *const *n = (const char *const[]){"g-x", "g-s", "g-o", "g-p", NULL}; *n; n++) {
        i = wait_event(DLOCK_EVENT_LOST, *n, 10000);
        ck_assert_msg(i >= 0, "no LOST for %s", *n);
        ck_assert_str_eq(events[i].reason, "expired");
    }
    ck_assert_int_eq(count_events(DLOCK_EVENT_LOST), 4);
    ck_assert_int_eq(dlock_held(h, "g-x"), DLOCK_ERR_LOST);
    ck_assert_int_eq(dlock_held_ex(h, "g-o", "someone", 0), DLOCK_ERR_LOST);
    ck_assert_int_eq(dlock_held(h, "g-p"), DLOCK_ERR_LOST);
    /* A new session carries on. */
    ck_assert_int_eq(dlock_ping(h), 0);
    ck_assert_int_eq(dlock_session(h, sid2, sizeof sid2), 0);
    ck_assert_str_ne(sid, sid2);
    ck_assert_int_eq(dlock_unlock(h, "g-x", 0), DLOCK_ERR_LOST);
    ck_assert_int_eq(dlock_unlock(h, "g-s", DLOCK_SHARED), DLOCK_ERR_LOST);
    ck_assert_int_eq(dlock_release(h, "g-p", 1), DLOCK_ERR_LOST);
    ck_assert_int_eq(dlock_held(h, "g-x"), 0);
    ck_assert_int_eq(dlock_lock(h, "g-new", 0, 0, NULL), 0);
    dlock_close(h);
}
END_TEST

START_TEST(test_heartbeat_deadline_expires_session)
{
    dlock_t *h = connect_to(D, 1000, NULL);
    dlock_options_t *o;
    char sid[32], sid2[32];
    int i, j;

    ck_assert_int_eq(dlock_session(h, sid, sizeof sid), 0);
    ck_assert_int_eq(dlock_lock(h, "hb-x", 0, 0, NULL), 0);
    /* Heartbeats keep the session alive well past its ttl. */
    h_sleep_ms(2500);
    ck_assert_int_eq(dlock_held(h, "hb-x"), 1);
    ck_assert_int_eq(count_events(DLOCK_EVENT_LOST), 0);

    /* The server stops answering: no acknowledged heartbeat for a ttl means the session is gone. */
    kill(D->pid, SIGSTOP);
    j = wait_event(DLOCK_EVENT_JEOPARDY, NULL, 3000);
    i = wait_event(DLOCK_EVENT_LOST, "hb-x", 3000);
    ck_assert_int_ge(j, 0);
    ck_assert_str_eq(events[j].reason, "heartbeat");
    ck_assert_int_gt(i, j);
    ck_assert_str_eq(events[i].reason, "expired");
    ck_assert_int_eq(dlock_held(h, "hb-x"), DLOCK_ERR_LOST);
    kill(D->pid, SIGCONT);
    ck_assert_int_eq(dlock_ping(h), 0);
    ck_assert_int_eq(dlock_session(h, sid2, sizeof sid2), 0);
    ck_assert_str_ne(sid, sid2);
    ck_assert_int_eq(dlock_lock(h, "hb-x", 0, 2000, NULL), 0); /* the old session let it go */
    dlock_close(h);

    /* A call with no answer in time: DLOCK_ERR_CONN. */
    o = options_for(D->port, 0, NULL);
    ck_assert_int_eq(dlock_options_set_timeouts(o, 0, 300), 0);
    ck_assert_int_eq(dlock_connect(&h, o), 0);
    dlock_options_free(o);
    kill(D->pid, SIGSTOP);
    ck_assert_int_eq(dlock_ping(h), DLOCK_ERR_CONN);
    kill(D->pid, SIGCONT);
    ck_assert_int_eq(dlock_ping(h), 0);
    dlock_close(h);
}
END_TEST

/* ---------------------------------------------------------------- the session's secret and its holds' lease */

/* Waits until h is on a session other than sid; fails the test after timeout_ms. */
static void wait_new_session(dlock_t *h, const char *sid, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    char cur[32];

    do {
        ck_assert_int_eq(dlock_session(h, cur, sizeof cur), 0);
        if (strcmp(cur, sid) != 0)
            return;
        h_sleep_ms(10);
    } while (h_now_ms() < deadline);
    ck_abort_msg("still on session %s after %d ms", sid, timeout_ms);
}

static dlock_t *connect_fake(const struct fake *f)
{
    dlock_options_t *o = options_for(f->port, 0, NULL);
    dlock_t *h = NULL;

    ck_assert_int_eq(dlock_connect(&h, o), 0);
    dlock_options_free(o);
    return h;
}

/* Resuming takes the secret HELLO gave; a server that gives none (before issue 12) is resumed without. */
START_TEST(test_resume_sends_the_secret)
{
    struct fake fakes[2] = {{.lease = 30000}, {.lease = 0}};

    for (int k = 0; k < 2; k++) {
        struct fake *f = &fakes[k];
        char sid[32], sid2[32], want[128], sent[256];
        dlock_t *h;
        int64_t t0;
        int from;

        fake_start(f);
        h = connect_fake(f);
        ck_assert_int_eq(dlock_session(h, sid, sizeof sid), 0);
        ck_assert_int_eq(dlock_lock(h, "kept", 0, 0, NULL), 0);
        from = events_now();
        t0 = h_now_ms();
        fake_drop(f);
        ck_assert_int_ge(wait_event_from(from, DLOCK_EVENT_SAFE, NULL, 5000), 0);
        /* at once, not after the next heartbeat (ttl/3) */
        ck_assert_msg(h_now_ms() - t0 < 1000, "SAFE %lld ms after the drop", (long long)(h_now_ms() - t0));
        ck_assert_int_eq(dlock_ping(h), 0);
        ck_assert_int_eq(dlock_session(h, sid2, sizeof sid2), 0);
        ck_assert_str_eq(sid, sid2);
        ck_assert_int_eq(count_events(DLOCK_EVENT_LOST), 0);
        ck_assert_int_eq(dlock_held(h, "kept"), 1);
        pthread_mutex_lock(&f->mu);
        snprintf(sent, sizeof sent, "%s", f->resume);
        pthread_mutex_unlock(&f->mu);
        snprintf(want, sizeof want, "HELLO session=%s%s", sid, f->lease ? " secret=" FAKE_SECRET : "");
        ck_assert_msg(strstr(sent, want) && (f->lease || !strstr(sent, "secret=")), "resumed with '%s'", sent);
        dlock_close(h);
        fake_kill(f);
    }
}
END_TEST

/* Holds no answer confirms are lost before their Redis lease could run out: with a lease of
 * 3 s, dlockd leaves a hold 2 s at least, and the library trusts it 1.5 s after an answer. */
START_TEST(test_unconfirmed_holds_lost_in_time)
{
    struct fake f = {.lease = 3000};
    dlock_t *h;
    char sid[32];
    int64_t t0, took;
    int from, i;

    fake_start(&f);
    h = connect_fake(&f);
    ck_assert_int_eq(dlock_session(h, sid, sizeof sid), 0);

    /* A short break, resumed in time: nothing is lost, and the heartbeats go on confirming. */
    ck_assert_int_eq(dlock_lock(h, "j1", 0, 0, NULL), 0);
    from = events_now();
    fake_drop(&f);
    ck_assert_int_ge(wait_event_from(from, DLOCK_EVENT_SAFE, NULL, 3000), 0);
    h_sleep_ms(2500);
    ck_assert_int_eq(count_events(DLOCK_EVENT_LOST), 0);
    ck_assert_int_eq(dlock_held(h, "j1"), 1);

    /* * JEOPARDY: PINGs are still answered, but a dlockd cut off from Redis renews nothing. */
    from = events_now();
    t0 = h_now_ms();
    fake_send(&f, "* JEOPARDY\n");
    i = wait_event_from(from, DLOCK_EVENT_LOST, "j1", 5000);
    took = h_now_ms() - t0;
    ck_assert_int_ge(i, 0);
    ck_assert_str_eq(events[i].reason, "jeopardy");
    ck_assert_msg(took >= 500 && took < 2000, "lost %lld ms after JEOPARDY", (long long)took);
    ck_assert_int_eq(events[i].held_in_cb, DLOCK_ERR_LOST);
    ck_assert_int_eq(dlock_held(h, "j1"), DLOCK_ERR_LOST);
    /* That session is ended (QUIT releases what the server still has) and a new one begins. */
    wait_new_session(h, sid, 5000);
    ck_assert_int_eq(dlock_unlock(h, "j1", 0), DLOCK_ERR_LOST);

    /* kill -9 of the server. */
    ck_assert_int_eq(dlock_lock(h, "j2", 0, 0, NULL), 0);
    from = events_now();
    t0 = h_now_ms();
    fake_kill(&f);
    i = wait_event_from(from, DLOCK_EVENT_LOST, "j2", 5000);
    took = h_now_ms() - t0;
    ck_assert_int_ge(i, 0);
    ck_assert_str_eq(events[i].reason, "jeopardy");
    ck_assert_msg(took < 2000, "lost %lld ms after the kill", (long long)took);
    ck_assert_int_eq(dlock_held(h, "j2"), DLOCK_ERR_LOST);
    dlock_close(h);
}
END_TEST

/* A server that hangs answers nothing: the heartbeats are late, then the holds are lost in time. */
START_TEST(test_hung_server_holds_lost_in_time)
{
    struct fake f = {.lease = 3000};
    dlock_t *h;
    int64_t t0, took;
    int i, j;

    fake_start(&f);
    h = connect_fake(&f);
    ck_assert_int_eq(dlock_lock(h, "hung", 0, 0, NULL), 0);
    t0 = h_now_ms();
    pthread_mutex_lock(&f.mu);
    f.mute = 1;
    pthread_mutex_unlock(&f.mu);
    j = wait_event(DLOCK_EVENT_JEOPARDY, NULL, 3000);
    i = wait_event(DLOCK_EVENT_LOST, "hung", 3000);
    took = h_now_ms() - t0;
    ck_assert_int_ge(j, 0);
    ck_assert_str_eq(events[j].reason, "heartbeat");
    ck_assert_int_gt(i, j);
    ck_assert_str_eq(events[i].reason, "jeopardy");
    ck_assert_msg(took < 2000, "lost %lld ms after the server hung", (long long)took);
    ck_assert_int_eq(dlock_held(h, "hung"), DLOCK_ERR_LOST);
    dlock_close(h);
    ck_assert_int_eq(count_events(DLOCK_EVENT_LOST), 1);
    fake_kill(&f); /* its thread uses f, on this stack */
}
END_TEST

static Suite *client_suite(void)
{
    Suite *s = suite_create("client");
    TCase *tc = tcase_create("library");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_connect_ping_info);
    tcase_add_test(tc, test_connect_failures);
    tcase_add_test(tc, test_unix_socket_and_env);
    tcase_add_test(tc, test_auth);
    tcase_add_test(tc, test_lock_unlock_reentrant);
    tcase_add_test(tc, test_shared_and_timeout);
    tcase_add_test(tc, test_multi_names_owner_lease);
    tcase_add_test(tc, test_semaphore);
    tcase_add_test(tc, test_latch);
    tcase_add_test(tc, test_invalid_arguments);
    tcase_add_test(tc, test_error_codes);
    tcase_add_test(tc, test_threads_shared_counter);
    tcase_add_test(tc, test_blocked_lock_does_not_block_others);
    tcase_add_test(tc, test_shutdown_and_close);
    tcase_add_test(tc, test_reconnect_resumes_session);
    tcase_add_test(tc, test_failover_after_kill);
    tcase_add_test(tc, test_session_gone_reports_every_hold_lost);
    tcase_add_test(tc, test_heartbeat_deadline_expires_session);
    tcase_add_test(tc, test_resume_sends_the_secret);
    tcase_add_test(tc, test_unconfirmed_holds_lost_in_time);
    tcase_add_test(tc, test_hung_server_holds_lost_in_time);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return h_run_suite(client_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
