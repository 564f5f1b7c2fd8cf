/* check_server.c - listeners, admin endpoint and wait-for graph under attack: EMFILE, protected mode, deep chains. */
#include "harness.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* ------------------------------------------------------------ the wait-for graph */

#define CHAIN_CONNS 2     /* sessions the chain's owners are spread over */
#define CHAIN_LEN 12000   /* owners: over the search budget (two steps each) */
#define CHAIN_NEAR 3000   /* a cycle through this many owners is within it */
#define BATCH 500         /* requests sent before their replies are read */

/* The connection holding owner i (1..CHAIN_LEN): each has a contiguous range. */
static struct h_conn *chain_conn(struct h_conn **cs, int i)
{
    return cs[(i - 1) * CHAIN_CONNS / CHAIN_LEN];
}

/* Owner o<i> of one of cs holds dc<i>, for every i. */
static void chain_holds(struct h_conn **cs)
{
    for (int from = 1; from <= CHAIN_LEN; from += BATCH) {
        int to = from + BATCH - 1 < CHAIN_LEN ? from + BATCH - 1 : CHAIN_LEN;

        for (int i = from; i <= to; i++)
            ck_assert_int_eq(h_send(chain_conn(cs, i), "#h%d LOCK dc%d owner=o%d", i, i, i), 0);
        for (int i = from; i <= to; i++)
            H_REPLY(chain_conn(cs, i), "#h%d OK token=%d count=1", H_TIMEOUT);
    }
}

/* Owner o<i> waits for dc<i-1>, held by o<i-1> (dc0 by whoever holds it). The
 * waits start from the far end, so that each one's own search is short. */
static void chain_waits(struct h_conn **cs)
{
    for (int i = CHAIN_LEN; i >= 1; i--) {
        ck_assert_int_eq(h_send(chain_conn(cs, i), "#w%d LOCK dc%d owner=o%d wait=inf", i, i - 1, i), 0);
        if (i == 1 || chain_conn(cs, i - 1) != chain_conn(cs, i))
            H_REQ(chain_conn(cs, i), "OK", "PING"); /* every wait of this connection has started */
    }
}

/* ms until p answers a PING sent now. */
static int64_t ping_ms(struct h_conn *p)
{
    int64_t t0 = h_now_ms();

    H_REQ(p, "OK", "PING");
    return h_now_ms() - t0;
}

START_TEST(test_deadlock_long_chain)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--max-waits", "6000"));
    struct h_conn *cs[CHAIN_CONNS], *r = H_CLIENT(d, "name=r ttl=120s"), *q = H_CLIENT(d, "name=q");
    struct h_conn *p = H_CLIENT(d, "name=p");

    for (int k = 0; k < CHAIN_CONNS; k++)
        cs[k] = H_CLIENT(d, "name=chain ttl=120s");
    H_LOCK_NEW(r, "dc0");
    chain_holds(cs);
    chain_waits(cs);

    /* r -> o3000 -> ... -> o1 -> r: found. */
    H_REQ(r, "ERR DEADLOCK%*", "LOCK dc%d wait=10s", CHAIN_NEAR);
    /* q -> o12000 -> ... -> o1 -> r, who waits for nothing: the search ends at
     * the budget, and does not hold up the other clients meanwhile. */
    for (int k = 0; k < 3; k++) {
        int64_t ms;

        ck_assert_int_eq(h_send(q, "LOCK dc%d wait=300ms", CHAIN_LEN), 0);
        h_sleep_ms(5);
        ms = ping_ms(p);
        ck_assert_msg(ms < 200, "a PING waited %lld ms behind a deadlock search", (long long)ms);
        H_REPLY(q, "TIMEOUT", H_TIMEOUT);
    }
    /* r -> o12000 -> ... -> o1 -> r is a cycle past the budget: r waits, unchecked. */
    H_REQ(r, "TIMEOUT", "LOCK dc%d wait=300ms", CHAIN_LEN);
    H_REQ(r, "ERR DEADLOCK%*", "LOCK dc%d wait=10s", CHAIN_NEAR);
}
END_TEST

/* ------------------------------------------------------------ descriptors */

#define EMFILE_CONNS 48 /* connections opened past the daemon's limit of descriptors */

/* utime + stime of pid, in clock ticks. */
static long long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ut = 0, st = 0;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL || fgets(buf, sizeof buf, f) == NULL || (p = strrchr(buf, ')')) == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        H_FAIL("cannot read %s", path);
    fclose(f);
    return (long long)(ut + st);
}

