/* check_ops.c - integration tests of the operations features against a real dlockd:
 * systemd notify, SIGHUP reload, clean shutdown, the admin HTTP endpoint, the
 * secure defaults (AUTH, limits, protected mode, unix sockets) and log lines. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


static int64_t mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ------------------------------------------------------------ systemd notify */

/* A unix datagram socket standing in for systemd's notify socket. */
struct notifier {
    int fd;
    char name[108];  /* what NOTIFY_SOCKET says: a path, or "@name" (abstract namespace) */
    char env[160];   /* "NOTIFY_SOCKET=<name>" */
};

static void notifier_open(struct notifier *n, int abstract)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char dir[256];
    socklen_t len;

    if (abstract) {
        snprintf(n->name, sizeof n->name, "@dlockd-check-ops-%d-%lld", (int)getpid(), (long long)mono_us());
    } else {
        h_tmpdir(dir, sizeof dir, "notify");
        if ((size_t)snprintf(n->name, sizeof n->name, "%s/n.sock", dir) >= sizeof n->name)
            H_FAIL("notify socket path too long under %s", dir);
    }
    memcpy(sa.sun_path, n->name, strlen(n->name));
    if (abstract)
        sa.sun_path[0] = '\0';
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(n->name));
    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (n->fd < 0 || bind(n->fd, (struct sockaddr *)&sa, len) < 0)
        H_FAIL("notify socket %s: %s", n->name, strerror(errno));
    snprintf(n->env, sizeof n->env, "NOTIFY_SOCKET=%s", n->name);
}

/* The next datagram within timeout_ms into buf (NUL-terminated); 0, or -1 on timeout. */
static int notify_recv(struct notifier *n, char *buf, size_t cap, int timeout_ms)
{
    struct pollfd p = {n->fd, POLLIN, 0};
    ssize_t r;

    if (poll(&p, 1, timeout_ms > 0 ? timeout_ms : 0) <= 0)
        return -1;
    r = recv(n->fd, buf, cap - 1, 0);
    if (r < 0)
        return -1;
    buf[r] = '\0';
    return 0;
}

/* 1 when msg (newline-separated assignments) has exactly the line `line`. */
static int has_line(const char *msg, const char *line)
{
    size_t n = strlen(line);

    for (const char *p = msg; p != NULL && *p != '\0'; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

/* The value of KEY= in msg (up to the end of its line), or NULL when absent. */
static const char *field(const char *msg, const char *key)
{
    size_t n = strlen(key);

    for (const char *p = msg; p != NULL && *p != '\0'; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, key, n) == 0 && p[n] == '=')
            return p + n + 1;
    return NULL;
}

/* The value of KEY= in msg as a number; -1 when absent or not a number. */
static long long field_int(const char *msg, const char *key)
{
    const char *v = field(msg, key);
    char *end;
    long long n;

    if (v == NULL)
        return -1;
    n = strtoll(v, &end, 10);
    return end == v || (*end != '\n' && *end != '\0') ? -1 : n;
}

/* 1 when every line of msg is WATCHDOG=1 or STATUS=...: a datagram that changes no state. */
static int stateless(const char *msg)
{
    for (const char *p = msg; p != NULL && *p != '\0'; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, "WATCHDOG=1", 10) != 0 && strncmp(p, "STATUS=", 7) != 0)
            return 0;
    return 1;
}

/*
 * Expects a datagram with the line want within timeout_ms and copies it to buf.
 * Only stateless datagrams (WATCHDOG=1, STATUS=) may come before it.
 */
#define NOTIFY_EXPECT(n, want, buf, timeout_ms) notify_expect_at(__FILE__, __LINE__, (n), (want), (buf), sizeof(buf), (timeout_ms))
static void notify_expect_at(const char *file, int line, struct notifier *n, const char *want, char *buf, size_t cap,
                             int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    for (;;) {
        if (notify_recv(n, buf, cap, (int)(deadline - h_now_ms())) < 0)
            h_fail_at(file, line, "no notify datagram with %s within %d ms", want, timeout_ms);
        if (has_line(buf, want))
            return;
        if (!stateless(buf))
            h_fail_at(file, line, "waiting for %s, got the datagram '%s' first", want, buf);
    }
}

START_TEST(test_notify)
{
    struct notifier n;
    struct h_dlockd *d;
    struct h_conn *c;
    char msg[1024];
    int64_t t0, before, after;
    int watchdogs = 0;
    long long mono;

    notifier_open(&n, 0);
    d = h_dlockd_start_with(R->port, NULL, H_ARGS(n.env, "WATCHDOG_USEC=1000000"), NULL);
    NOTIFY_EXPECT(&n, "READY=1", msg, 5000);
    ck_assert_msg(field(msg, "STATUS") != NULL, "READY=1 without STATUS=: '%s'", msg);

    /* WATCHDOG=1 every WATCHDOG_USEC/2 = 500 ms, and nothing else meanwhile. */
    for (t0 = h_now_ms(); h_now_ms() < t0 + 2000;) {
        if (notify_recv(&n, msg, sizeof msg, (int)(t0 + 2000 - h_now_ms())) < 0)
            break;
        ck_assert_msg(stateless(msg), "unexpected datagram while idle: '%s'", msg);
        watchdogs += has_line(msg, "WATCHDOG=1");
    }
    ck_assert_msg(watchdogs >= 2 && watchdogs <= 8, "%d WATCHDOG=1 in 2 s with WATCHDOG_USEC=1000000", watchdogs);

    /* SIGHUP: RELOADING=1 with MONOTONIC_USEC= (CLOCK_MONOTONIC, as systemd wants), then READY=1. */
    before = mono_us();
    ck_assert_int_eq(kill(d->pid, SIGHUP), 0);
    NOTIFY_EXPECT(&n, "RELOADING=1", msg, 5000);
    after = mono_us();
    mono = field_int(msg, "MONOTONIC_USEC");
    ck_assert_msg(mono >= before && mono <= after, "MONOTONIC_USEC=%lld not between %lld and %lld ('%s')", mono,
                  (long long)before, (long long)after, msg);
    NOTIFY_EXPECT(&n, "READY=1", msg, 5000);
    c = H_CONNECT(d->port);
    H_REQ(c, "OK", "PING");

    /* SIGTERM: STOPPING=1 (the harness checks the exit status). */
    h_dlockd_stop(d);
    NOTIFY_EXPECT(&n, "STOPPING=1", msg, 2000);
    close(n.fd);
}
END_TEST

START_TEST(test_notify_abstract)
{
    struct notifier n;
    struct h_dlockd *d;
    char msg[1024];

    /* An abstract name; WATCHDOG_PID names another process, so no WATCHDOG=1. */
    notifier_open(&n, 1);
    d = h_dlockd_start_with(R->port, NULL, H_ARGS(n.env, "WATCHDOG_USEC=200000", "WATCHDOG_PID=1"), NULL);
    NOTIFY_EXPECT(&n, "READY=1", msg, 5000);
    while (notify_recv(&n, msg, sizeof msg, 1000) == 0)
        ck_assert_msg(!has_line(msg, "WATCHDOG=1") && stateless(msg), "unexpected datagram '%s' (WATCHDOG_PID=1)",
                      msg);
    kill(d->pid, SIGHUP);
    NOTIFY_EXPECT(&n, "RELOADING=1", msg, 5000);
    NOTIFY_EXPECT(&n, "READY=1", msg, 5000);
    h_dlockd_stop(d);
    NOTIFY_EXPECT(&n, "STOPPING=1", msg, 2000);
    close(n.fd);
}
END_TEST

