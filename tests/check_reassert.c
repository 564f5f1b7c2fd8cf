/* check_reassert.c - integration tests of the write-back of holds to a new Redis (a restart without its data, a
 * failover to a replica that lacks some writes) and of the failover-delay gate. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The one hold of name in Redis: its field (hid) and value, into field and value; 0, or -1 when there is not one. */
static int hold_of(const char *name, char *field, size_t fcap, char *value, size_t vcap)
{
    char *v = h_holds_at(R->port, name), *nl; /* in h, or in the one-key form */
    int rc = -1;

    if (v && (nl = strchr(v, '\n')) != NULL && strchr(nl + 1, '\n') == NULL) {
        snprintf(field, fcap, "%.*s", (int)(nl - v), v);
        snprintf(value, vcap, "%s", nl + 1);
        rc = 0;
    }
    free(v);
    return rc;
}

/* Writes a hold into Redis as the scripts do: its field and value in h, its lease in x (far away). */
static void put_hold(const char *name, const char *field, const char *value)
{
    char h[128], x[128];

    snprintf(h, sizeof h, "dlock:{%s}:h", name);
    snprintf(x, sizeof x, "dlock:{%s}:x", name);
    free(h_redis_cmd(R->port, "HSET", h, field, value, NULL));
    free(h_redis_cmd(R->port, "ZADD", x, "99999999999999", field, NULL));
}

/* Stops the daemons, restarts Redis empty (another run_id: a new server), and lets them go on. */
static void restart_redis_stopped(struct h_dlockd *const *ds, int n, void (*meanwhile)(void *), void *arg)
{
    for (int i = 0; i < n; i++)
        kill(ds[i]->pid, SIGSTOP);
    h_redis_kill(R);
    h_redis_restart(R);
    if (meanwhile)
        meanwhile(arg);
    for (int i = 0; i < n; i++)
        kill(ds[i]->pid, SIGCONT);
}

struct stale {
    const char *name, *field;
    char value[256];
    const char *used; /* of the semaphore, or NULL for a lock */
};

/* The hold as a replica that missed the last writes has it. */
static void write_stale(void *arg)
{
    struct stale *st = arg;
    char m[128];

    put_hold(st->name, st->field, st->value);
    snprintf(m, sizeof m, "dlock:{%s}:m", st->name);
    if (st->used)
        free(h_redis_cmd(R->port, "HSET", m, "limit", "3", "used", st->used, NULL));
}

/*
 * A new master that has a hold with an older count (a replica that saw the
 * LOCK but not the reentrant one after it) gets the count the daemon knows:
 * otherwise one UNLOCK of a hold taken twice frees the name in Redis while
 * the holder is told count=1, and another client is granted it.
 */
START_TEST(test_kept_count)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--lock-lease", "3s", "--failover-delay", "300ms"));
    struct h_conn *a = H_CLIENT(d, "name=alice"), *b = H_CLIENT(d, "name=bob");
    long long t = H_LOCK_NEW(a, "kc");
    char field[128], value[256], pat[128];
    struct stale st = { .name = "kc", .field = field };

    ck_assert_int_eq(hold_of("kc", field, sizeof field, value, sizeof value), 0);
    ck_assert_msg(strncmp(value, "1 ", 2) == 0, "hold of kc: %s", value);
    snprintf(st.value, sizeof st.value, "%s", value); /* count 1: as the replica saw it */
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(a, pat, "LOCK kc");

    restart_redis_stopped(&d, 1, write_stale, &st);
    H_EVENT(a, "* SAFE", 10000);
    ck_assert_int_eq(hold_of("kc", field, sizeof field, value, sizeof value), 0);
    ck_assert_msg(strncmp(value, "2 ", 2) == 0, "hold of kc (count 2) on the new Redis: %s", value);
    H_REQ(a, "OK count=1", "UNLOCK kc");
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK kc");
}
END_TEST

/*
 * A semaphore hold kept on the new master with fewer permits than the
 * daemon knows: the permits and the semaphore's used count are set to it,
 * so no one else gets the difference.
 */
START_TEST(test_kept_permits)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--lock-lease", "3s", "--failover-delay", "300ms"));
    struct h_conn *a = H_CLIENT(d, "name=alice"), *b = H_CLIENT(d, "name=bob");
    char field[128], value[256];
    struct stale st = { .name = "kp", .field = field, .used = "1" };

    H_REQ(a, "OK token=%d held=1 free=2", "ACQUIRE kp limit=3");
    ck_assert_int_eq(hold_of("kp", field, sizeof field, value, sizeof value), 0);
    snprintf(st.value, sizeof st.value, "%s", value);
    H_REQ(a, "OK token=%d held=3 free=0", "ACQUIRE kp limit=3 permits=2");

    restart_redis_stopped(&d, 1, write_stale, &st);
    H_EVENT(a, "* SAFE", 10000);
    ck_assert_ptr_null(h_event(a, "* LOST %*", 0));
    H_REQ(b, "BUSY free=0", "ACQUIRE kp limit=3");
    H_REQ(a, "OK held=2 free=1", "RELEASE kp");
}
END_TEST

