/* check_admin_limits.c - no endpoint one client can use to starve the rest: the admin endpoint's
 * connection cap and password, accepting paused without descriptors, descriptors kept for
 * Redis, censuses bounded so that renewals keep getting through. */
#include "harness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define ADMINPASS "b0ss"
#define SLOW 40        /* slowloris connections: more than the default admin-maxclients */
#define FLOOD 300      /* client connections: more than the lowered descriptor limit */
#define NOFILE 200     /* that limit */
#define CPU_MAX_MS 600 /* CPU a paused daemon may use over CPU_WINDOW_MS, generous for a loaded machine */
#define CPU_WINDOW_MS 3000

/* ---------------------------------------------------------------- helpers */

static char admin_addr[32];

/* A dlockd on R with admin-listen on *port and extra (may be NULL) after it. */
static struct h_dlockd *admin_daemon(int *port, const char *const *extra)
{
    const char *args[H_MAX_EXTRA] = { "--admin-listen", admin_addr };
    int n = 2;

    *port = h_free_port();
    snprintf(admin_addr, sizeof admin_addr, "127.0.0.1:%d", *port);
    for (size_t i = 0; extra && extra[i] && n < H_MAX_EXTRA - 1; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    return h_dlockd_start(R->port, args);
}

/* GET path (with auth, may be NULL) until it answers want; 1, or 0 after timeout_ms. */
static int http_until(int port, const char *path, const char *auth, int want, int timeout_ms)
{
    int64_t end = h_now_ms() + timeout_ms;

    do {
        if (h_http_get_auth(port, path, auth, NULL, NULL, 2000) == want)
            return 1;
        h_sleep_ms(100);
    } while (h_now_ms() < end);
    return 0;
}

/* CPU time the process has used, user and system, in ms. */
static long long cpu_ms(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long utime, stime;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL || fgets(buf, sizeof buf, f) == NULL)
        H_FAIL("cannot read %s", path);
    fclose(f);
    /* After the command name in parentheses: state is field 3, utime 14, stime 15. */
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
        H_FAIL("cannot parse %s", path);
    return (long long)(utime + stime) * 1000 / sysconf(_SC_CLK_TCK);
}

/* The lowest descriptor number the process does not use: a soft limit there leaves it none. */
static int lowest_free_fd(pid_t pid)
{
    char path[64];

    for (int fd = 0;; fd++) {
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
        if (access(path, F_OK) != 0)
            return fd;
    }
}

static void set_nofile(pid_t pid, rlim_t soft, rlim_t hard)
{
    struct rlimit rl = { soft, hard };

    if (prlimit(pid, RLIMIT_NOFILE, &rl, NULL) != 0)
        H_FAIL("prlimit %d: %s", (int)pid, strerror(errno));
}

/* CPU ms d uses over CPU_WINDOW_MS. */
static long long cpu_over_window(const struct h_dlockd *d)
{
    long long t0 = cpu_ms(d->pid);

    h_sleep_ms(CPU_WINDOW_MS);
    return cpu_ms(d->pid) - t0;
}

/* ---------------------------------------------------------------- the admin endpoint */

/* More connections than admin-maxclients that never finish a request: the
 * endpoint answers a connection past the cap 503 at once, and /healthz again
 * once they go. */
START_TEST(test_admin_slowloris)
{
    static const char partial[] = "GET /healthz HTTP/1.1\r\nHost: x\r\n";
    struct h_conn *slow[SLOW], *c;
    char *body = NULL;
    int ap, code;
    struct h_dlockd *d = admin_daemon(&ap, NULL);

    ck_assert(http_until(ap, "/healthz", NULL, 200, 5000));
    for (int i = 0; i < SLOW; i++) {
        ck_assert_ptr_nonnull(slow[i] = h_connect_try(ap));
        ck_assert_int_eq(h_send_raw(slow[i], partial, sizeof partial - 1), 0);
    }
    h_sleep_ms(500);
    code = h_http_get(ap, "/healthz", NULL, &body, 3000);
    ck_assert_msg(code == 503 && strstr(body, "admin-maxclients"), "past the cap: %d '%s'", code, body ? body : "");
    free(body);
    /* The protocol port is not the admin endpoint's to starve. */
    c = H_CLIENT(d, "");
    H_REQ(c, "OK", "PING");
    for (int i = 0; i < SLOW; i++)
        h_close(slow[i]);
    ck_assert_msg(http_until(ap, "/healthz", NULL, 200, 5000), "/healthz not served once the slow clients left");
}
END_TEST