START_TEST(test_notify_ready_needs_redis)
{
    struct notifier n;
    char msg[1024];
    int64_t t0;

    /* READY=1 only once Redis is connected the first time. */
    notifier_open(&n, 0);
    h_redis_kill(R);
    h_dlockd_start_with(R->port, NULL, H_ARGS(n.env), NULL);
    for (t0 = h_now_ms(); h_now_ms() < t0 + 1000;)
        if (notify_recv(&n, msg, sizeof msg, (int)(t0 + 1000 - h_now_ms())) == 0)
            ck_assert_msg(stateless(msg), "datagram '%s' while Redis is down", msg);
    h_redis_restart(R);
    NOTIFY_EXPECT(&n, "READY=1", msg, 5000 + 2000);
    close(n.fd);
}
END_TEST

/* ------------------------------------------------------------------ reload */

/* Lines of d's log about a config reload (reloaded, reload failed). */
static int reloads(const struct h_dlockd *d)
{
    return h_log_count(d, H_ARGS("config:", "reload"));
}

/* Sends SIGHUP and waits for the log line that reports the reload. */
#define RELOAD(d) reload_at(__FILE__, __LINE__, (d))
static void reload_at(const char *file, int line, struct h_dlockd *d)
{
    int n = reloads(d);

    if (kill(d->pid, SIGHUP) < 0)
        h_fail_at(file, line, "kill SIGHUP: %s", strerror(errno));
    if (h_log_wait(d, H_ARGS("config:", "reload"), n + 1, 5000) < n + 1)
        h_fail_at(file, line, "no 'config: ... reload' log line within 5 s of SIGHUP");
}

/* Copies the first line of d's log that contains needle to out; fails the test when there is none. */
static void log_line(const struct h_dlockd *d, const char *needle, char *out, size_t cap)
{
    char *log = h_dlockd_log_read(d), *p = strstr(log, needle), *start;

    if (p == NULL) {
        free(log);
        H_FAIL("no log line with '%s'", needle);
    }
    for (start = p; start > log && start[-1] != '\n'; start--)
        ;
    snprintf(out, cap, "%.*s", (int)strcspn(start, "\n"), start);
    free(log);
}

static void conf_path(char *out, size_t cap)
{
    char dir[256];

    h_tmpdir(dir, sizeof dir, "conf");
    snprintf(out, cap, "%s/dlockd.conf", dir);
}

START_TEST(test_reload_live)
{
    char conf[300];
    struct h_dlockd *d;
    struct h_conn *a, *b, *n;

    conf_path(conf, sizeof conf);
    h_write_file(conf, "# before\nmax-waiters 100000\n");
    d = h_dlockd_start_with(R->port, conf, NULL, NULL);
    a = H_CLIENT(d, "name=a");
    b = H_CLIENT(d, "name=b");
    H_LOCK_NEW(a, "rl");
    H_REQ(b, "TIMEOUT", "LOCK rl wait=200ms");

    /* max-waiters 0 takes effect at SIGHUP, not before. */
    h_write_file(conf, "# after\nmax-waiters 0\nmax-waits 0\n");
    H_REQ(b, "TIMEOUT", "LOCK rl wait=200ms");
    RELOAD(d);
    H_REQ(b, "ERR LIMIT%*", "LOCK rl wait=200ms");
    H_REQ(b, "BUSY holder=a ttl=%d", "LOCK rl");
    ck_assert_int_eq(h_log_count(d, H_ARGS("config:", "restart")), 0);

    /* requirepass added: new connections must AUTH. */
    h_write_file(conf, "max-waiters 0\nmax-waits 0\nrequirepass s3cret\n");
    RELOAD(d);
    n = H_CONNECT(d->port);
    H_REQ(n, "OK", "PING");
    H_REQ(n, "ERR NOAUTH%*", "LOCK rl2");
    H_REQ(n, "OK", "AUTH s3cret");
    H_LOCK_NEW(n, "rl2");

    /* and removed again. */
    h_write_file(conf, "max-waiters 10\nmax-waits 10\n");
    RELOAD(d);
    n = H_CONNECT(d->port);
    H_LOCK_NEW(n, "rl3");
    H_REQ(b, "TIMEOUT", "LOCK rl wait=200ms");
    ck_assert_int_eq(h_log_count(d, H_ARGS("config:", "restart")), 0);
    ck_assert_int_eq(h_log_count(d, H_ARGS("reload failed")), 0);
}
END_TEST

START_TEST(test_reload_restart_only)
{
    char conf[300];
    int p2 = h_free_port(), p3 = h_free_port();
    struct h_dlockd *d;
    struct h_conn *a, *b, *c;
    char line[1024];

    conf_path(conf, sizeof conf);
    h_write_file(conf, "listen 127.0.0.1:%d\nkey-prefix pa:\n", p2);
    d = h_dlockd_start_with(R->port, conf, NULL, NULL); /* also on d->port: the harness's --listen */
    c = H_CONNECT(p2);
    H_REQ(c, "OK", "PING");
    a = H_CLIENT(d, "name=a");
    H_LOCK_NEW(a, "rk");
    ck_assert_int_gt(h_redis_count_keys(R->port, "pa:{rk}*"), 0);

    /* Two restart-only keys and one live key change. */
    h_write_file(conf, "listen 127.0.0.1:%d\nkey-prefix pb:\nmax-holds 1\n", p3);
    RELOAD(d);
    ck_assert_int_eq(h_log_count(d, H_ARGS("config:", "restart")), 1);
    log_line(d, "restart", line, sizeof line);
    ck_assert_msg(strstr(line, "listen") != NULL && strstr(line, "key-prefix") != NULL,
                  "the restart line does not name listen and key-prefix: %s", line);
    ck_assert_msg(strstr(line, "max-holds") == NULL, "a live key named as needing a restart: %s", line);

    /* The old listen and key-prefix stay... */
    c = H_CONNECT(p2);
    H_REQ(c, "OK", "PING");
    ck_assert_ptr_null(h_connect_try(p3));
    b = H_CLIENT(d, "name=b");
    H_LOCK_NEW(b, "rk2");
    ck_assert_int_gt(h_redis_count_keys(R->port, "pa:{rk2}*"), 0);
    ck_assert_int_eq(h_redis_count_keys(R->port, "pb:*"), 0);
    /* ...while the live key changed. */
    H_REQ(b, "ERR LIMIT%*", "LOCK rk3");

    /* The file back as the daemon runs it: nothing needs a restart. */
    h_write_file(conf, "listen 127.0.0.1:%d\nkey-prefix pa:\nmax-holds 1\n", p2);
    RELOAD(d);
    ck_assert_int_eq(h_log_count(d, H_ARGS("config:", "restart")), 1);
}
END_TEST

START_TEST(test_reload_bad_file)
{
    char conf[300];
    struct h_dlockd *d;
    struct h_conn *a, *b;

    conf_path(conf, sizeof conf);
    h_write_file(conf, "max-waiters 0\nmax-waits 0\n");
    d = h_dlockd_start_with(R->port, conf, NULL, NULL);
    a = H_CLIENT(d, "name=a");
    b = H_CLIENT(d, "name=b");
    H_LOCK_NEW(a, "rb");
    H_REQ(b, "ERR LIMIT%*", "LOCK rb wait=200ms");

    /* An unknown key: refused as a whole, even the good line before it. */
    h_write_file(conf, "max-waiters 100\nmax-waits 100\nno-such-key 1\n");
    RELOAD(d);
    ck_assert_int_eq(h_log_count(d, H_ARGS("reload failed", "no-such-key")), 1);
    H_REQ(b, "ERR LIMIT%*", "LOCK rb wait=200ms");

    /* A bad value. */
    h_write_file(conf, "max-waiters lots\n");
    RELOAD(d);
    ck_assert_int_eq(h_log_count(d, H_ARGS("reload failed", "max-waiters")), 1);
    ck_assert_int_eq(h_log_count(d, H_ARGS("reload failed")), 2);
    H_REQ(b, "ERR LIMIT%*", "LOCK rb wait=200ms");
    H_REQ(a, "OK", "PING");

    /* A good file again applies. */
    h_write_file(conf, "max-waiters 100\nmax-waits 100\n");
    RELOAD(d);
    ck_assert_int_eq(h_log_count(d, H_ARGS("reload failed")), 2);
    H_REQ(b, "TIMEOUT", "LOCK rb wait=200ms");
}
END_TEST

