/* check_server.c - listeners, admin endpoint and wait-for graph under attack: EMFILE, protected mode, deep chains. */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
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
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--max-waits", "6000", "--max-holds", "20000"));
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

/* The lowest descriptor number pid does not use: a soft limit there leaves it none. */
static int lowest_free_fd(pid_t pid)
{
    char path[64];

    for (int fd = 0;; fd++) {
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
        if (access(path, F_OK) != 0)
            return fd;
    }
}

/* Out of descriptors, dlockd pauses accepting instead of spinning on accept,
 * logs it once, and accepts again once descriptors are free. (Short of that,
 * a client past the descriptors kept for Redis gets ERR LIMIT: test_fd_reserve
 * in check_admin_limits.c.) */
START_TEST(test_emfile)
{
    struct h_dlockd *d = h_dlockd_start(R->port, NULL);
    struct h_conn *c[EMFILE_CONNS], *p;
    struct rlimit rl, old;
    long long ticks;

    c[0] = H_CONNECT(d->port);
    H_REQ(c[0], "OK", "PING");
    ck_assert_int_eq(prlimit(d->pid, RLIMIT_NOFILE, NULL, &old), 0);
    rl.rlim_cur = (rlim_t)lowest_free_fd(d->pid);
    rl.rlim_max = old.rlim_max;
    ck_assert_int_eq(prlimit(d->pid, RLIMIT_NOFILE, &rl, NULL), 0);
    for (int i = 1; i < EMFILE_CONNS; i++)
        c[i] = H_CONNECT(d->port); /* the kernel completes them: the backlog holds them */
    H_REQ(c[0], "OK", "PING");
    ck_assert_int_ge(h_log_wait(d, H_ARGS("server: accept: Too many open files"), 1, 2000), 1);

    ticks = cpu_ticks(d->pid);
    h_sleep_ms(2000);
    ticks = cpu_ticks(d->pid) - ticks;
    ck_assert_msg(ticks * 5 < 2 * sysconf(_SC_CLK_TCK), "dlockd used %lld ticks of CPU in 2 s out of descriptors",
                  ticks);
    ck_assert_int_eq(h_log_count(d, H_ARGS("server: accept:")), 1);

    ck_assert_int_eq(prlimit(d->pid, RLIMIT_NOFILE, &old, NULL), 0);
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

/* ------------------------------------------------------------ protected mode */

/* Addresses are judged by value, not by how they are spelt. */
START_TEST(test_protected_by_value)
{
    static const char *const loopback[] = { "::ffff:127.0.0.1:7997", "0x7f000001:7997", "127.1:7997", "::1:7997" };
    static const char *const public[] = { "0.0.0.0:7997", ":::7997", "::ffff:0.0.0.0:7997", "0:7997" };
    char out[4096];

    for (size_t i = 0; i < sizeof loopback / sizeof loopback[0]; i++) {
        H_RUN(out, 0, "--test-config", "--listen", loopback[i], "--admin-listen", loopback[i]);
        ck_assert_str_eq(out, "OK\n");
    }
    for (size_t i = 0; i < sizeof public / sizeof public[0]; i++) {
        H_RUN(out, 1, "--test-config", "--listen", public[i]);
        ck_assert_msg(strstr(out, "listen: a non-loopback address needs requirepass") && h_count_lines(out) == 1,
                      "--listen %s: '%s'", public[i], out);
        H_RUN(out, 0, "--test-config", "--listen", public[i], "--requirepass", "x");
    }
}
END_TEST

/* The path of the dlockd under test: $DLOCKD, or daemon/dlockd of this build tree. */
static void dlockd_path(char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    char *slash;

    if (getenv("DLOCKD") != NULL && *getenv("DLOCKD") != '\0') {
        snprintf(buf, len, "%s", getenv("DLOCKD"));
        return;
    }
    if (n <= 0)
        H_FAIL("readlink /proc/self/exe: %s", strerror(errno));
    self[n] = '\0';
    for (int up = 0; up < 2; up++)
        if ((slash = strrchr(self, '/')) != NULL)
            *slash = '\0';
    if ((size_t)snprintf(buf, len, "%.*s/daemon/dlockd", (int)(len - 16), self) >= len)
        H_FAIL("path too long: %s", self);
}

/* A daemon started by systemd's rules for socket activation. */
struct activated {
    pid_t pid;
    int port;      /* of the socket passed as descriptor 3 */
    char log[300]; /* its stdout and stderr */
};

/* The child half of activate(): never returns. */
static void activate_child(int sock, const char *log, char *const argv[])
{
    int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    char pid[24];

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (out < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0 || dup2(sock, 3) < 0)
        _exit(126);
    for (int fd = 4; fd < 1024; fd++)
        close(fd);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    setenv("LISTEN_PID", pid, 1);
    setenv("LISTEN_FDS", "1", 1);
    execv(argv[0], argv);
    _exit(127);
}

/* Starts dlockd with args after it, and a TCP socket listening on host (IPv4) as descriptor 3. */
static void activate(struct activated *a, const char *host, const char *const *args)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    char path[PATH_MAX], dir[256], *argv[16] = { path };
    int sock = socket(AF_INET, SOCK_STREAM, 0), n = 1;

    dlockd_path(path, sizeof path);
    for (size_t i = 0; args[i] != NULL && n < 15; i++)
        argv[n++] = (char *)args[i];
    h_tmpdir(dir, sizeof dir, "activated");
    snprintf(a->log, sizeof a->log, "%s/dlockd.log", dir);
    a->port = h_free_port();
    sa.sin_port = htons((uint16_t)a->port);
    ck_assert_int_eq(inet_pton(AF_INET, host, &sa.sin_addr), 1);
    ck_assert_int_eq(setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &(int){ 1 }, sizeof(int)), 0);
    if (bind(sock, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(sock, 16) < 0)
        H_FAIL("cannot listen on %s:%d: %s", host, a->port, strerror(errno));
    if ((a->pid = fork()) == 0)
        activate_child(sock, a->log, argv);
    close(sock);
    ck_assert_int_gt(a->pid, 0);
}