/* /locks and /sessions always need adminpass; with adminpass set, every path does. */
START_TEST(test_admin_password)
{
    int open_port, closed_port;
    char *body = NULL;

    admin_daemon(&open_port, NULL);
    ck_assert_int_eq(h_http_get(open_port, "/locks", NULL, &body, H_TIMEOUT), 403);
    ck_assert_msg(strstr(body, "adminpass"), "'%s'", body);
    free(body);
    ck_assert_int_eq(h_http_get(open_port, "/sessions", NULL, NULL, H_TIMEOUT), 403);
    ck_assert_int_eq(h_http_get_auth(open_port, "/locks", "Bearer x", NULL, NULL, H_TIMEOUT), 403);
    ck_assert(http_until(open_port, "/healthz", NULL, 200, 5000));
    ck_assert_int_eq(h_http_get(open_port, "/metrics", NULL, NULL, H_TIMEOUT), 200);

    admin_daemon(&closed_port, H_ARGS("--adminpass", ADMINPASS, "--auth-fail-delay", "0"));
    ck_assert(http_until(closed_port, "/healthz", "Bearer " ADMINPASS, 200, 5000));
    ck_assert_int_eq(h_http_get(closed_port, "/healthz", NULL, NULL, H_TIMEOUT), 401);
    ck_assert_int_eq(h_http_get(closed_port, "/metrics", NULL, NULL, H_TIMEOUT), 401);
    ck_assert_int_eq(h_http_get(closed_port, "/status", NULL, NULL, H_TIMEOUT), 401);
    ck_assert_int_eq(h_http_get(closed_port, "/locks", NULL, NULL, H_TIMEOUT), 401);
    ck_assert_int_eq(h_http_get(closed_port, "/nope", NULL, NULL, H_TIMEOUT), 401);
    ck_assert_int_eq(h_http_get_auth(closed_port, "/locks", "Bearer wrong", NULL, NULL, H_TIMEOUT), 401);
    ck_assert_int_eq(h_http_get_auth(closed_port, "/locks", "Bearer " ADMINPASS "x", NULL, NULL, H_TIMEOUT), 401);
    ck_assert_int_eq(h_http_get_auth(closed_port, "/locks", "Bearer " ADMINPASS, NULL, &body, H_TIMEOUT), 200);
    ck_assert_msg(strstr(body, "\"names\":"), "'%s'", body);
    free(body);
    /* Basic: any user, adminpass as the password ("op:b0ss"). */
    ck_assert_int_eq(h_http_get_auth(closed_port, "/sessions", "Basic b3A6YjBzcw==", NULL, NULL, H_TIMEOUT), 200);
    ck_assert_int_eq(h_http_get_auth(closed_port, "/metrics", "Basic b3A6YjBzcw==", NULL, NULL, H_TIMEOUT), 200);
    ck_assert_int_eq(h_http_get_auth(closed_port, "/metrics", "Basic b3A6d3Jvbmc=", NULL, NULL, H_TIMEOUT), 401);
}
END_TEST

/* ---------------------------------------------------------------- descriptors */

/* No descriptor left at all (the limit lowered under the daemon): accept
 * fails, and every listener pauses instead of spinning; once descriptors
 * are back, the connections that waited are served. */
START_TEST(test_emfile_pauses)
{
    struct h_conn *waiting[4], *c;
    long long used;
    int ap;
    struct h_dlockd *d = admin_daemon(&ap, NULL);

    ck_assert(http_until(ap, "/healthz", NULL, 200, 5000));
    h_sleep_ms(300); /* that connection's descriptor is free again: no hole for a client to take */
    set_nofile(d->pid, (rlim_t)lowest_free_fd(d->pid), 20000);
    for (int i = 0; i < 4; i++)
        ck_assert_ptr_nonnull(waiting[i] = h_connect_try(i % 2 ? ap : d->port));
    h_sleep_ms(300);
    used = cpu_over_window(d);
    ck_assert_msg(used < CPU_MAX_MS, "the daemon used %lld ms of CPU in %d ms without descriptors", used, CPU_WINDOW_MS);
    ck_assert_int_ge(h_log_count(d, H_ARGS("accept: Too many open files; accepting paused")), 1);
    ck_assert_int_le(h_log_count(d, H_ARGS("accept: Too many open files")), 2);
    set_nofile(d->pid, 20000, 20000);
    c = waiting[0];
    H_REQ(c, "OK", "PING");
    ck_assert(http_until(ap, "/healthz", NULL, 200, 5000));
    for (int i = 0; i < 4; i++)
        h_close(waiting[i]);
}
END_TEST

/* Clients take every descriptor they may (the limit lowered to NOFILE):
 * those past it are refused, the daemon does not spin, and its Redis link
 * reconnects after a restart of Redis while they stay. */