START_TEST(test_test_config)
{
    char good[300], bad[300], out[4096], want[400];

    conf_path(good, sizeof good);
    conf_path(bad, sizeof bad);
    h_write_file(good, "# ok\nmaxclients 5\nlisten 127.0.0.1:7999\nadmin-listen 127.0.0.1:7998\n");
    h_write_file(bad, "maxclients 5\nno-such-key 1\n");

    H_RUN(out, 0, "--test-config", good);
    ck_assert_str_eq(out, "OK\n");
    H_RUN(out, 0, "--test-config", good, "--maxclients", "7");
    ck_assert_str_eq(out, "OK\n");

    H_RUN(out, 1, "--test-config", bad);
    snprintf(want, sizeof want, "%s:2: no-such-key", bad);
    ck_assert_msg(strstr(out, want) != NULL && h_count_lines(out) == 1, "expected one line naming '%s', got '%s'", want,
                  out);
    ck_assert_msg(strncmp(out, "OK", 2) != 0, "'%s'", out);

    H_RUN(out, 1, "--test-config", good, "--maxclients", "0");
    ck_assert_msg(strstr(out, "maxclients") != NULL && h_count_lines(out) == 1, "got '%s'", out);
    H_RUN(out, 1, "--test-config", "--log-target", "journal");
    ck_assert_msg(strstr(out, "log-target") != NULL && h_count_lines(out) == 1, "got '%s'", out);
    H_RUN(out, 1, "--test-config", good, "--listen", "0.0.0.0:7997");
    ck_assert_msg(strstr(out, "listen") != NULL && h_count_lines(out) == 1, "got '%s'", out);
    H_RUN(out, 0, "--test-config", good, "--listen", "0.0.0.0:7997", "--requirepass", "x");
    ck_assert_str_eq(out, "OK\n");
}
END_TEST

/* ---------------------------------------------------------------- shutdown */

START_TEST(test_sigterm)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--lock-lease", "3s"));
    struct h_conn *a = H_CLIENT(d, "name=holder ttl=2s"); /* shorter than the lease: its holds end with it */
    struct h_conn *b = H_CLIENT(d, "name=idle ttl=60s");
    struct h_dlockd *d2;
    struct h_conn *x;
    int64_t t0, stopped, busy_at, ok_at = 0;
    long long ttl;
    const char *r;

    H_LOCK_NEW(a, "sd");
    ck_assert_int_eq(h_redis_int(R->port, "EXISTS", "dlock:{sd}:k", NULL), 1); /* in the one-key form */

    t0 = h_now_ms();
    h_dlockd_stop(d); /* fails unless it exits 0 */
    stopped = h_now_ms();
    ck_assert_msg(stopped - t0 <= 1500, "exited %lld ms after SIGTERM", (long long)(stopped - t0));
    H_EVENT(a, "* BYE reason=shutdown retry=1000", 1000);
    H_EOF(a, 1000);
    H_EVENT(b, "* BYE reason=shutdown retry=1000", 1000);
    H_EOF(b, 1000);

    /* The hold stays in Redis until its lease runs out. */
    ck_assert_int_eq(h_redis_int(R->port, "EXISTS", "dlock:{sd}:k", NULL), 1);
    d2 = h_dlockd_start(R->port, H_ARGS("--lock-lease", "3s"));
    x = H_CLIENT(d2, "name=x");
    r = H_REQ(x, "BUSY holder=%w ttl=%d", "LOCK sd");
    busy_at = h_now_ms();
    ttl = H_KV_INT(r, "ttl");
    ck_assert_msg(ttl > 0 && ttl <= 3000, "BUSY ttl=%lld with lock-lease 3s", ttl);
    while (h_now_ms() < busy_at + ttl + 2000) {
        r = h_request(x, H_TIMEOUT, "LOCK sd");
        ck_assert_msg(r != NULL && (h_match(r, "BUSY%*") || h_match(r, "OK token=%d count=1")), "LOCK sd -> %s",
                      r ? r : "(nothing)");
        if (r[0] == 'O') {
            ok_at = h_now_ms();
            break;
        }
        h_sleep_ms(50);
    }
    ck_assert_msg(ok_at != 0, "still BUSY %lld ms after a BUSY ttl=%lld", (long long)(h_now_ms() - busy_at), ttl);
    ck_assert_msg(ok_at >= busy_at + ttl - 300, "granted %lld ms after BUSY ttl=%lld", (long long)(ok_at - busy_at), ttl);
    ck_assert_msg(ok_at - stopped >= 1000, "granted %lld ms after the first daemon stopped (lease 3s, renewed every 1s)",
                  (long long)(ok_at - stopped));
}
END_TEST

/* ------------------------------------------------------------------- admin */

static int is_name_start(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == ':';
}

static int is_name_char(char ch)
{
    return is_name_start(ch) || (ch >= '0' && ch <= '9');
}

/* Length of a metric name at p (0 when there is none). */
static size_t name_len(const char *p)
{
    size_t n = 0;

    if (!is_name_start(p[0]))
        return 0;
    while (is_name_char(p[n]))
        n++;
    return n;
}

/* Parses {k="v",...} at p into labels (k="v" strings, at most max). Returns the bytes used, or 0 if malformed. */
static size_t parse_labels(const char *p, char labels[][256], int max, int *n)
{
    const char *s = p + 1;

    *n = 0;
    while (*s != '}') {
        size_t kl = name_len(s), vl;
        const char *v;

        if (kl == 0 || s[kl] != '=' || s[kl + 1] != '"' || *n == max)
            return 0;
        v = s + kl + 2;
        for (vl = 0; v[vl] != '"'; vl++) {
            if (v[vl] == '\0' || v[vl] == '\n')
                return 0;
            if (v[vl] == '\\' && (v[vl + 1] == '\\' || v[vl + 1] == '"' || v[vl + 1] == 'n'))
                vl++;
        }
        if (kl + vl + 4 > 256)
            return 0;
        snprintf(labels[(*n)++], 256, "%.*s", (int)(kl + vl + 3), s);
        s = v + vl + 1;
        if (*s == ',')
            s++;
        else if (*s != '}')
            return 0;
    }
    return (size_t)(s + 1 - p);
}

/* One sample line. */
struct sample {
    char name[128];
    char labels[8][256]; /* k="v" */
    int nlabels;
    double value;
};

/* Parses a sample line (without '\n'). Returns 0, or -1 if malformed. */
static int parse_sample(const char *line, struct sample *s)
{
    size_t n = name_len(line), used;
    char *end;

    if (n == 0 || n >= sizeof s->name)
        return -1;
    snprintf(s->name, sizeof s->name, "%.*s", (int)n, line);
    line += n;
    s->nlabels = 0;
    if (*line == '{') {
        if ((used = parse_labels(line, s->labels, 8, &s->nlabels)) == 0)
            return -1;
        line += used;
    }
    if (*line != ' ')
        return -1;
    line++;
    if (strcmp(line, "+Inf") == 0 || strcmp(line, "-Inf") == 0 || strcmp(line, "NaN") == 0) {
        s->value = 0;
        return 0;
    }
    s->value = strtod(line, &end);
    if (end == line)
        return -1;
    if (*end == ' ') /* a timestamp */
        strtoll(end + 1, &end, 10);
    return *end == '\0' ? 0 : -1;
}