/* Permits a replica did not see, taken there by someone else since: LOST, and the other holder keeps them. */
START_TEST(test_kept_permits_taken)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--lock-lease", "3s", "--failover-delay", "300ms"));
    struct h_conn *a = H_CLIENT(d, "name=alice");
    char field[128], value[256], pat[128];
    struct stale st = { .name = "kp", .field = field, .used = "3" };
    long long t = H_KV_INT(H_REQ(a, "OK token=%d held=1 free=2", "ACQUIRE kp limit=3"), "token");

    ck_assert_int_eq(hold_of("kp", field, sizeof field, value, sizeof value), 0);
    snprintf(st.value, sizeof st.value, "%s", value);
    H_REQ(a, "OK token=%d held=3 free=0", "ACQUIRE kp limit=3 permits=2");

    restart_redis_stopped(&d, 1, write_stale, &st);
    put_hold("kp", "pffffffffffffffff:", "2 5 0 3000 0 ffffffffffffffff - mallory");
    snprintf(pat, sizeof pat, "* LOST kp token=%lld reason=backend", t);
    H_EVENT(a, pat, 10000);
    ck_assert_int_eq(h_redis_int(R->port, "HGET", "dlock:{kp}:m", "used", NULL), 3);
    H_REQ(a, "ERR NOTHELD%*", "RELEASE kp");
}
END_TEST

static void break_g(void *arg)
{
    (void)arg;
    free(h_redis_cmd(R->port, "SET", "dlock:{g}:h", "not a hash", NULL));
}

/*
 * The gate stays closed until this daemon's holds are back, even when that
 * takes longer than failover-delay: here the first write-back fails (a key
 * of another type, gone right after, makes its batch fail; an OOM, a
 * timeout or a batch late on the new master's clock do the same), and a
 * LOCK of the name, sent after failover-delay, must not be granted before
 * the next cycle writes the hold back.
 */
START_TEST(test_gate_waits_for_reassert)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--lock-lease", "6s", "--failover-delay", "300ms"));
    struct h_conn *a = H_CLIENT(d, "name=alice ttl=60s"), *b = H_CLIENT(d, "name=bob");
    long long t = H_LOCK_NEW(a, "g");
    char pat[64];

    restart_redis_stopped(&d, 1, break_g, NULL);
    ck_assert_int_eq(h_log_wait(d, H_ARGS("another server now"), 1, 5000), 1);
    ck_assert_int_ge(h_log_wait(d, H_ARGS("batch: WRONGTYPE"), 1, 5000), 1);
    h_sleep_ms(500); /* failover-delay is over */
    free(h_redis_cmd(R->port, "DEL", "dlock:{g}:h", NULL));
    H_REQ(b, "BUSY holder=alice ttl=%d", "LOCK g");
    ck_assert_ptr_null(h_event(a, "* LOST %*", 0));
    snprintf(pat, sizeof pat, "OK token=%lld count=2", t);
    H_REQ(a, pat, "LOCK g");
}
END_TEST

#define NW 6

/* Queued requests whose places a new Redis lacks are queued again in the order the daemon received them. */
START_TEST(test_waiters_requeued_in_order)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--lock-lease", "3s", "--failover-delay", "300ms"));
    struct h_conn *h = H_CLIENT(d, "name=holder"), *w[NW];
    int64_t deadline;

    H_LOCK_NEW(h, "q");
    for (int i = 0; i < NW; i++) {
        w[i] = H_CLIENT(d, "name=w");
        ck_assert_int_eq(h_send(w[i], "LOCK q wait=30s"), 0);
        ck_assert_int_eq(h_wait_waiters(h, "q", i + 1, 3000), 1);
    }
    h_redis_kill(R);
    h_redis_restart(R);
    H_EVENT(h, "* SAFE", 10000);
    for (deadline = h_now_ms() + 8000; h_now_ms() < deadline; h_sleep_ms(50))
        if (h_redis_int(R->port, "ZCARD", "dlock:{q}:q", NULL) == NW)
            break;
    ck_assert_int_eq(h_redis_int(R->port, "ZCARD", "dlock:{q}:q", NULL), NW);
    H_REQ(h, "OK count=0", "UNLOCK q");
    for (int i = 0; i < NW; i++) {
        H_REPLY(w[i], "OK token=%d count=1", 3000);
        H_REQ(w[i], "OK count=0", "UNLOCK q");
    }
}
END_TEST

static Suite *reassert_suite(void)
{
    Suite *s = suite_create("reassert");
    TCase *tc = tcase_create("reassert");

    tcase_add_checked_fixture(tc, h_setup_redis, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_kept_count);
    tcase_add_test(tc, test_kept_permits);
    tcase_add_test(tc, test_kept_permits_taken);
    tcase_add_test(tc, test_gate_waits_for_reassert);
    tcase_add_test(tc, test_waiters_requeued_in_order);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return h_run_suite(reassert_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