/* Waits up to ms for a to exit; its wait status, or -1 (it is then killed). */
static int activated_exit(struct activated *a, int ms)
{
    int st;

    for (int64_t end = h_now_ms() + ms; h_now_ms() < end; h_sleep_ms(20))
        if (waitpid(a->pid, &st, WNOHANG) == a->pid)
            return st;
    kill(a->pid, SIGKILL);
    waitpid(a->pid, &st, 0);
    return -1;
}

/* Lines of a's log that contain needle. */
static int activated_lines(const struct activated *a, const char *needle)
{
    char line[1024];
    FILE *f = fopen(a->log, "r");
    int n = 0;

    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        n += strstr(line, needle) != NULL;
    if (f != NULL)
        fclose(f);
    return n;
}

/* A socket from systemd is judged as a listen address is: 0.0.0.0 without
 * requirepass refuses to start, and a reload cannot drop requirepass then. */
START_TEST(test_protected_systemd)
{
    struct activated a;
    char redis[64], conf[300], dir[256];
    struct h_conn *c;
    int st;

    snprintf(redis, sizeof redis, "127.0.0.1:%d", R->port);
    activate(&a, "0.0.0.0", H_ARGS("--redis", redis));
    st = activated_exit(&a, 5000);
    ck_assert_msg(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %#x", st);
    ck_assert_int_eq(activated_lines(&a, "protected mode: socket 3 from systemd (bound to 0.0.0.0:"), 1);
    ck_assert_int_eq(activated_lines(&a, "warn"), 1);

    activate(&a, "127.0.0.1", H_ARGS("--redis", redis));
    c = H_CONNECT(a.port);
    H_REQ(c, "OK", "PING");
    H_LOCK_NEW(c, "pa");
    kill(a.pid, SIGTERM);
    st = activated_exit(&a, 5000);
    ck_assert_msg(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);

    h_tmpdir(dir, sizeof dir, "conf");
    snprintf(conf, sizeof conf, "%s/dlockd.conf", dir);
    h_write_file(conf, "requirepass s3cret\n");
    activate(&a, "0.0.0.0", H_ARGS(conf, "--redis", redis));
    c = H_CONNECT(a.port);
    H_REQ(c, "ERR NOAUTH%*", "LOCK pb");
    h_write_file(conf, "# requirepass dropped\n");
    kill(a.pid, SIGHUP);
    for (int64_t end = h_now_ms() + 3000; h_now_ms() < end && activated_lines(&a, "reload failed") == 0;)
        h_sleep_ms(20);
    ck_assert_int_eq(activated_lines(&a, "config: reload failed: requirepass"), 1);
    c = H_CONNECT(a.port);
    H_REQ(c, "ERR NOAUTH%*", "LOCK pb");
    H_REQ(c, "OK", "AUTH s3cret");
    H_LOCK_NEW(c, "pb");
    kill(a.pid, SIGTERM);
    st = activated_exit(&a, 5000);
    ck_assert_msg(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %#x", st);
}
END_TEST

/* ------------------------------------------------------------ the admin endpoint */

#define FLOOD_CONNS 8               /* connections that each send FLOOD_BYTES of headers */
#define FLOOD_BYTES (1024 * 1024)

/* Resident memory of pid, in kB. */
static long long rss_kb(pid_t pid)
{
    char path[64], line[256];
    long long kb = -1;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        H_FAIL("cannot read %s", path);
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* protected mode covers admin-listen as it does listen. */
START_TEST(test_admin_protected)
{
    char out[4096], admin[64];

    snprintf(admin, sizeof admin, "0.0.0.0:%d", h_free_port());
    H_RUN(out, 1, "--listen", "127.0.0.1:7996", "--admin-listen", admin);
    ck_assert_msg(strstr(out, "admin-listen: a non-loopback address needs requirepass") && h_count_lines(out) == 1, "'%s'",
                  out);
    H_RUN(out, 0, "--test-config", "--admin-listen", admin, "--requirepass", "x");
    ck_assert_str_eq(out, "OK\n");
}
END_TEST

/* Megabytes of headers are refused after a few KiB without being buffered,
 * a request that never ends is closed, and only GET and HEAD are served. */
START_TEST(test_admin_limits)
{
    int port = h_free_port();
    char admin[64], *pad = malloc(FLOOD_BYTES);
    struct h_dlockd *d;
    struct h_conn *c[FLOOD_CONNS];
    long long rss;
    const char *l;
    int64_t t0;

    snprintf(admin, sizeof admin, "127.0.0.1:%d", port);
    d = h_dlockd_start(R->port, H_ARGS("--admin-listen", admin));
    ck_assert_int_eq(h_http_get(port, "/metrics", NULL, NULL, H_TIMEOUT), 200);
    memset(pad, 'a', FLOOD_BYTES);
    rss = rss_kb(d->pid);
    for (int i = 0; i < FLOOD_CONNS; i++) {
        c[i] = H_CONNECT(port);
        ck_assert_int_eq(setsockopt(c[i]->fd, SOL_SOCKET, SO_SNDTIMEO, &(struct timeval){ 2, 0 },
                                    sizeof(struct timeval)), 0);
        h_send_raw(c[i], "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ", 37);
        h_send_raw(c[i], pad, FLOOD_BYTES); /* fails once dlockd has closed */
    }
    for (int i = 0; i < FLOOD_CONNS; i++) {
        l = h_line(c[i], 2000);
        ck_assert_msg(l != NULL ? h_match(l, "HTTP/1.1 4%d %*") : c[i]->eof, "headers of 1 MiB: '%s'",
                      l ? l : "(nothing)");
    }
    ck_assert_msg(rss_kb(d->pid) - rss < 4096, "RSS grew from %lld to %lld kB", rss, rss_kb(d->pid));
    free(pad);

    c[0] = H_CONNECT(port);
    h_send_raw(c[0], "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n", 46);
    l = h_line(c[0], H_TIMEOUT);
    ck_assert_msg(l != NULL && (h_match(l, "HTTP/1.%d 405 %*") || h_match(l, "HTTP/1.%d 501 %*")), "POST: '%s'",
                  l ? l : "(nothing)");

    c[0] = H_CONNECT(port);
    h_send_raw(c[0], "GET /metrics HTTP/1.1\r\n", 23);
    t0 = h_now_ms();
    ck_assert_msg(h_wait_eof(c[0], 8000), "an unfinished request still open after 8 s");
    ck_assert_msg(h_now_ms() - t0 >= 3000, "closed after %lld ms", (long long)(h_now_ms() - t0));
}
END_TEST

static Suite *server_suite(void)
{
    Suite *s = suite_create("server");
    TCase *graph = tcase_create("graph");
    TCase *fds = tcase_create("descriptors");
    TCase *prot = tcase_create("protected");

    tcase_add_checked_fixture(graph, h_setup_redis, h_teardown);
    tcase_set_timeout(graph, 120);
    tcase_add_test(graph, test_deadlock_long_chain);
    suite_add_tcase(s, graph);

    tcase_add_checked_fixture(fds, h_setup_redis, h_teardown);
    tcase_set_timeout(fds, 60);
    tcase_add_test(fds, test_emfile);
    tcase_add_test(fds, test_fd_limit);
    suite_add_tcase(s, fds);

    tcase_add_checked_fixture(prot, h_setup_redis, h_teardown);
    tcase_set_timeout(prot, 60);
    tcase_add_test(prot, test_protected_by_value);
    tcase_add_test(prot, test_protected_systemd);
    tcase_add_test(prot, test_admin_protected);
    tcase_add_test(prot, test_admin_limits);
    suite_add_tcase(s, prot);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(server_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