/* The family a sample belongs to, given the declared type of name minus a histogram suffix. */
static const char *family_type(char types[][2][128], int ntypes, const char *name)
{
    static const char *const sfx[] = {"_bucket", "_sum", "_count"};
    size_t n = strlen(name);

    for (int i = 0; i < ntypes; i++)
        if (strcmp(types[i][0], name) == 0)
            return types[i][1];
    for (size_t k = 0; k < 3; k++) {
        size_t sl = strlen(sfx[k]);
        for (int i = 0; n > sl && strcmp(name + n - sl, sfx[k]) == 0 && i < ntypes; i++)
            if (strlen(types[i][0]) == n - sl && strncmp(types[i][0], name, n - sl) == 0 &&
                (strcmp(types[i][1], "histogram") == 0 || strcmp(types[i][1], "summary") == 0))
                return types[i][1];
    }
    return NULL;
}

/* Checks the Prometheus text format, line by line. Returns NULL or a description of the first bad line. */
static const char *prom_check(const char *text, char *why, size_t cap)
{
    static char types[256][2][128];
    int ntypes = 0;
    char *copy = strdup(text), *save = NULL;
    const char *bad = NULL;

    if (text[0] == '\0' || text[strlen(text) - 1] != '\n')
        bad = "does not end with a newline";
    for (char *line = strtok_r(copy, "\n", &save); line != NULL && bad == NULL; line = strtok_r(NULL, "\n", &save)) {
        struct sample s;
        char name[128], type[32];

        if (strncmp(line, "# HELP ", 7) == 0) {
            if (name_len(line + 7) == 0 || line[7 + name_len(line + 7)] != ' ')
                bad = line;
        } else if (strncmp(line, "# TYPE ", 7) == 0) {
            if (sscanf(line + 7, "%127s %31s", name, type) != 2 || name_len(name) != strlen(name) ||
                (strcmp(type, "counter") && strcmp(type, "gauge") && strcmp(type, "histogram") &&
                 strcmp(type, "summary") && strcmp(type, "untyped")) ||
                family_type(types, ntypes, name) != NULL || ntypes == 256) {
                bad = line;
            } else {
                snprintf(types[ntypes][0], 128, "%s", name);
                snprintf(types[ntypes++][1], 128, "%s", type);
            }
        } else if (parse_sample(line, &s) < 0 || family_type(types, ntypes, s.name) == NULL) {
            bad = line; /* malformed, or a sample before its # TYPE */
        }
    }
    if (bad != NULL)
        snprintf(why, cap, "%s", bad);
    free(copy);
    return bad ? why : NULL;
}

/*
 * The value of the sample name{labels} in text; labels is "" or
 * k="v",k2="v2" in any order. -1 when there is no such sample.
 */
static double prom_get(const char *text, const char *name, const char *labels)
{
    char want[8][256], buf[512];
    int nwant = 0;
    char *copy = strdup(text), *save = NULL;
    double v = -1;

    snprintf(buf, sizeof buf, "{%s}", labels);
    if (labels[0] != '\0' && parse_labels(buf, want, 8, &nwant) == 0)
        H_FAIL("bad labels %s", labels);
    for (char *line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        struct sample s;
        int match;

        if (line[0] == '#' || parse_sample(line, &s) < 0 || strcmp(s.name, name) != 0 || s.nlabels != nwant)
            continue;
        match = 1;
        for (int i = 0; i < nwant && match; i++) {
            int found = 0;
            for (int j = 0; j < s.nlabels; j++)
                found |= strcmp(want[i], s.labels[j]) == 0;
            match = found;
        }
        if (match) {
            v = s.value;
            break;
        }
    }
    free(copy);
    return v;
}

/* GET /metrics: expects 200, a text/plain body in the Prometheus format. Returns the body (malloc'd). */
#define METRICS(port) metrics_at(__FILE__, __LINE__, (port))
static char *metrics_at(const char *file, int line, int port)
{
    char *head, *body, why[512];
    int code = h_http_get(port, "/metrics", &head, &body, H_TIMEOUT);

    if (code != 200)
        h_fail_at(file, line, "GET /metrics: status %d", code);
    if (strstr(head, "Content-Type: text/plain") == NULL)
        h_fail_at(file, line, "GET /metrics: not text/plain:\n%s", head);
    if (prom_check(body, why, sizeof why) != NULL)
        h_fail_at(file, line, "GET /metrics: not Prometheus text at line '%s'", why);
    free(head);
    return body;
}

/* The value of name{labels}; fails the test when absent. */
#define MGET(text, name, labels) mget_at(__FILE__, __LINE__, (text), (name), (labels))
static long long mget_at(const char *file, int line, const char *text, const char *name, const char *labels)
{
    double v = prom_get(text, name, labels);

    if (v < 0)
        h_fail_at(file, line, "no sample %s{%s} in /metrics", name, labels);
    return (long long)v;
}

/* Expects the sample name{labels} of text to be want. */
#define GAUGE(text, name, labels, want) gauge_at(__FILE__, __LINE__, (text), (name), (labels), (want))
static void gauge_at(const char *file, int line, const char *text, const char *name, const char *labels, long long want)
{
    long long v = mget_at(file, line, text, name, labels);

    if (v != want)
        h_fail_at(file, line, "%s{%s} is %lld, expected %lld", name, labels, v, want);
}

/* Expects the sample name{labels} to have grown by want (exactly, or at least when at_least) from before to after. */
#define DELTA(before, after, name, labels, want) delta_at(__FILE__, __LINE__, (before), (after), (name), (labels), (want), 0)
#define DELTA_GE(before, after, name, labels, want) delta_at(__FILE__, __LINE__, (before), (after), (name), (labels), (want), 1)
static void delta_at(const char *file, int line, const char *before, const char *after, const char *name,
                     const char *labels, long long want, int at_least)
{
    long long b = mget_at(file, line, before, name, labels), a = mget_at(file, line, after, name, labels);

    if (at_least ? a - b < want : a - b != want)
        h_fail_at(file, line, "%s{%s} went from %lld to %lld, expected %s+%lld", name, labels, b, a,
                  at_least ? "at least " : "", want);
}