/* Descriptors pid has open. */
static int open_fds(pid_t pid)
{
    char path[64];
    struct dirent *e;
    int n = 0;
    DIR *dir;

    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    if ((dir = opendir(path)) == NULL)
        H_FAIL("cannot read %s", path);
    while ((e = readdir(dir)) != NULL)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

/* Out of descriptors, dlockd pauses accepting instead of spinning on accept,
 * logs it once, and accepts again once descriptors are free. */
START_TEST(test_emfile)
{
    struct h_dlockd *d = h_dlockd_start(R->port, NULL);
    struct h_conn *c[EMFILE_CONNS], *p;
    struct rlimit rl;
    long long ticks;

    rl.rlim_cur = rl.rlim_max = (rlim_t)open_fds(d->pid) + 8;
    ck_assert_int_eq(prlimit(d->pid, RLIMIT_NOFILE, &rl, NULL), 0);
    for (int i = 0; i < EMFILE_CONNS; i++)
        c[i] = H_CONNECT(d->port); /* the kernel completes them: the backlog holds them */
    H_REQ(c[0], "OK", "PING");
    ck_assert_int_ge(h_log_wait(d, H_ARGS("server: accept: Too many open files"), 1, 2000), 1);

    ticks = cpu_ticks(d->pid);
    h_sleep_ms(2000);
    ticks = cpu_ticks(d->pid) - ticks;
    ck_assert_msg(ticks * 5 < 2 * sysconf(_SC_CLK_TCK), "dlockd used %lld ticks of CPU in 2 s out of descriptors",
                  ticks);
    ck_assert_int_eq(h_log_count(d, H_ARGS("server: accept:")), 1);

    for (int i = 0; i < EMFILE_CONNS; i++)
        h_close(c[i]);
    p = H_CONNECT(d->port);
    H_REQ(p, "OK", "PING");
    ck_assert_int_eq(h_log_count(d, H_ARGS("server: accepting connections again")), 1);
    ck_assert_int_eq(h_log_count(d, H_ARGS("server: accept:")), 1);
}
END_TEST

/* The soft limit of descriptors that pid has. */
static rlim_t fd_limit(pid_t pid, rlim_t *hard)
{
    struct rlimit rl;

    ck_assert_int_eq(prlimit(pid, RLIMIT_NOFILE, NULL, &rl), 0);
    *hard = rl.rlim_max;
    return rl.rlim_cur;
}

/* Started with a soft limit of 256, dlockd raises it to maxclients + 32, or
 * to the hard limit, saying that maxclients cannot be reached. */
START_TEST(test_fd_limit)
{
    const char *const args[][3] = { { "--maxclients", "2000", NULL }, { "--maxclients", "1000000", NULL } };
    struct rlimit mine, low;

    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &mine), 0);
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        rlim_t want = (rlim_t)atoll(args[i][1]) + 32, got, hard;
        struct h_dlockd *d;

        low = mine;
        low.rlim_cur = 256;
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
        d = h_dlockd_start(R->port, args[i]);
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &mine), 0);
        got = fd_limit(d->pid, &hard);
        if (hard >= want)
            ck_assert_msg(got >= want, "maxclients %s: soft limit %llu", args[i][1], (unsigned long long)got);
        else
            ck_assert_msg(got == hard && h_log_count(d, H_ARGS("maxclients", args[i][1], "descriptors")) == 1,
                          "maxclients %s: soft limit %llu of %llu, and no warning", args[i][1],
                          (unsigned long long)got, (unsigned long long)hard);
    }
}
END_TEST

static Suite *server_suite(void)
{
    Suite *s = suite_create("server");
    TCase *graph = tcase_create("graph");
    TCase *fds = tcase_create("descriptors");

    tcase_add_checked_fixture(graph, h_setup_redis, h_teardown);
    tcase_set_timeout(graph, 120);
    tcase_add_test(graph, test_deadlock_long_chain);
    suite_add_tcase(s, graph);

    tcase_add_checked_fixture(fds, h_setup_redis, h_teardown);
    tcase_set_timeout(fds, 60);
    tcase_add_test(fds, test_emfile);
    tcase_add_test(fds, test_fd_limit);
    suite_add_tcase(s, fds);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(server_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
