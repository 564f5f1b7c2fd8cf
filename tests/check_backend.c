/* check_backend.c - Redis as a trustworthy backend: eviction policy, script errors, jeopardy and SAFE, reconnects. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This daemon's id, from INFO through c. */
static void daemon_id(struct h_conn *c, char *out, size_t cap)
{
    const char *info = H_REQ(c, "OK {%*}", "INFO"), *p = strstr(info, "\"id\":\"");

    ck_assert_ptr_nonnull(p);
    p += strlen("\"id\":\"");
    snprintf(out, cap, "%.*s", (int)strcspn(p, "\""), p);
}

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
    TCase *pubsub = tcase_create("pubsub");

    tcase_add_checked_fixture(pubsub, h_setup_both, h_teardown);
    tcase_add_test(pubsub, test_forged_grant);
    tcase_add_test(pubsub, test_lease_end_flood);
    for (TCase **tc = (TCase *[]){pubsub, NULL}; *tc != NULL; tc++) {
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