/* Checks a histogram: cumulative buckets, +Inf bucket equal to _count. */
static void histo_check(const char *text, const char *name)
{
    char *copy = strdup(text), *save = NULL, bucket[160], count[160];
    double last = 0, inf = -1;

    snprintf(bucket, sizeof bucket, "%s_bucket", name);
    snprintf(count, sizeof count, "%s_count", name);
    for (char *line = strtok_r(copy, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        struct sample s;

        if (line[0] == '#' || parse_sample(line, &s) < 0 || strcmp(s.name, bucket) != 0)
            continue;
        ck_assert_msg(s.value >= last, "%s: buckets not cumulative at '%s'", name, line);
        last = s.value;
        if (s.nlabels == 1 && strcmp(s.labels[0], "le=\"+Inf\"") == 0)
            inf = prom_get(text, bucket, "le=\"+Inf\"");
    }
    free(copy);
    ck_assert_msg(inf >= 0, "%s: no le=\"+Inf\" bucket", name);
    ck_assert_msg(inf == prom_get(text, count, ""), "%s: +Inf bucket %g != _count %g", name, inf,
                  prom_get(text, count, ""));
}

/* dlockd_build_info and the process_* metrics are there and plausible. */
static void process_check(const char *m)
{
    char labels[64];
    double start = prom_get(m, "process_start_time_seconds", ""), now = (double)time(NULL);

    snprintf(labels, sizeof labels, "version=\"%s\"", PACKAGE_VERSION);
    GAUGE(m, "dlockd_build_info", labels, 1);
    ck_assert_double_ge(prom_get(m, "process_cpu_seconds_total", ""), 0);
    ck_assert_int_gt(MGET(m, "process_resident_memory_bytes", ""), 1 << 20);
    ck_assert_int_ge(MGET(m, "process_virtual_memory_bytes", ""), MGET(m, "process_resident_memory_bytes", ""));
    /* stdin/out/err, the listener, the admin socket, Redis's two links, the event base: at least 6 */
    ck_assert_int_ge(MGET(m, "process_open_fds", ""), 6);
    ck_assert_int_ge(MGET(m, "process_max_fds", ""), MGET(m, "process_open_fds", ""));
    ck_assert_msg(start > now - 120 && start <= now + 1, "process_start_time_seconds %f, now %f", start, now);
}

static struct h_dlockd *admin_daemon(int *admin_port, const char *const *more)
{
    static char addr[64];
    const char *args[16] = {"--admin-listen", addr};
    int n = 2;

    *admin_port = h_free_port();
    snprintf(addr, sizeof addr, "127.0.0.1:%d", *admin_port);
    for (size_t i = 0; more != NULL && more[i] != NULL && n < 15; i++)
        args[n++] = more[i];
    args[n] = NULL;
    return h_dlockd_start(R->port, args);
}

#define LOCK_OK "verb=\"LOCK\",outcome=\"ok\""
#define LOCK_BUSY "verb=\"LOCK\",outcome=\"busy\""

START_TEST(test_admin_metrics)
{
    int ap;
    struct h_dlockd *d = admin_daemon(&ap, H_ARGS("--session-ttl", "1s"));
    struct h_conn *a, *b;
    char *m0, *m1, *m2, *m3;
    int64_t t0 = h_now_ms();

    /* The session of the harness's start-up PING expires (ttl 1s): then nothing is left. */
    for (;;) {
        m0 = METRICS(ap);
        if (MGET(m0, "dlockd_sessions", "") == 0)
            break;
        ck_assert_msg(h_now_ms() < t0 + 5000, "dlockd_sessions stays %lld", MGET(m0, "dlockd_sessions", ""));
        free(m0);
        h_sleep_ms(100);
    }
    GAUGE(m0, "dlockd_holds", "", 0);
    histo_check(m0, "dlockd_backend_latency_seconds");
    histo_check(m0, "dlockd_handoff_latency_seconds");
    histo_check(m0, "dlockd_wait_seconds");
    histo_check(m0, "dlockd_hold_seconds");
    process_check(m0);

    a = H_CLIENT(d, "name=a ttl=60s");
    b = H_CLIENT(d, "name=b ttl=60s");
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "m%d", i);
        H_LOCK_NEW(a, name);
    }
    H_REQ(b, "BUSY holder=a ttl=%d", "LOCK m0");
    H_REQ(b, "BUSY holder=a ttl=%d", "LOCK m1");
    m1 = METRICS(ap);
    DELTA(m0, m1, "dlockd_requests_total", LOCK_OK, 5);
    DELTA(m0, m1, "dlockd_requests_total", LOCK_BUSY, 2);
    DELTA(m0, m1, "dlockd_requests_total", "outcome=\"ok\",verb=\"HELLO\"", 2); /* labels in any order */
    GAUGE(m1, "dlockd_sessions", "", 2);
    GAUGE(m1, "dlockd_holds", "", 5);
    ck_assert_int_ge(MGET(m1, "dlockd_connections", ""), 2);
    DELTA_GE(m0, m1, "dlockd_backend_latency_seconds_count", "", 5);
    DELTA(m0, m1, "dlockd_wait_seconds_count", "", 5); /* immediate grants count too, not BUSY */
    DELTA(m0, m1, "dlockd_wait_seconds_bucket", "le=\"0.25\"", 5);
    GAUGE(m1, "dlockd_backend_up", "", 1);
    histo_check(m1, "dlockd_backend_latency_seconds");

    /* A queued handoff: b waits for m0, a unlocks it. */
    ck_assert_int_eq(h_send(b, "LOCK m0 wait=10s"), 0);
    ck_assert(h_wait_waiters(a, "m0", 1, 3000));
    m2 = METRICS(ap);
    GAUGE(m2, "dlockd_waiters", "", 1);
    h_sleep_ms(600); /* b waits, and a holds m0, at least this long */
    H_REQ(a, "OK count=0", "UNLOCK m0");
    H_REPLY(b, "OK token=%d count=1", 3000);
    m3 = METRICS(ap);
    DELTA(m2, m3, "dlockd_handoff_latency_seconds_count", "", 1);
    histo_check(m3, "dlockd_handoff_latency_seconds");
    /* b's wait and a's hold of m0, both over 0.5 s: outside the 0.5 s bucket, inside +Inf */
    DELTA(m2, m3, "dlockd_wait_seconds_count", "", 1);
    DELTA(m2, m3, "dlockd_wait_seconds_bucket", "le=\"0.5\"", 0);
    ck_assert_double_ge(prom_get(m3, "dlockd_wait_seconds_sum", "") - prom_get(m2, "dlockd_wait_seconds_sum", ""), 0.5);
    DELTA(m2, m3, "dlockd_hold_seconds_count", "", 1);
    DELTA(m2, m3, "dlockd_hold_seconds_bucket", "le=\"0.5\"", 0);
    ck_assert_double_ge(prom_get(m3, "dlockd_hold_seconds_sum", "") - prom_get(m2, "dlockd_hold_seconds_sum", ""), 0.5);
    histo_check(m3, "dlockd_wait_seconds");
    histo_check(m3, "dlockd_hold_seconds");
    GAUGE(m3, "dlockd_waiters", "", 0);
    GAUGE(m3, "dlockd_holds", "", 5);
    DELTA(m0, m3, "dlockd_requests_total", LOCK_OK, 6);
    DELTA(m0, m3, "dlockd_requests_total", "verb=\"UNLOCK\",outcome=\"ok\"", 1);
    free(m2);

    /* b leaves: its session and hold go. */
    H_REQ(b, "OK", "QUIT");
    H_EOF(b, 2000);
    m2 = METRICS(ap);
    GAUGE(m2, "dlockd_sessions", "", 1);
    GAUGE(m2, "dlockd_holds", "", 4);
    free(m0);
    free(m1);
    free(m2);
    free(m3);
}
END_TEST

/* GET path until it answers want; returns ms taken, or -1 after timeout_ms. */
static int64_t http_until(int port, const char *path, int want, int timeout_ms)
{
    int64_t t0 = h_now_ms();

    do {
        if (h_http_get(port, path, NULL, NULL, H_TIMEOUT) == want)
            return h_now_ms() - t0;
        h_sleep_ms(50);
    } while (h_now_ms() < t0 + timeout_ms);
    return -1;
}

START_TEST(test_admin_healthz)
{
    int ap;
    char *head, *body, *m;

    admin_daemon(&ap, H_ARGS("--failover-delay", "1s")); /* the gate after the restart: 503 meanwhile */
    /* 503 until the link to Redis is up */
    ck_assert_msg(http_until(ap, "/healthz", 200, 5000) >= 0, "/healthz not 200 within 5 s of the start");
    ck_assert_int_eq(h_http_get(ap, "/healthz", &head, &body, H_TIMEOUT), 200);
    ck_assert_msg(strcmp(body, "ok\n") == 0 || strcmp(body, "ok") == 0, "/healthz body '%s'", body);
    free(head);
    free(body);

    m = METRICS(ap);
    GAUGE(m, "dlockd_backend_reconnects_total", "", 0); /* the first connection is not one */
    free(m);

    h_redis_kill(R);
    ck_assert_msg(http_until(ap, "/healthz", 503, 5000) >= 0, "/healthz not 503 within 5 s of Redis dying");
    m = METRICS(ap);
    GAUGE(m, "dlockd_backend_up", "", 0);
    GAUGE(m, "dlockd_backend_reconnects_total", "", 0);
    free(m);

    h_redis_restart(R);
    ck_assert_msg(http_until(ap, "/healthz", 200, 5000 + 2000) >= 0, "/healthz not 200 within 7 s of Redis restarting");
    m = METRICS(ap);
    GAUGE(m, "dlockd_backend_up", "", 1);
    GAUGE(m, "dlockd_backend_reconnects_total", "", 1);
    free(m);
}
END_TEST