START_TEST(test_fd_reserve_for_redis)
{
    struct h_conn *flood[FLOOD], *c;
    int ap, refused = 0;
    long long used;
    const char *r;
    /* the restart closes the failover gate (/healthz 503 meanwhile): a short one */
    struct h_dlockd *d = admin_daemon(&ap, H_ARGS("--failover-delay", "1s"));

    c = H_CLIENT(d, "");
    set_nofile(d->pid, NOFILE, NOFILE);
    for (int i = 0; i < FLOOD; i++)
        flood[i] = h_connect_try(d->port);
    for (int i = 0; i < FLOOD; i++)
        if (flood[i] && (r = h_line(flood[i], 50)) != NULL && h_match(r, "ERR LIMIT %*"))
            refused++;
    h_redis_restart(R);
    h_wait_info(c, "\"backend\":\"up\"", 15000);
    ck_assert(http_until(ap, "/healthz", NULL, 200, 10000));
    ck_assert_msg(refused > 0, "no client refused past %d descriptors", NOFILE);
    used = cpu_over_window(d);
    ck_assert_msg(used < CPU_MAX_MS, "the daemon used %lld ms of CPU in %d ms", used, CPU_WINDOW_MS);
    H_REQ(c, "OK", "PING");
    for (int i = 0; i < FLOOD; i++)
        if (flood[i])
            h_close(flood[i]);
}
END_TEST

/* ---------------------------------------------------------------- censuses */

#define NAMES 3000     /* held names for the censuses to walk */
#define FILLER "400000" /* other keys in Redis, for their SCANs to look at */
#define HAMMERS 6      /* processes asking /locks at once */
#define HAMMER_MS 8000 /* for this long */

/* Holds NAMES names on c, in pipelined bursts. */
static void hold_many(struct h_conn *c)
{
    for (int i = 0; i < NAMES; i += 100) {
        for (int j = i; j < i + 100; j++)
            ck_assert_int_eq(h_send(c, "LOCK many-%05d", j), 0);
        for (int j = i; j < i + 100; j++)
            H_REPLY(c, "OK token=%d count=1", 10000);
    }
}

/* A process that asks /locks?limit=1000 again and again for HAMMER_MS, giving up on each after 20 ms. */
static pid_t hammer(int port)
{
    pid_t pid = fork();

    if (pid == 0) {
        int64_t end = h_now_ms() + HAMMER_MS;

        while (h_now_ms() < end)
            h_http_get_auth(port, "/locks?limit=1000", "Bearer " ADMINPASS, NULL, NULL, 20);
        _exit(0);
    }
    ck_assert_int_gt(pid, 0);
    return pid;
}

/* Censuses over many names, asked faster than they can be answered, leave a
 * normal client's requests and the renewals of its holds on time. */
START_TEST(test_census_no_jeopardy)
{
    struct h_conn *owner, *c;
    pid_t pids[HAMMERS];
    int ap, st;
    struct h_dlockd *d = admin_daemon(&ap, H_ARGS("--adminpass", ADMINPASS, "--lock-lease", "2s", "--backend-timeout", "500ms"));

    free(h_redis_cmd(R->port, "EVAL", "for i = 1, tonumber(ARGV[1]) do redis.call('SET', 'filler:' .. i, i) end",
                     "0", FILLER, NULL));
    ck_assert_int_ge(h_redis_int(R->port, "DBSIZE", NULL), atoi(FILLER));
    owner = H_CLIENT(d, "");
    hold_many(owner);
    c = H_CLIENT(d, "");
    H_LOCK_NEW(c, "normal");
    for (int i = 0; i < HAMMERS; i++)
        pids[i] = hammer(ap);
    for (int i = 0; i < HAMMERS; i++)
        while (waitpid(pids[i], &st, WNOHANG) == 0) {
            H_REQ(c, "OK {%*}", "STATUS normal"); /* a request to Redis, on time meanwhile */
            H_REQ(owner, "OK", "PING");
            h_sleep_ms(500);
        }
    ck_assert_msg(h_event(c, "* JEOPARDY%*", 0) == NULL && h_event(owner, "* JEOPARDY%*", 0) == NULL,
                  "a session was put in jeopardy by censuses");
    ck_assert_int_eq(h_log_count(d, H_ARGS("in jeopardy")), 0);
    H_REQ(c, "OK%*", "UNLOCK normal");
}
END_TEST

static Suite *limits_suite(void)
{
    Suite *s = suite_create("admin_limits");
    TCase *tc = tcase_create("admin_limits");

    tcase_add_checked_fixture(tc, h_setup_redis, h_teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_admin_slowloris);
    tcase_add_test(tc, test_admin_password);
    tcase_add_test(tc, test_emfile_pauses);
    tcase_add_test(tc, test_fd_reserve_for_redis);
    tcase_add_test(tc, test_census_no_jeopardy);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return h_run_suite(limits_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