/* The top-level keys of a JSON object, as "k1,k2,..." sorted. */
static void json_keys(const char *json, char *out, size_t cap)
{
    char keys[64][64];
    int n = 0, depth = 0;
    size_t used = 0;

    for (const char *p = json; *p != '\0'; p++) {
        if (*p == '"') {
            const char *s = ++p;
            while (*p != '\0' && *p != '"')
                p += *p == '\\' && p[1] != '\0' ? 2 : 1;
            if (*p == '\0')
                break;
            const char *q = p + 1;
            while (*q == ' ')
                q++;
            if (depth == 1 && *q == ':' && n < 64)
                snprintf(keys[n++], 64, "%.*s", (int)(p - s), s);
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if (*p == '}' || *p == ']') {
            depth--;
        }
    }
    qsort(keys, (size_t)n, sizeof keys[0], (int (*)(const void *, const void *))strcmp);
    out[0] = '\0';
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(out + used, cap - used, "%s%s", i ? "," : "", keys[i]);
}

START_TEST(test_admin_status)
{
    static const char *const want[] = {"version", "uptime_ms", "connections", "sessions", "holds", "waiters",
                                       "backend", "requests", "grants", "timeouts", "expired_sessions"};
    int ap;
    struct h_dlockd *d = admin_daemon(&ap, NULL);
    struct h_conn *c = H_CLIENT(d, "name=st");
    char *head, *body, hk[2048], ik[2048], needle[64], withcfg[8192];
    const char *info;

    H_LOCK_NEW(c, "st");
    ck_assert_int_eq(h_http_get(ap, "/status", &head, &body, H_TIMEOUT), 200);
    ck_assert_msg(strstr(head, "Content-Type: application/json") != NULL, "/status headers:\n%s", head);
    ck_assert_msg(body[0] == '{', "/status body '%s'", body);
    info = H_REQ(c, "OK {%*}", "INFO");
    json_keys(body, hk, sizeof hk);
    snprintf(withcfg, sizeof withcfg, "%.*s,\"config\":{}}", (int)strlen(info + 3) - 1, info + 3);
    json_keys(withcfg, ik, sizeof ik);
    ck_assert_msg(strcmp(hk, ik) == 0, "/status keys [%s] differ from INFO keys and config [%s]", hk, ik);
    ck_assert(h_json_has(body, "\"session-ttl\":\"10s\""));
    ck_assert(h_json_has(body, "\"requirepass\":\"\""));
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        snprintf(needle, sizeof needle, "\"%s\":", want[i]);
        ck_assert_msg(h_json_has(body, needle), "/status has no %s: %s", want[i], body);
    }
    ck_assert(h_json_has(body, "\"backend\":\"up\""));
    ck_assert_int_eq(h_json_int(body, "holds"), 1);
    ck_assert_int_ge(h_json_int(body, "LOCK"), 1);
    free(head);
    free(body);

    ck_assert_int_eq(h_http_get(ap, "/nope", NULL, NULL, H_TIMEOUT), 404);
    ck_assert_int_eq(h_http_get(ap, "/", NULL, NULL, H_TIMEOUT), 404);
    ck_assert_int_eq(h_http_get(ap, "/metrics/x", NULL, NULL, H_TIMEOUT), 404);
}
END_TEST

/* /status shows the effective config, but never a secret: every key named *pass* that is set shows masked. */
START_TEST(test_admin_status_secrets)
{
    int ap;
    char *body, *p;

    admin_daemon(&ap, H_ARGS("--requirepass", "client-s3cret", "--redis-password", "redis-s3cret", "--max-holds",
                             "77", "--session-ttl", "90s"));
    ck_assert_int_eq(h_http_get(ap, "/status", NULL, &body, H_TIMEOUT), 200);
    ck_assert_msg(strstr(body, "s3cret") == NULL, "/status shows a secret: %s", body);
    ck_assert(h_json_has(body, "\"requirepass\":\"********\""));
    ck_assert(h_json_has(body, "\"redis-password\":\"********\""));
    ck_assert(h_json_has(body, "\"max-holds\":\"77\""));
    ck_assert(h_json_has(body, "\"session-ttl\":\"90s\""));
    for (p = strstr(body, "\"config\":{"); p != NULL && (p = strstr(p, "pass\":\"")) != NULL; p++)
        ck_assert_msg(strncmp(p + 7, "********\"", 9) == 0 || strncmp(p + 7, "\"", 1) == 0,
                      "a password key shows '%.20s'", p + 7);
    free(body);
}
END_TEST

/* ---------------------------------------------------------------- security */

START_TEST(test_preauth_verbs)
{
    static const char *const denied[] = {"LOCK x", "LOCK x shared", "UNLOCK x", "ACQUIRE s limit=2", "RELEASE s",
                                         "LATCH l count=1", "COUNTDOWN l", "AWAIT l", "STATUS x", "INFO"};
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--requirepass", "s3cret", "--auth-fail-delay", "0"));
    struct h_conn *c = H_CONNECT(d->port), *q = H_CONNECT(d->port);
    const char *r;

    H_REQ(c, "OK", "PING");
    H_REQ(c, "ERR NOAUTH%*", "HELLO name=pre");
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++)
        H_REQ(c, "ERR NOAUTH%*", "%s", denied[i]);
    ck_assert_int_eq(h_send(c, "#t LOCK x"), 0);
    r = h_reply_tag(c, "t", H_TIMEOUT);
    ck_assert_msg(r != NULL && h_match(r, "#t ERR NOAUTH%*"), "#t LOCK x -> %s", r ? r : "(nothing)");
    H_REQ(c, "ERR NOAUTH%*", "AUTH wrong");
    H_REQ(c, "ERR NOAUTH%*", "LOCK x");
    H_REQ(c, "OK", "AUTH s3cret");
    H_LOCK_NEW(c, "x");
    H_REQ(c, "OK {%*}", "STATUS x");
    H_REQ(c, "OK {%*}", "INFO");

    H_REQ(q, "OK", "QUIT");
    H_EOF(q, 2000);
}
END_TEST

/* "LOCK" and four names: a valid request of len bytes with its "\n". */
static char *long_lock(size_t len, char tag)
{
    char *line = malloc(len + 1);
    size_t name = (len - 5 - 3 - 1) / 4;

    memset(line, tag, len);
    memcpy(line, "LOCK ", 5);
    for (int i = 1; i < 4; i++)
        line[5 + (size_t)i * (name + 1) - 1] = ' ';
    for (int i = 0; i < 4; i++)
        line[5 + (size_t)i * (name + 1)] = (char)('0' + i);
    line[len - 1] = '\n';
    line[len] = '\0';
    return line;
}

START_TEST(test_preauth_max_line)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--requirepass", "s3cret", "--auth-fail-delay", "0"));
    struct h_dlockd *open = h_dlockd_start(R->port, NULL);
    struct h_conn *c1 = H_CONNECT(d->port), *c2 = H_CONNECT(d->port), *c3 = H_CONNECT(d->port);
    struct h_conn *c4 = H_CONNECT(d->port), *o = H_CONNECT(open->port);
    char *line = long_lock(601, 'a'), *line2 = long_lock(601, 'b');
    char auth[600];

    ck_assert_int_eq(strlen(line), 601);
    /* Before AUTH: 601 bytes > 512 -> ERR TOOBIG, closed. */
    ck_assert_int_eq(h_send_raw(c1, line, strlen(line)), 0);
    H_REPLY(c1, "ERR TOOBIG%*", H_TIMEOUT);
    H_EOF(c1, 2000);
    /* After AUTH the same line is fine. */
    H_REQ(c2, "OK", "AUTH s3cret");
    ck_assert_int_eq(h_send_raw(c2, line, strlen(line)), 0);
    H_REPLY(c2, "OK tokens=%d,%d,%d,%d counts=1,1,1,1", H_TIMEOUT);
    /* Without requirepass there is no pre-AUTH limit. */
    ck_assert_int_eq(h_send_raw(o, line2, strlen(line2)), 0);
    H_REPLY(o, "OK tokens=%d,%d,%d,%d counts=1,1,1,1", H_TIMEOUT);

    /* The limit includes the terminator: 512 bytes pass, 513 do not. */
    memset(auth, 'x', sizeof auth);
    memcpy(auth, "AUTH ", 5);
    auth[511] = '\n';
    ck_assert_int_eq(h_send_raw(c3, auth, 512), 0);
    H_REPLY(c3, "ERR NOAUTH%*", H_TIMEOUT);
    H_REQ(c3, "OK", "PING");
    auth[511] = 'x';
    auth[512] = '\n';
    ck_assert_int_eq(h_send_raw(c4, auth, 513), 0);
    H_REPLY(c4, "ERR TOOBIG%*", H_TIMEOUT);
    H_EOF(c4, 2000);
    free(line);
    free(line2);
}
END_TEST

START_TEST(test_auth_timeout)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--requirepass", "s3cret", "--auth-timeout", "1s"));
    struct h_conn *authed, *idle, *busy;
    int64_t t0 = h_now_ms(), el, busy_closed = -1;

    idle = H_CONNECT(d->port);
    busy = H_CONNECT(d->port);
    authed = H_CONNECT(d->port);
    H_REQ(authed, "OK", "AUTH s3cret");
    /* A connection that only PINGs is not authenticated either. */
    while (h_now_ms() < t0 + 3000) {
        const char *r = h_request(busy, 1000, "PING");
        if (r == NULL && busy->eof) {
            busy_closed = h_now_ms() - t0;
            break;
        }
        ck_assert_msg(r != NULL && strcmp(r, "OK") == 0, "PING -> %s", r ? r : "(nothing)");
        h_sleep_ms(100);
    }
    ck_assert_msg(busy_closed >= 900 && busy_closed <= 2000, "unauthenticated PINGing connection closed after %lld ms",
                  (long long)busy_closed);
    H_EOF(idle, 3000);
    el = h_now_ms() - t0;
    ck_assert_msg(el <= 2000, "idle unauthenticated connection closed after %lld ms (auth-timeout 1s)", (long long)el);
    while (h_now_ms() < t0 + 2500)
        h_sleep_ms(50);
    H_REQ(authed, "OK", "PING");
    H_LOCK_NEW(authed, "at");
}
END_TEST

START_TEST(test_auth_fail_delay)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--requirepass", "s3cret", "--auth-fail-delay", "300ms"));
    struct h_conn *c = H_CONNECT(d->port), *c2 = H_CONNECT(d->port), *o = H_CONNECT(d->port);
    int64_t t0, el;

    t0 = h_now_ms();
    H_REQ(c, "ERR NOAUTH%*", "AUTH nope");
    el = h_now_ms() - t0;
    ck_assert_msg(el >= 250, "wrong password answered after %lld ms (auth-fail-delay 300ms)", (long long)el);
    t0 = h_now_ms();
    H_REQ(c, "OK", "AUTH s3cret");
    el = h_now_ms() - t0;
    ck_assert_msg(el < 150, "right password answered after %lld ms", (long long)el);

    /* HELLO auth= too; the delay holds up nobody else. */
    t0 = h_now_ms();
    ck_assert_int_eq(h_send(c2, "HELLO auth=nope name=x"), 0);
    H_REQ(o, "OK", "PING");
    el = h_now_ms() - t0;
    ck_assert_msg(el < 150, "another connection's PING took %lld ms during the delay", (long long)el);
    H_REPLY(c2, "ERR NOAUTH%*", 2000);
    el = h_now_ms() - t0;
    ck_assert_msg(el >= 250, "HELLO auth=<wrong> answered after %lld ms", (long long)el);
    t0 = h_now_ms();
    H_REQ(c2, "OK session=%x%*", "HELLO auth=s3cret name=x");
    el = h_now_ms() - t0;
    ck_assert_msg(el < 150, "HELLO auth=<right> answered after %lld ms", (long long)el);
    H_LOCK_NEW(c2, "afd");
}
END_TEST

START_TEST(test_protected_mode)
{
    int port = h_free_port(), port2 = h_free_port();
    char listen[64], listen2[64], redis[64], out[4096];
    struct h_conn *c;

    snprintf(listen, sizeof listen, "0.0.0.0:%d", port);
    snprintf(listen2, sizeof listen2, "0.0.0.0:%d", port2);
    snprintf(redis, sizeof redis, "127.0.0.1:%d", R->port);
    H_RUN(out, 1, "--listen", listen, "--redis", redis);
    ck_assert_msg(h_count_lines(out) == 1 && strstr(out, "listen") != NULL, "expected one line naming listen, got '%s'", out);
    ck_assert_ptr_null(h_connect_try(port));

    h_dlockd_start(R->port, H_ARGS("--listen", listen, "--protected-mode", "no"));
    c = H_CONNECT(port);
    H_REQ(c, "OK", "PING");
    H_LOCK_NEW(c, "pm");

    h_dlockd_start(R->port, H_ARGS("--listen", listen2, "--requirepass", "s3cret"));
    c = H_CONNECT(port2);
    H_REQ(c, "ERR NOAUTH%*", "LOCK pm2");
    H_REQ(c, "OK", "AUTH s3cret");
    H_LOCK_NEW(c, "pm2");
}
END_TEST

/* Polls INFO on c until "connections" is n. */
static int connections_become(struct h_conn *c, long long n)
{
    int64_t t0 = h_now_ms();

    do {
        const char *r = h_request(c, H_TIMEOUT, "INFO");
        if (r != NULL && h_json_int(r, "connections") == n)
            return 1;
        h_sleep_ms(20);
    } while (h_now_ms() < t0 + 3000);
    return 0;
}

START_TEST(test_maxclients)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--maxclients", "2"));
    struct h_conn *c1 = H_CLIENT(d, "name=c1"), *c2, *c3;
    const char *l;

    ck_assert_msg(connections_become(c1, 1), "the harness's PING connection is still counted");
    c2 = H_CLIENT(d, "name=c2");
    c3 = H_CONNECT(d->port);
    l = h_line(c3, H_TIMEOUT);
    ck_assert_msg(l != NULL && h_match(l, "ERR LIMIT%*"), "third connection got '%s'", l ? l : "(nothing)");
    H_EOF(c3, 2000);
    H_REQ(c1, "OK", "PING");
    H_REQ(c2, "OK", "PING");

    h_close(c2);
    ck_assert(connections_become(c1, 1));
    c3 = H_CLIENT(d, "name=c3");
    H_REQ(c3, "OK", "PING");
}
END_TEST

/* A TCP connection with a small receive buffer, non-blocking. */
static int small_conn(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rcv = 4096;

    ck_assert_int_ge(fd, 0);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

START_TEST(test_output_limit)
{
    enum { NREQ = 200000 };
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--client-output-limit", "65536"));
    struct h_conn *b = H_CLIENT(d, "name=b");
    int fd = small_conn(d->port), closed = 0;
    size_t total = (size_t)NREQ * 5, sent = 0, got = 0;
    char *flood = malloc(total), buf[65536];
    int64_t t0 = h_now_ms(), worst = 0;
    int pings = 0;
    /* INFO: a reply of some 500 bytes needs no Redis. PING's 3 bytes would mostly
     * sit in the kernel's socket buffers, which grow to megabytes on loopback. */
    size_t reply_len = strlen(H_REQ(b, "OK {%*}", "INFO")) + 1;

    for (size_t i = 0; i < NREQ; i++)
        memcpy(flood + i * 5, "INFO\n", 5);
    /* Send it in chunks without ever reading; between chunks b's PING must be answered at once. */
    while (sent < total && h_now_ms() < t0 + 30000) {
        size_t chunk = total - sent < 1000 ? total - sent : 1000;
        ssize_t w = send(fd, flood + sent, chunk, MSG_NOSIGNAL | MSG_DONTWAIT);
        int64_t p0;

        if (w > 0)
            sent += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            break; /* cut off */
        p0 = h_now_ms();
        H_REQ(b, "OK", "PING");
        worst = h_now_ms() - p0 > worst ? h_now_ms() - p0 : worst;
        pings++;
        if (w < 0) {
            struct pollfd p = {fd, POLLOUT, 0};
            poll(&p, 1, 20);
        }
        h_sleep_ms(5);
    }
    ck_assert_msg(h_log_wait(d, H_ARGS("replies unread"), 1, 5000) == 1,
                  "no log line about unread replies (%zu of %zu bytes sent, worst PING %lld ms)", sent, total,
                  (long long)worst);
    /* The connection is closed, long before every reply was written. */
    for (int64_t end = h_now_ms() + 5000; !closed && h_now_ms() < end;) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t r;

        if (poll(&p, 1, 100) <= 0)
            continue;
        r = recv(fd, buf, sizeof buf, 0);
        if (r > 0)
            got += (size_t)r;
        else if (r == 0 || (errno != EAGAIN && errno != EINTR))
            closed = 1;
    }
    ck_assert_msg(closed, "flooding connection still open (%zu bytes of replies read)", got);
    ck_assert_msg(got < (size_t)NREQ * reply_len / 2, "%zu bytes of replies were delivered", got);
    ck_assert_msg(worst < 250, "another client's PING took up to %lld ms during the flood (%d PINGs)", (long long)worst,
                  pings);
    H_REQ(b, "OK", "PING");
    close(fd);
    free(flood);
}
END_TEST

START_TEST(test_unix_socket)
{
    char dir[256], path[300], path2[300], listen[310], listen2[310];
    struct h_dlockd *d, *d2;
    struct h_conn *u, *t;
    struct stat st;

    h_tmpdir(dir, sizeof dir, "unix");
    snprintf(path, sizeof path, "%s/d.sock", dir);
    snprintf(path2, sizeof path2, "%s/d2.sock", dir);
    snprintf(listen, sizeof listen, "unix:%s", path);
    snprintf(listen2, sizeof listen2, "unix:%s", path2);
    d = h_dlockd_start(R->port, H_ARGS("--listen", listen, "--unixsocket-perm", "0600"));
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert(S_ISSOCK(st.st_mode));
    ck_assert_msg((st.st_mode & 07777) == 0600, "mode %o, expected 600", (unsigned)(st.st_mode & 07777));
    u = h_connect_unix_try(path);
    ck_assert_ptr_nonnull(u);
    H_REQ(u, "OK session=%x%*", "HELLO name=u");
    H_LOCK_NEW(u, "us");
    t = H_CLIENT(d, "name=t");
    H_REQ(t, "BUSY holder=u ttl=%d", "LOCK us");

    /* The default is 0660. */
    d2 = h_dlockd_start(R->port, H_ARGS("--listen", listen2));
    ck_assert_int_eq(stat(path2, &st), 0);
    ck_assert_msg((st.st_mode & 07777) == 0660, "mode %o, expected 660", (unsigned)(st.st_mode & 07777));
    u = h_connect_unix_try(path2);
    ck_assert_ptr_nonnull(u);
    H_REQ(u, "BUSY holder=u ttl=%d", "LOCK us");
    (void)d2;
}
END_TEST

/* -------------------------------------------------------------------- logs */

START_TEST(test_log_session_lines)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--log-level", "info"));
    struct h_conn *c = H_CLIENT(d, "name=logx ttl=1s");
    char sid[64];

    snprintf(sid, sizeof sid, "%s", c->session);
    H_LOCK_NEW(c, "lg");
    ck_assert_msg(h_log_wait(d, H_ARGS(" info ", sid, "'logx'", "opened"), 1, 2000) == 1,
                  "no info line with session %s, 'logx' and 'opened'", sid);
    H_EVENT(c, "* BYE reason=expired", 5000);
    /* and the audit line of its hold, lost with reason=expired */
    ck_assert_msg(h_log_wait(d, H_ARGS(" info ", sid, "logx", "expired"), 2, 2000) == 2,
                  "no info line with session %s, logx and 'expired'", sid);
}
END_TEST

START_TEST(test_log_idle_session_expiry)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--log-level", "info"));
    struct h_conn *c = H_CLIENT(d, "name=idlex ttl=1s");
    char sid[64];

    /* A session opened with HELLO name= that expires without ever holding anything. */
    snprintf(sid, sizeof sid, "%s", c->session);
    ck_assert_msg(h_log_wait(d, H_ARGS(" info ", sid, "'idlex'", "opened"), 1, 2000) == 1,
                  "no info line with session %s, 'idlex' and 'opened'", sid);
    H_EVENT(c, "* BYE reason=expired", 5000);
    ck_assert_msg(h_log_wait(d, H_ARGS(" info ", sid, "idlex", "expired"), 1, 2000) == 1,
                  "no info line with session %s, idlex and 'expired'", sid);
}
END_TEST

START_TEST(test_log_syslog)
{
    struct h_dlockd *d = h_dlockd_start(R->port, H_ARGS("--log-target", "syslog"));
    struct h_conn *c = H_CLIENT(d, "name=sl");

    H_LOCK_NEW(c, "sl");
    /* The lines go to syslog, not to stderr. */
    ck_assert_int_eq(h_log_count(d, H_ARGS("started")), 0);
    ck_assert_int_eq(h_log_count(d, H_ARGS("'sl'")), 0);
}
END_TEST

static Suite *ops_suite(void)
{
    Suite *s = suite_create("ops");
    struct {
        const char *name;
        TCase *tc;
    } cases[] = {{"notify", NULL}, {"reload", NULL}, {"shutdown", NULL}, {"admin", NULL}, {"security", NULL},
                 {"logs", NULL}};

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cases[i].tc = tcase_create(cases[i].name);
        tcase_add_checked_fixture(cases[i].tc, h_setup_redis, h_teardown);
        tcase_set_timeout(cases[i].tc, 90);
        suite_add_tcase(s, cases[i].tc);
    }
    tcase_add_test(cases[0].tc, test_notify);
    tcase_add_test(cases[0].tc, test_notify_abstract);
    tcase_add_test(cases[0].tc, test_notify_ready_needs_redis);
    tcase_add_test(cases[1].tc, test_reload_live);
    tcase_add_test(cases[1].tc, test_reload_restart_only);
    tcase_add_test(cases[1].tc, test_reload_bad_file);
    tcase_add_test(cases[1].tc, test_test_config);
    tcase_add_test(cases[2].tc, test_sigterm);
    tcase_add_test(cases[3].tc, test_admin_metrics);
    tcase_add_test(cases[3].tc, test_admin_status_secrets);
    tcase_add_test(cases[3].tc, test_admin_healthz);
    tcase_add_test(cases[3].tc, test_admin_status);
    tcase_add_test(cases[4].tc, test_preauth_verbs);
    tcase_add_test(cases[4].tc, test_preauth_max_line);
    tcase_add_test(cases[4].tc, test_auth_timeout);
    tcase_add_test(cases[4].tc, test_auth_fail_delay);
    tcase_add_test(cases[4].tc, test_protected_mode);
    tcase_add_test(cases[4].tc, test_maxclients);
    tcase_add_test(cases[4].tc, test_output_limit);
    tcase_add_test(cases[4].tc, test_unix_socket);
    tcase_add_test(cases[5].tc, test_log_session_lines);
    tcase_add_test(cases[5].tc, test_log_idle_session_expiry);
    tcase_add_test(cases[5].tc, test_log_syslog);
    return s;
}

int main(void)
{
    return h_run_suite(ops_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
