/* harness.c - integration test harness: starts redis-server and dlockd, speaks RESP and the dlockd line protocol. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#ifndef REDIS_SERVER
#define REDIS_SERVER "redis-server"
#endif
#ifndef DLOCKD_PATH
#define DLOCKD_PATH "daemon/dlockd"
#endif

#define H_MAX_PROCS 32     /* redis-servers or daemons one test process may start */
#define H_START_MS 5000    /* how long a process may take to answer PING */
#define H_STOP_MS 5000     /* how long a process may take to exit after SIGTERM */
#define H_TAIL_LINES 40    /* log lines printed when an assertion fails */

static char h_base[256];                     /* base temporary directory of the run */
static struct h_redis *h_redises[H_MAX_PROCS]; /* redis-servers started by this process */
static struct h_dlockd *h_daemons[H_MAX_PROCS]; /* daemons started by this process */
static struct h_conn **h_conns;              /* open client connections */
static size_t h_nconns;                      /* slots used in h_conns */
static int h_used_ports[512];                /* ports handed out by h_free_port() */
static size_t h_nused_ports;                 /* entries in h_used_ports */

/* ------------------------------------------------------------------ time */

int64_t h_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void h_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ------------------------------------------------------- directories */

static void h_ensure_base(void)
{
    const char *tmp = getenv("TMPDIR");

    if (h_base[0] != '\0')
        return;
    snprintf(h_base, sizeof h_base, "%s/dlockd-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(h_base) == NULL) {
        fprintf(stderr, "harness: mkdtemp %s: %s\n", h_base, strerror(errno));
        abort();
    }
}

/* Creates a fresh directory base/prefix.XXXXXX into out. */
static void h_make_dir(char *out, size_t cap, const char *prefix)
{
    h_ensure_base();
    if ((size_t)snprintf(out, cap, "%s/%s.XXXXXX", h_base, prefix) >= cap)
        H_FAIL("temporary directory name too long under %s", h_base);
    if (mkdtemp(out) == NULL)
        H_FAIL("mkdtemp %s: %s", out, strerror(errno));
}

static int h_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

/* rm -rf dir, unless H_KEEP is set. */
static void h_remove_tree(const char *dir)
{
    if (dir[0] == '\0' || getenv("H_KEEP") != NULL)
        return;
    nftw(dir, h_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ------------------------------------------------------- processes */

static void h_close_from(int lowfd)
{
    long max = sysconf(_SC_OPEN_MAX);

    if (max < 0 || max > 65536)
        max = 65536;
    for (int fd = lowfd; fd < max; fd++)
        close(fd);
}

/* The child half of h_spawn(): never returns. env ("NAME=VALUE", NULL-terminated, may be NULL) is added. */
static void h_child_exec(char *const argv[], int logfd, pid_t parent, char *const *env)
{
    sigset_t none;
    int null;

    /* Die with the test process even when it is killed (Check's timeout, a crash). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    null = open("/dev/null", O_RDONLY);
    if (null >= 0)
        dup2(null, 0);
    dup2(logfd, 1);
    dup2(logfd, 2);
    h_close_from(3);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    for (size_t i = 0; env != NULL && env[i] != NULL; i++)
        putenv(env[i]);
    execvp(argv[0], argv);
    dprintf(2, "harness: cannot exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Forks and execs argv with stdout and stderr appended to log and env added to its environment. Returns the pid, or -1. */
static pid_t h_spawn_env(char *const argv[], const char *log, char *const *env)
{
    pid_t parent = getpid();
    int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    pid_t pid;

    if (logfd < 0)
        return -1;
    pid = fork();
    if (pid == 0)
        h_child_exec(argv, logfd, parent, env);
    close(logfd);
    return pid;
}

/* Forks and execs argv with stdout and stderr appended to log. Returns the pid, or -1. */
static pid_t h_spawn(char *const argv[], const char *log)
{
    return h_spawn_env(argv, log, NULL);
}

/* waitpid with a timeout. Returns the wait status, or -1 when it did not exit in time. */
static int h_wait_pid(pid_t pid, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    int status;

    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);

        if (w == pid || (w < 0 && errno == ECHILD))
            return w == pid ? status : 0;
        if (h_now_ms() >= deadline)
            return -1;
        h_sleep_ms(10);
    }
}

/* SIGTERM, wait up to H_STOP_MS, then SIGKILL. Returns the wait status. */
static int h_terminate(pid_t *pid)
{
    int status;

    if (*pid <= 0)
        return 0;
    kill(*pid, SIGTERM);
    status = h_wait_pid(*pid, H_STOP_MS);
    if (status < 0) {
        fprintf(stderr, "harness: pid %d ignored SIGTERM for %d ms, killing it\n", (int)*pid, H_STOP_MS);
        kill(*pid, SIGKILL);
        status = h_wait_pid(*pid, H_STOP_MS);
    }
    *pid = 0;
    return status;
}

static void h_kill9(pid_t *pid)
{
    if (*pid <= 0)
        return;
    kill(*pid, SIGKILL);
    h_wait_pid(*pid, H_STOP_MS);
    *pid = 0;
}

/* 1 when the child exited (and reaps it), else 0. */
static int h_exited(pid_t *pid)
{
    int status;

    if (*pid > 0 && waitpid(*pid, &status, WNOHANG) == *pid) {
        *pid = 0;
        return 1;
    }
    return *pid <= 0;
}

static void h_copy_extra(char **dst, const char *const *extra)
{
    size_t n = 0;

    for (; extra != NULL && extra[n] != NULL; n++) {
        if (n >= H_MAX_EXTRA)
            H_FAIL("more than %d extra arguments", H_MAX_EXTRA);
        dst[n] = strdup(extra[n]);
    }
    dst[n] = NULL;
}

static void h_free_extra(char **extra)
{
    for (size_t i = 0; extra[i] != NULL; i++)
        free(extra[i]);
}

int h_free_port(void)
{
    for (int tries = 0; tries < 100; tries++) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof sa;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int port = 0, used = 0;

        if (fd < 0)
            H_FAIL("socket: %s", strerror(errno));
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
            port = ntohs(sa.sin_port);
        close(fd);
        for (size_t i = 0; i < h_nused_ports; i++)
            used |= h_used_ports[i] == port;
        if (port == 0 || used)
            continue;
        if (h_nused_ports < sizeof h_used_ports / sizeof h_used_ports[0])
            h_used_ports[h_nused_ports++] = port;
        return port;
    }
    H_FAIL("no free port found");
}

/* Prints the last nlines lines of the file at path to stderr. */
static void h_print_tail(const char *path, int nlines)
{
    FILE *f = fopen(path, "r");
    char *data;
    long size, start;

    if (f == NULL)
        return;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    start = size > 65536 ? size - 65536 : 0;
    data = malloc((size_t)(size - start) + 1);
    fseek(f, start, SEEK_SET);
    size = (long)fread(data, 1, (size_t)(size - start), f);
    data[size] = '\0';
    fclose(f);
    start = size;
    for (int n = 0; start > 0; start--) {
        if (data[start - 1] == '\n' && start != size && ++n >= nlines)
            break;
    }
    fputs(data + start, stderr);
    if (size > 0 && data[size - 1] != '\n')
        fputc('\n', stderr);
    free(data);
}

/* ----------------------------------------------------------- RESP */

/* A growing string. */
struct h_sb {
    char *s;     /* NUL-terminated text */
    size_t len;  /* bytes in s */
    size_t cap;  /* allocated size of s */
};

static void h_sb_add(struct h_sb *sb, const char *data, size_t n)
{
    if (sb->len + n + 1 > sb->cap) {
        sb->cap = (sb->len + n + 1) * 2;
        sb->s = realloc(sb->s, sb->cap);
    }
    memcpy(sb->s + sb->len, data, n);
    sb->len += n;
    sb->s[sb->len] = '\0';
}

/* A buffered reader over one Redis connection. */
struct h_rconn {
    int fd;            /* socket */
    int64_t deadline;  /* h_now_ms() after which reads give up */
    char buf[16384];   /* bytes received */
    size_t len;        /* bytes in buf */
    size_t pos;        /* bytes of buf consumed */
};

/* Makes at least n unconsumed bytes available. Returns 0, or -1 on timeout or EOF. */
static int h_rc_need(struct h_rconn *rc, size_t n)
{
    while (rc->len - rc->pos < n) {
        struct pollfd p = {rc->fd, POLLIN, 0};
        int64_t left = rc->deadline - h_now_ms();
        ssize_t r;

        if (rc->pos > 0) {
            memmove(rc->buf, rc->buf + rc->pos, rc->len - rc->pos);
            rc->len -= rc->pos;
            rc->pos = 0;
        }
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        r = recv(rc->fd, rc->buf + rc->len, sizeof rc->buf - rc->len, 0);
        if (r <= 0) {
            errno = r == 0 ? ECONNRESET : errno;
            return -1;
        }
        rc->len += (size_t)r;
    }
    return 0;
}

/* Reads one "\r\n"-terminated line into line (without terminator). Returns 0 or -1. */
static int h_rc_line(struct h_rconn *rc, struct h_sb *line)
{
    line->len = 0;
    h_sb_add(line, "", 0);
    for (;;) {
        if (h_rc_need(rc, 1) < 0)
            return -1;
        char c = rc->buf[rc->pos++];
        if (c == '\n')
            break;
        h_sb_add(line, &c, 1);
    }
    if (line->len > 0 && line->s[line->len - 1] == '\r')
        line->s[--line->len] = '\0';
    return 0;
}

/* Reads one RESP value and appends its flat text to out. Returns 1, 0 for nil, -1 on error. */
static int h_rc_value(struct h_rconn *rc, struct h_sb *out)
{
    struct h_sb line = {0};
    long long n;
    int ret = 1;

    if (h_rc_line(rc, &line) < 0) {
        free(line.s);
        return -1;
    }
    n = line.len > 1 ? strtoll(line.s + 1, NULL, 10) : 0;
    switch (line.len > 0 ? line.s[0] : '?') {
    case '+':
    case ':':
        h_sb_add(out, line.s + 1, line.len - 1);
        break;
    case '-':
        h_sb_add(out, line.s, line.len);
        break;
    case '$':
        if (n < 0) {
            ret = 0;
        } else if (h_rc_need(rc, (size_t)n + 2) < 0) {
            ret = -1;
        } else {
            h_sb_add(out, rc->buf + rc->pos, (size_t)n);
            rc->pos += (size_t)n + 2;
        }
        break;
    case '*':
        ret = n < 0 ? 0 : 1;
        for (long long i = 0; i < n && ret >= 0; i++) {
            if (i > 0)
                h_sb_add(out, "\n", 1);
            if (h_rc_value(rc, out) < 0)
                ret = -1;
        }
        break;
    default:
        errno = EPROTO;
        ret = -1;
    }
    free(line.s);
    return ret;
}

static int h_tcp_connect(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;

    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int h_send_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = send(fd, data, len, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        data += w;
        len -= (size_t)w;
    }
    return 0;
}

/* The command on a new connection; after READONLY (a cluster replica then serves its own keys) when readonly. */
static char *h_redis_cmd_timed(int port, int timeout_ms, int readonly, int argc, const char *const *argv)
{
    struct h_rconn *rc = calloc(1, sizeof *rc);
    struct h_sb req = {0}, out = {0}, skip = {0};
    char head[64];
    int ret = -1;

    rc->fd = h_tcp_connect(port);
    rc->deadline = h_now_ms() + timeout_ms;
    if (readonly)
        h_sb_add(&req, "*1\r\n$8\r\nREADONLY\r\n", 18);
    snprintf(head, sizeof head, "*%d\r\n", argc);
    h_sb_add(&req, head, strlen(head));
    for (int i = 0; i < argc; i++) {
        snprintf(head, sizeof head, "$%zu\r\n", strlen(argv[i]));
        h_sb_add(&req, head, strlen(head));
        h_sb_add(&req, argv[i], strlen(argv[i]));
        h_sb_add(&req, "\r\n", 2);
    }
    if (rc->fd >= 0 && h_send_all(rc->fd, req.s, req.len) == 0) {
        h_sb_add(&out, "", 0);
        ret = readonly && h_rc_value(rc, &skip) <= 0 ? -1 : h_rc_value(rc, &out);
    }
    free(skip.s);
    int e = errno;
    if (rc->fd >= 0)
        close(rc->fd);
    free(rc);
    free(req.s);
    if (ret <= 0) {
        free(out.s);
        errno = ret == 0 ? 0 : e;
        return NULL;
    }
    return out.s;
}

char *h_redis_cmdv(int port, int argc, const char *const *argv)
{
    return h_redis_cmd_timed(port, H_TIMEOUT, 0, argc, argv);
}

/* Collects the NULL-terminated arguments after cmd. */
static int h_collect_args(const char **argv, int max, const char *cmd, va_list ap)
{
    int argc = 0;

    for (const char *a = cmd; a != NULL && argc < max; a = va_arg(ap, const char *))
        argv[argc++] = a;
    return argc;
}

/* 1 when the master on port has heard its replica acknowledge all it was sent (the first ACK enables the stream). */
static int h_replica_acked(int port)
{
    char *info = h_redis_cmd(port, "INFO", "replication", NULL), *p;
    long long sent = -1, acked = -2;

    if (info && (p = strstr(info, "master_repl_offset:")) != NULL)
        sent = atoll(p + strlen("master_repl_offset:"));
    if (info && (p = strstr(info, "slave0:")) != NULL && (p = strstr(p, "offset=")) != NULL)
        acked = atoll(p + strlen("offset="));
    free(info);
    return sent > 0 && acked == sent;
}

/* A write the full sync carried leaves the stream at offset 0, so one is made again every 1.5 s: the replica
 * acknowledges its offset once a second. */
struct h_redis *h_redis_replica_start(const struct h_redis *master)
{
    char port[16];
    int64_t deadline = h_now_ms() + 10000, written = 0;
    struct h_redis *replica;

    snprintf(port, sizeof port, "%d", master->port);
    replica = h_redis_start(H_ARGS("--replicaof", "127.0.0.1", port));
    while (!h_replica_acked(master->port)) {
        if (h_now_ms() > deadline)
            H_FAIL("the replica on %d did not sync with %d", replica->port, master->port);
        if (h_now_ms() - written > 1500) {
            free(h_redis_cmd(master->port, "SET", "synced", "1", NULL));
            written = h_now_ms();
        }
        h_sleep_ms(50);
    }
    return replica;
}

char *h_redis_cmd_replica(int port, const char *cmd, ...)
{
    const char *argv[64];
    va_list ap;
    int argc;

    va_start(ap, cmd);
    argc = h_collect_args(argv, 64, cmd, ap);
    va_end(ap);
    return h_redis_cmd_timed(port, H_TIMEOUT, 1, argc, argv);
}


char *h_redis_cmd(int port, const char *cmd, ...)
{
    const char *argv[64];
    va_list ap;
    int argc;

    va_start(ap, cmd);
    argc = h_collect_args(argv, 64, cmd, ap);
    va_end(ap);
    return h_redis_cmdv(port, argc, argv);
}

static long long h_to_int(char *s)
{
    char *end;
    long long v;

    if (s == NULL)
        return errno == 0 ? 0 : LLONG_MIN;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0)
        v = LLONG_MIN;
    free(s);
    return v;
}

long long h_redis_int(int port, const char *cmd, ...)
{
    const char *argv[64];
    va_list ap;
    int argc;

    va_start(ap, cmd);
    argc = h_collect_args(argv, 64, cmd, ap);
    va_end(ap);
    return h_to_int(h_redis_cmdv(port, argc, argv));
}

long long h_redis_cmdstat(int port, const char *cmd)
{
    char *info = h_redis_cmd(port, "INFO", "commandstats", NULL);
    char needle[128];
    const char *p;
    long long calls = 0;

    if (info == NULL || info[0] == '-') {
        free(info);
        return -1;
    }
    snprintf(needle, sizeof needle, "cmdstat_%s:calls=", cmd);
    p = strstr(info, needle);
    if (p != NULL)
        calls = strtoll(p + strlen(needle), NULL, 10);
    free(info);
    return calls;
}

long long h_redis_count_keys(int port, const char *pattern)
{
    char cursor[32] = "0";
    long long count = 0;

    do {
        char *r = h_redis_cmd(port, "SCAN", cursor, "MATCH", pattern, "COUNT", "1000", NULL);
        char *save = NULL, *tok;

        if (r == NULL || r[0] == '-') {
            free(r);
            return -1;
        }
        tok = strtok_r(r, "\n", &save);
        snprintf(cursor, sizeof cursor, "%s", tok ? tok : "0");
        while ((tok = strtok_r(NULL, "\n", &save)) != NULL)
            count++;
        free(r);
    } while (strcmp(cursor, "0") != 0);
    return count;
}

/* --------------------------------------------------------- redis-server */

static const char *h_redis_path(void)
{
    const char *env = getenv("REDIS_SERVER");

    if (env != NULL && *env != '\0')
        return env;
    return REDIS_SERVER[0] != '\0' ? REDIS_SERVER : "redis-server";
}

/* Spawns redis on r->port and waits for PONG. Returns 1, or 0 when it exited or did not answer. */
static int h_redis_spawn(struct h_redis *r)
{
    char port[16];
    char *argv[32 + H_MAX_EXTRA];
    int n = 0;
    int64_t deadline;

    snprintf(port, sizeof port, "%d", r->port);
    argv[n++] = (char *)h_redis_path();
    if (r->conf[0] != '\0')
        argv[n++] = r->conf;
    argv[n++] = "--port";
    argv[n++] = port;
    argv[n++] = "--bind";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--dir";
    argv[n++] = r->dir;
    argv[n++] = "--save";
    argv[n++] = "";
    argv[n++] = "--appendonly";
    argv[n++] = "no";
    argv[n++] = "--daemonize";
    argv[n++] = "no";
    argv[n++] = "--logfile";
    argv[n++] = "";
    for (size_t i = 0; r->extra[i] != NULL; i++)
        argv[n++] = r->extra[i];
    argv[n] = NULL;
    r->pid = h_spawn(argv, r->log);
    if (r->pid < 0)
        H_FAIL("cannot start %s: %s", argv[0], strerror(errno));
    for (deadline = h_now_ms() + H_START_MS; h_now_ms() < deadline; h_sleep_ms(20)) {
        const char *ping[] = {"PING"};
        char *reply;

        if (h_exited(&r->pid))
            return 0;
        reply = h_redis_cmd_timed(r->port, 500, 0, 1, ping);
        /* NOAUTH: it runs, with requirepass. */
        if (reply != NULL && (strcmp(reply, "PONG") == 0 || strncmp(reply, "-NOAUTH", 7) == 0)) {
            free(reply);
            return 1;
        }
        free(reply);
    }
    h_kill9(&r->pid);
    return 0;
}

static void h_register(void **table, void *p)
{
    for (int i = 0; i < H_MAX_PROCS; i++) {
        if (table[i] == NULL) {
            table[i] = p;
            return;
        }
    }
    H_FAIL("more than %d processes of one kind", H_MAX_PROCS);
}

/* h_redis_start with a config file (NULL for none) on a port pick() gives. */
static struct h_redis *h_redis_start_on(const char *conf, const char *const *extra, int (*pick)(void))
{
    struct h_redis *r = calloc(1, sizeof *r);

    r->owner = getpid();
    if (conf != NULL && (size_t)snprintf(r->conf, sizeof r->conf, "%s", conf) >= sizeof r->conf)
        H_FAIL("config file name too long: %s", conf);
    h_make_dir(r->dir, sizeof r->dir, "redis");
    snprintf(r->log, sizeof r->log, "%s/redis.log", r->dir);
    h_copy_extra(r->extra, extra);
    h_register((void **)h_redises, r);
    /* A port found free may be taken before redis binds it: try another one. */
    for (int attempt = 0; attempt < 3; attempt++) {
        r->port = pick();
        if (h_redis_spawn(r))
            return r;
    }
    fprintf(stderr, "---- tail of %s ----\n", r->log);
    h_print_tail(r->log, H_TAIL_LINES);
    H_FAIL("redis-server (%s) did not answer PING; log in %s", h_redis_path(), r->log);
}

struct h_redis *h_redis_start(const char *const *extra)
{
    return h_redis_start_on(NULL, extra, h_free_port);
}

struct h_redis *h_redis_start_conf(const char *conf, const char *const *extra)
{
    return h_redis_start_on(conf, extra, h_free_port);
}

int h_redis_stop(struct h_redis *r)
{
    if (r->pid > 0)
        kill(r->pid, SIGCONT);
    return h_terminate(&r->pid);
}

void h_redis_kill(struct h_redis *r)
{
    h_kill9(&r->pid);
}

void h_redis_restart(struct h_redis *r)
{
    if (r->pid > 0)
        h_redis_stop(r);
    /* The port may still be held briefly by the dying process. */
    for (int attempt = 0; attempt < 3; attempt++) {
        if (h_redis_spawn(r))
            return;
        h_sleep_ms(200);
    }
    H_FAIL("redis-server did not restart on port %d; log in %s", r->port, r->log);
}

void h_redis_pause(struct h_redis *r)
{
    if (r->pid > 0)
        kill(r->pid, SIGSTOP);
}

void h_redis_resume(struct h_redis *r)
{
    if (r->pid > 0)
        kill(r->pid, SIGCONT);
}

/* --------------------------------------------------------- Redis Sentinel */

#define H_TOPOLOGY_MS 15000 /* how long a topology may take until its sentinels see it whole */

/* The number after "field:" in INFO section of the Redis on port; LLONG_MIN when absent. */
static long long h_info_int(int port, const char *section, const char *field)
{
    char *info = h_redis_cmd(port, "INFO", section, NULL), needle[128];
    const char *p;
    long long v = LLONG_MIN;

    snprintf(needle, sizeof needle, "\n%s:", field);
    if (info != NULL && (p = strstr(info, needle)) != NULL && p[strlen(needle)] != '\r')
        v = strtoll(p + strlen(needle), NULL, 10);
    free(info);
    return v;
}

/* 1 when INFO section of the Redis on port has the line "field:value". */
static int h_info_is(int port, const char *section, const char *field, const char *value)
{
    char *info = h_redis_cmd(port, "INFO", section, NULL), needle[128];
    int found;

    snprintf(needle, sizeof needle, "\n%s:%s\r", field, value);
    found = info != NULL && strstr(info, needle) != NULL;
    free(info);
    return found;
}

/* The number after the line key in a flattened reply of pairs (SENTINEL master); LLONG_MIN when absent. */
static long long h_pair_int(const char *flat, const char *key)
{
    size_t klen = strlen(key);

    for (const char *p = flat; p != NULL; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (strncmp(p, key, klen) == 0 && p[klen] == '\n')
            return strtoll(p + klen + 1, NULL, 10);
    return LLONG_MIN;
}

/* 1 when sentinel s sees both replicas of t and the other sentinels. */
static int h_sentinel_sees_all(const struct h_sentinels *t, const struct h_redis *s)
{
    char *flat = h_redis_cmd(s->port, "SENTINEL", "master", t->name, NULL);
    int all = flat != NULL && h_pair_int(flat, "num-slaves") == H_REPLICAS &&
              h_pair_int(flat, "num-other-sentinels") == H_SENTINELS - 1;

    free(flat);
    return all;
}

/* Polls ok(t, i) until it is 1; fails the test with what after timeout_ms. */
static void h_poll(int (*ok)(const struct h_sentinels *t, int i), const struct h_sentinels *t, int i,
                   int timeout_ms, const char *what)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    while (!ok(t, i)) {
        if (h_now_ms() > deadline)
            H_FAIL("%s %d not ready after %d ms", what, i, timeout_ms);
        h_sleep_ms(50);
    }
}

static int h_replica_linked(const struct h_sentinels *t, int i)
{
    return h_info_is(t->replicas[i]->port, "replication", "master_link_status", "up");
}

static int h_sentinel_ready(const struct h_sentinels *t, int i)
{
    return h_sentinel_sees_all(t, t->sentinels[i]);
}

struct h_redis *h_sentinel_spawn(const char *name, int master_port, int quorum, const char *extra_conf)
{
    char dir[256], conf[300];

    h_tmpdir(dir, sizeof dir, "sentinel-conf");
    snprintf(conf, sizeof conf, "%s/sentinel.conf", dir);
    h_write_file(conf,
                 "sentinel monitor %s 127.0.0.1 %d %d\n"
                 "sentinel down-after-milliseconds %s 1000\n"
                 "sentinel failover-timeout %s 3000\n"
                 "sentinel parallel-syncs %s 1\n%s",
                 name, master_port, quorum, name, name, name, extra_conf ? extra_conf : "");
    return h_redis_start_conf(conf, H_ARGS("--sentinel"));
}

struct h_sentinels *h_sentinels_start(const char *name)
{
    struct h_sentinels *t = calloc(1, sizeof *t);
    char port[16];

    snprintf(t->name, sizeof t->name, "%s", name);
    t->master = h_redis_start(NULL);
    snprintf(port, sizeof port, "%d", t->master->port);
    for (int i = 0; i < H_REPLICAS; i++)
        t->replicas[i] = h_redis_start(H_ARGS("--replicaof", "127.0.0.1", port));
    for (int i = 0; i < H_REPLICAS; i++)
        h_poll(h_replica_linked, t, i, H_TOPOLOGY_MS, "replica");
    for (int i = 0; i < H_SENTINELS; i++) {
        t->sentinels[i] = h_sentinel_spawn(name, t->master->port, 2, NULL);
        snprintf(t->addr[i], sizeof t->addr[i], "127.0.0.1:%d", t->sentinels[i]->port);
    }
    for (int i = 0; i < H_SENTINELS; i++)
        h_poll(h_sentinel_ready, t, i, H_TOPOLOGY_MS, "sentinel");
    return t;
}

/* The master's port as sentinel s names it; -1 when it does not answer. */
static int h_named_port(const struct h_sentinels *t, const struct h_redis *s)
{
    char *r = s->pid > 0 ? h_redis_cmd(s->port, "SENTINEL", "get-master-addr-by-name", t->name, NULL) : NULL;
    const char *nl = r != NULL ? strchr(r, '\n') : NULL;
    int port = nl != NULL ? atoi(nl + 1) : -1;

    free(r);
    return port > 0 ? port : -1;
}

int h_sentinels_master_port(const struct h_sentinels *t)
{
    int port = -1;

    for (int i = 0; i < H_SENTINELS && port < 0; i++)
        port = h_named_port(t, t->sentinels[i]);
    return port;
}

struct h_redis *h_sentinels_master(const struct h_sentinels *t)
{
    int port = h_sentinels_master_port(t);

    if (t->master->port == port)
        return t->master;
    for (int i = 0; i < H_REPLICAS; i++)
        if (t->replicas[i]->port == port)
            return t->replicas[i];
    return NULL;
}

void h_sentinels_sync(const struct h_sentinels *t, int timeout_ms)
{
    const struct h_redis *m = h_sentinels_master(t);
    int64_t deadline = h_now_ms() + timeout_ms;
    long long want = m != NULL ? h_info_int(m->port, "replication", "master_repl_offset") : LLONG_MIN;
    const struct h_redis *all[] = { t->master, t->replicas[0], t->replicas[1] };

    if (want == LLONG_MIN)
        H_FAIL("no master offset to wait for");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (all[i] == m || all[i]->pid <= 0)
            continue;
        while (h_info_int(all[i]->port, "replication", "slave_repl_offset") < want) {
            if (h_now_ms() > deadline)
                H_FAIL("replica on port %d did not reach offset %lld within %d ms", all[i]->port, want, timeout_ms);
            h_sleep_ms(20);
        }
    }
}

int h_sentinels_wait_switch(const struct h_sentinels *t, int old_port, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    for (;;) {
        int agreed = -1, all = 1;

        for (int i = 0; i < H_SENTINELS && all; i++) {
            int port = h_named_port(t, t->sentinels[i]);

            if (t->sentinels[i]->pid <= 0)
                continue; /* stopped by the test */
            all = port > 0 && port != old_port && (agreed < 0 || port == agreed);
            agreed = port;
        }
        if (all && agreed > 0)
            return agreed;
        if (h_now_ms() > deadline)
            H_FAIL("the sentinels did not switch master %s away from port %d within %d ms", t->name, old_port,
                   timeout_ms);
        h_sleep_ms(50);
    }
}

/* Kills r, forgets it and removes its directory. */
static void h_redis_release(struct h_redis *r)
{
    for (int i = 0; i < H_MAX_PROCS; i++)
        if (h_redises[i] == r)
            h_redises[i] = NULL;
    h_redis_resume(r);
    h_kill9(&r->pid);
    h_remove_tree(r->dir);
    h_free_extra(r->extra);
    free(r);
}

void h_sentinels_stop(struct h_sentinels *t)
{
    for (int i = 0; i < H_SENTINELS; i++)
        h_redis_release(t->sentinels[i]);
    for (int i = 0; i < H_REPLICAS; i++)
        h_redis_release(t->replicas[i]);
    h_redis_release(t->master);
    free(t);
}

/* --------------------------------------------------------- Redis Cluster */

#define H_CLUSTER_MAX_SEEN 16   /* nodes one CLUSTER NODES reply may list */
#define H_CLUSTER_FORM_MS 30000 /* how long redis-cli --cluster create and the first agreement may take */

/* One line of CLUSTER NODES. */
struct h_cnode {
    char id[64];
    int port;
    int master;        /* its flags say master */
    int failed;        /* its flags say fail (not only fail?) */
    char master_id[64]; /* of its master, "-" for a master */
    const char *slots; /* the rest of the line: its slots, ranges and [migrations] */
};

/* 1 when port can be bound on loopback now. */
static int h_port_bindable(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

    if (fd < 0)
        H_FAIL("socket: %s", strerror(errno));
    ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    close(fd);
    return ok;
}

/*
 * A free port for a cluster node: Redis refuses ports above 55535 in cluster
 * mode (its bus listens on port + 10000), so both must be free, and both are
 * taken in 12000-31999, below Linux's ephemeral ports, so that no outgoing
 * connection takes them in the meantime.
 */
static int h_cluster_free_port(void)
{
    static unsigned seed;

    if (seed == 0)
        seed = (unsigned)getpid() ^ (unsigned)h_now_ms();
    for (int tries = 0; tries < 500; tries++) {
        int port = 12000 + rand_r(&seed) % 10000, used = 0;

        for (size_t i = 0; i < h_nused_ports; i++)
            used |= h_used_ports[i] == port || h_used_ports[i] == port + 10000;
        if (used || !h_port_bindable(port) || !h_port_bindable(port + 10000))
            continue;
        if (h_nused_ports + 2 <= sizeof h_used_ports / sizeof h_used_ports[0]) {
            h_used_ports[h_nused_ports++] = port;
            h_used_ports[h_nused_ports++] = port + 10000;
        }
        return port;
    }
    H_FAIL("no free port pair for a cluster node found");
}

/* 1 when the comma-separated flags hold flag. */
static int h_has_flag(const char *flags, const char *flag)
{
    size_t n = strlen(flag);

    for (const char *p = flags; p != NULL; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, flag, n) == 0 && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

/* Parses the CLUSTER NODES reply text (modified in place) into out. Returns the number of nodes, or -1. */
static int h_cluster_parse_nodes(char *text, struct h_cnode *out, int max)
{
    int n = 0;

    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char addr[300], flags[128];
        const char *colon;
        int off = 0;

        if (n == max || sscanf(line, "%63s %299s %127s %63s %*s %*s %*s %*s%n", out[n].id, addr, flags,
                               out[n].master_id, &off) != 4 || off == 0)
            return -1;
        addr[strcspn(addr, "@,")] = '\0';
        if ((colon = strrchr(addr, ':')) == NULL)
            return -1;
        out[n].port = atoi(colon + 1);
        out[n].master = h_has_flag(flags, "master");
        out[n].failed = h_has_flag(flags, "fail");
        out[n].slots = line + off;
        n++;
    }
    return n;
}

/* CLUSTER NODES of the node at port into nodes; *text must be freed. Returns the number of nodes, or -1. */
static int h_cluster_nodes(int port, struct h_cnode *nodes, char **text)
{
    *text = h_redis_cmd(port, "CLUSTER", "NODES", NULL);
    if (*text == NULL || (*text)[0] == '-')
        return -1;
    return h_cluster_parse_nodes(*text, nodes, H_CLUSTER_MAX_SEEN);
}

/* Marks the slots of one master's slot list in slot_port. Returns how many it serves. */
static int h_mark_slots(const char *slots, int port, int *slot_port)
{
    char tok[64];
    int off, served = 0;

    for (; sscanf(slots, "%63s%n", tok, &off) == 1; slots += off) {
        int a, b;

        if (tok[0] == '[') /* a migration, not an owner */
            continue;
        if (sscanf(tok, "%d-%d", &a, &b) != 2)
            b = a = atoi(tok);
        for (int s = a; s <= b && s >= 0 && s < H_CLUSTER_SLOTS; s++, served++)
            slot_port[s] = port;
    }
    return served;
}

int h_cluster_name_slot(const struct h_cluster *c, const char *name)
{
    char key[256], *slot;
    int s;

    snprintf(key, sizeof key, "dlock:{%s}:h", name);
    for (int i = 0; i < H_CLUSTER_NODES; i++) {
        if (c->node[i]->pid == 0 || (slot = h_redis_cmd(c->port[i], "CLUSTER", "KEYSLOT", key, NULL)) == NULL)
            continue;
        s = atoi(slot);
        free(slot);
        return s;
    }
    ck_abort_msg("no cluster node answers CLUSTER KEYSLOT");
    return -1;
}

int h_cluster_name_master(const struct h_cluster *c, const char *name)
{
    static int map[H_CLUSTER_SLOTS];
    int slot = h_cluster_name_slot(c, name);

    for (int i = 0; i < H_CLUSTER_NODES; i++)
        if (c->node[i]->pid != 0 && h_cluster_slot_map(c->port[i], map) > 0 && map[slot] != 0)
            return map[slot];
    ck_abort_msg("no cluster node knows the master of slot %d", slot);
    return 0;
}

void h_cluster_spread_names(const struct h_cluster *c, const char *base, char n[3][64])
{
    int home[3], k = 0;

    for (int i = 0; k < 3; i++) {
        snprintf(n[k], 64, "%s%d", base, i);
        home[k] = h_cluster_name_master(c, n[k]);
        if ((k < 1 || home[k] != home[0]) && (k < 2 || home[k] != home[1]))
            k++;
    }
    for (int i = 1; i < 3; i++) /* insertion sort by slot */
        for (int j = i; j > 0 && h_cluster_name_slot(c, n[j - 1]) > h_cluster_name_slot(c, n[j]); j--) {
            char t[64];
            memcpy(t, n[j], 64);
            memcpy(n[j], n[j - 1], 64);
            memcpy(n[j - 1], t, 64);
        }
}

int h_cluster_slot_map(int port, int *slot_port)
{
    struct h_cnode nodes[H_CLUSTER_MAX_SEEN];
    char *text;
    int n = h_cluster_nodes(port, nodes, &text), masters = 0;

    memset(slot_port, 0, H_CLUSTER_SLOTS * sizeof(*slot_port));
    for (int i = 0; i < n; i++)
        if (nodes[i].master)
            masters += h_mark_slots(nodes[i].slots, nodes[i].port, slot_port) > 0;
    free(text);
    return n < 0 ? -1 : masters;
}

int h_cluster_replica_of(int port, int master_port)
{
    struct h_cnode nodes[H_CLUSTER_MAX_SEEN];
    const char *master_id = NULL;
    char *text;
    int n = h_cluster_nodes(port, nodes, &text), found = 0;

    for (int i = 0; i < n; i++)
        if (nodes[i].port == master_port)
            master_id = nodes[i].id;
    for (int i = 0; master_id != NULL && i < n && !found; i++)
        if (!nodes[i].master && !nodes[i].failed && strcmp(nodes[i].master_id, master_id) == 0)
            found = nodes[i].port;
    free(text);
    return found;
}

int h_cluster_is_master(int port)
{
    char *role = h_redis_cmd(port, "ROLE", NULL);
    int yes = role != NULL && strncmp(role, "master\n", 7) == 0;

    free(role);
    return yes;
}

int h_cluster_index(const struct h_cluster *c, int port)
{
    for (int i = 0; i < H_CLUSTER_NODES; i++)
        if (c->port[i] == port)
            return i;
    H_FAIL("no node of the cluster on port %d", port);
}

/* 1 when the node at port says cluster_state:ok (and, for a replica, that its link to its master is up). */
static int h_cluster_node_ok(int port)
{
    char *info = h_redis_cmd(port, "CLUSTER", "INFO", NULL);
    char *repl = h_redis_cmd(port, "INFO", "replication", NULL);
    int ok = info != NULL && strstr(info, "cluster_state:ok") != NULL && repl != NULL &&
             (strstr(repl, "role:master") != NULL || strstr(repl, "master_link_status:up") != NULL);

    free(info);
    free(repl);
    return ok;
}

/* 1 when CLUSTER SLOTS of the node at port lists a replica for every range: Redis lists only the replicas whose
 * replication offset it has heard of, a while after CLUSTER NODES shows them. */
static int h_cluster_slots_have_replicas(int port)
{
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, (struct timeval){1, 0});
    redisReply *r = rc && !rc->err ? redisCommand(rc, "CLUSTER SLOTS") : NULL;
    int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > 0;

    for (size_t i = 0; ok && i < r->elements; i++)
        ok = r->element[i]->type == REDIS_REPLY_ARRAY && r->element[i]->elements >= 4;
    if (r)
        freeReplyObject(r);
    if (rc)
        redisFree(rc);
    return ok;
}

/* 1 when every running node is ok and sees every slot served as the first one does, with replicas when asked. */
static int h_cluster_agrees(const struct h_cluster *c, int replicas)
{
    static int first[H_CLUSTER_SLOTS], other[H_CLUSTER_SLOTS];
    int ref = -1;

    for (int i = 0; i < H_CLUSTER_NODES; i++) {
        int *map = ref < 0 ? first : other;

        if (c->node[i]->pid <= 0)
            continue;
        if (!h_cluster_node_ok(c->port[i]) || h_cluster_slot_map(c->port[i], map) <= 0)
            return 0;
        for (int s = 0; s < H_CLUSTER_SLOTS; s++)
            if (map[s] == 0 || (ref >= 0 && map[s] != first[s]))
                return 0;
        if (replicas && !h_cluster_slots_have_replicas(c->port[i]))
            return 0;
        for (int s = 0; replicas && s < H_CLUSTER_SLOTS; s++)
            if ((s == 0 || map[s] != map[s - 1]) && h_cluster_replica_of(c->port[i], map[s]) == 0)
                return 0;
        ref = i;
    }
    return ref >= 0;
}

int h_cluster_wait(const struct h_cluster *c, int replicas, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    for (;;) {
        if (h_cluster_agrees(c, replicas))
            return 1;
        if (h_now_ms() >= deadline)
            return 0;
        h_sleep_ms(100);
    }
}

/* redis-cli next to the redis-server the harness runs, or the one on the PATH. */
static void h_redis_cli_path(char *out, size_t cap)
{
    const char *server = h_redis_path(), *slash = strrchr(server, '/');

    snprintf(out, cap, "redis-cli");
    if (slash != NULL) {
        snprintf(out, cap, "%.*s/redis-cli", (int)(slash - server), server);
        if (access(out, X_OK) != 0)
            snprintf(out, cap, "redis-cli");
    }
}

/* Runs redis-cli --cluster create on the nodes of c; fails the test unless it succeeds. */
static void h_cluster_create(const struct h_cluster *c)
{
    char cli[300], addrs[H_CLUSTER_NODES][32], log[300];
    char *argv[8 + H_CLUSTER_NODES];
    int n = 0, status;
    pid_t pid;

    h_redis_cli_path(cli, sizeof cli);
    snprintf(log, sizeof log, "%s/cluster-create.log", c->node[0]->dir);
    argv[n++] = cli;
    argv[n++] = "--cluster";
    argv[n++] = "create";
    for (int i = 0; i < H_CLUSTER_NODES; i++) {
        snprintf(addrs[i], sizeof addrs[i], "127.0.0.1:%d", c->port[i]);
        argv[n++] = addrs[i];
    }
    argv[n++] = "--cluster-replicas";
    argv[n++] = "1";
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    if ((pid = h_spawn(argv, log)) < 0)
        H_FAIL("cannot start %s: %s", cli, strerror(errno));
    status = h_wait_pid(pid, H_CLUSTER_FORM_MS);
    if (status < 0)
        h_kill9(&pid);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        h_print_tail(log, H_TAIL_LINES);
        H_FAIL("%s --cluster create failed (status %d); log in %s", cli, status, log);
    }
}

struct h_cluster *h_cluster_start(const char *const *extra)
{
    const char *args[H_MAX_EXTRA + 1] = {"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                         "--cluster-node-timeout", "2000", "--cluster-replica-validity-factor", "0"};
    struct h_cluster *c = calloc(1, sizeof *c);
    size_t n = 8;

    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++) {
        if (n >= H_MAX_EXTRA)
            H_FAIL("more than %d extra arguments", H_MAX_EXTRA - 8);
        args[n++] = extra[i];
    }
    args[n] = NULL;
    for (int i = 0; i < H_CLUSTER_NODES; i++) {
        c->node[i] = h_redis_start_on(NULL, args, h_cluster_free_port);
        c->port[i] = c->node[i]->port;
    }
    h_cluster_create(c);
    if (!h_cluster_wait(c, 1, H_CLUSTER_FORM_MS))
        H_FAIL("the cluster on ports %d..%d did not agree within %d ms", c->port[0], c->port[5], H_CLUSTER_FORM_MS);
    return c;
}

void h_cluster_failover(struct h_cluster *c, int port)
{
    char *reply = h_redis_cmd(port, "CLUSTER", "FAILOVER", NULL);
    int64_t deadline = h_now_ms() + 10000;

    if (reply == NULL || strcmp(reply, "OK") != 0)
        H_FAIL("CLUSTER FAILOVER on %d: %s", port, reply ? reply : strerror(errno));
    free(reply);
    while (!h_cluster_is_master(port) && h_now_ms() < deadline)
        h_sleep_ms(50);
    if (!h_cluster_is_master(port) || !h_cluster_wait(c, 1, (int)(deadline - h_now_ms())))
        H_FAIL("the replica on %d did not take over within 10 s", port);
}

void h_cluster_kill(struct h_cluster *c, int port)
{
    h_redis_kill(c->node[h_cluster_index(c, port)]);
}

void h_cluster_stop(struct h_cluster *c)
{
    for (int i = 0; i < H_CLUSTER_NODES; i++)
        h_redis_kill(c->node[i]);
    free(c);
}

/* ----------------------------------------------------------------- dlockd */

static const char *h_dlockd_path(void)
{
    const char *env = getenv("DLOCKD");

    return env != NULL && *env != '\0' ? env : DLOCKD_PATH;
}

/* 1 when a new connection to port gets "OK" to PING within 500 ms. */
static int h_dlockd_pings(int port)
{
    struct h_conn *c = h_connect_try(port);
    const char *line;
    int ok;

    if (c == NULL)
        return 0;
    line = h_request(c, 500, "PING");
    ok = line != NULL && strcmp(line, "OK") == 0;
    h_close(c);
    return ok;
}

/* Spawns the daemon on d->port and waits for PING. Returns 1, or 0 when it exited or did not answer. */
static int h_dlockd_spawn(struct h_dlockd *d)
{
    char listen[64], redis[64];
    char *argv[16 + H_MAX_EXTRA];
    int n = 0;
    int64_t deadline;

    snprintf(listen, sizeof listen, "127.0.0.1:%d", d->port);
    snprintf(redis, sizeof redis, "127.0.0.1:%d", d->redis_port);
    argv[n++] = (char *)h_dlockd_path();
    if (d->conf[0] != '\0')
        argv[n++] = d->conf;
    argv[n++] = "--listen";
    argv[n++] = listen;
    if (d->redis_port) {
        argv[n++] = "--redis";
        argv[n++] = redis;
    }
    argv[n++] = "--log-level";
    argv[n++] = "debug";
    for (size_t i = 0; d->extra[i] != NULL; i++)
        argv[n++] = d->extra[i];
    argv[n] = NULL;
    d->pid = h_spawn_env(argv, d->log, d->env);
    if (d->pid < 0)
        H_FAIL("cannot start %s: %s", argv[0], strerror(errno));
    for (deadline = h_now_ms() + H_START_MS; h_now_ms() < deadline; h_sleep_ms(20)) {
        if (h_exited(&d->pid))
            return 0;
        if (h_dlockd_pings(d->port))
            return 1;
    }
    h_kill9(&d->pid);
    return 0;
}

/* Fails the test; h_fail_at() prints the log tail of every registered daemon, d included. */
static void h_dlockd_fail_start(struct h_dlockd *d, const char *what)
{
    H_FAIL("dlockd (%s) did not %s on port %d; log in %s", h_dlockd_path(), what, d->port, d->log);
}

struct h_dlockd *h_dlockd_start(int redis_port, const char *const *extra)
{
    return h_dlockd_start_with(redis_port, NULL, NULL, extra);
}

struct h_dlockd *h_dlockd_start_with(int redis_port, const char *conf, const char *const *env,
                                     const char *const *extra)
{
    struct h_dlockd *d = calloc(1, sizeof *d);

    d->owner = getpid();
    if (conf != NULL && (size_t)snprintf(d->conf, sizeof d->conf, "%s", conf) >= sizeof d->conf)
        H_FAIL("config file name too long: %s", conf);
    h_copy_extra(d->env, env);
    d->redis_port = redis_port;
    h_make_dir(d->dir, sizeof d->dir, "dlockd");
    snprintf(d->log, sizeof d->log, "%s/dlockd.log", d->dir);
    h_copy_extra(d->extra, extra);
    h_register((void **)h_daemons, d);
    for (int attempt = 0; attempt < 3; attempt++) {
        d->port = h_free_port();
        if (h_dlockd_spawn(d))
            return d;
    }
    h_dlockd_fail_start(d, "start and answer PING");
    return NULL;
}

/* 1 when the log at path has a report of a sanitizer (ASan, UBSan, LeakSanitizer). */
static int h_log_has_sanitizer_report(const char *path)
{
    static const char *const marks[] = { "ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:" };
    char line[1024];
    FILE *f = fopen(path, "r");
    int found = 0;

    if (f == NULL)
        return 0;
    while (!found && fgets(line, sizeof line, f))
        for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++)
            found |= strstr(line, marks[i]) != NULL;
    fclose(f);
    return found;
}

static int h_in_cleanup; /* set while h_cleanup() runs, maybe from atexit */

/* Fails the test, or (from atexit, where Check cannot be told) the whole process. */
static void h_dlockd_bad_stop(const struct h_dlockd *d, const char *what)
{
    h_print_tail(d->log, 60);
    if (h_in_cleanup) {
        fprintf(stderr, "harness: dlockd on port %d: %s (log %s)\n", d->port, what, d->log);
        _exit(1);
    }
    H_FAIL("dlockd on port %d: %s (log %s)", d->port, what, d->log);
}

int h_dlockd_stop(struct h_dlockd *d)
{
    int running = d->pid > 0, status = h_terminate(&d->pid);

    /* A clean shutdown exits 0; sanitizer reports land in the log. */
    if (h_log_has_sanitizer_report(d->log))
        h_dlockd_bad_stop(d, "sanitizer report in its log");
    if (running && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        h_dlockd_bad_stop(d, "did not exit 0 on SIGTERM");
    return status;
}

void h_dlockd_kill(struct h_dlockd *d)
{
    h_kill9(&d->pid);
}

void h_dlockd_restart(struct h_dlockd *d)
{
    if (d->pid > 0)
        h_dlockd_stop(d);
    for (int attempt = 0; attempt < 3; attempt++) {
        if (h_dlockd_spawn(d))
            return;
        h_sleep_ms(200);
    }
    h_dlockd_fail_start(d, "restart");
}

int h_dlockd_run(const char *const *args, char *out, size_t cap, int timeout_ms)
{
    char dir[256], log[300];
    char *argv[2 + H_MAX_EXTRA];
    size_t n = 0, got;
    pid_t pid;
    int status;
    FILE *f;

    h_make_dir(dir, sizeof dir, "run");
    snprintf(log, sizeof log, "%s/out.log", dir);
    argv[n++] = (char *)h_dlockd_path();
    for (size_t i = 0; args != NULL && args[i] != NULL; i++) {
        if (n > H_MAX_EXTRA)
            H_FAIL("more than %d arguments", H_MAX_EXTRA);
        argv[n++] = (char *)args[i];
    }
    argv[n] = NULL;
    if ((pid = h_spawn(argv, log)) < 0)
        H_FAIL("cannot start %s: %s", argv[0], strerror(errno));
    status = h_wait_pid(pid, timeout_ms);
    if (status < 0)
        h_kill9(&pid);
    out[0] = '\0';
    if ((f = fopen(log, "r")) != NULL) {
        got = fread(out, 1, cap - 1, f);
        out[got] = '\0';
        fclose(f);
    }
    h_remove_tree(dir);
    return status;
}

char *h_dlockd_log_read(const struct h_dlockd *d)
{
    FILE *f = fopen(d->log, "r");
    struct h_sb sb = {0};
    char chunk[8192];
    size_t n;

    h_sb_add(&sb, "", 0);
    if (f == NULL)
        return sb.s;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        h_sb_add(&sb, chunk, n);
    fclose(f);
    return sb.s;
}

int h_log_count(const struct h_dlockd *d, const char *const *needles)
{
    char *log = h_dlockd_log_read(d), *save = NULL;
    int count = 0;

    for (char *line = strtok_r(log, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        int all = 1;

        for (size_t i = 0; needles[i] != NULL && all; i++)
            all = strstr(line, needles[i]) != NULL;
        count += all;
    }
    free(log);
    return count;
}

int h_log_wait(const struct h_dlockd *d, const char *const *needles, int n, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    int count;

    while ((count = h_log_count(d, needles)) < n && h_now_ms() < deadline)
        h_sleep_ms(20);
    return count;
}

void h_dlockd_log_tail(const struct h_dlockd *d, int nlines)
{
    fprintf(stderr, "---- tail of %s (dlockd on port %d, redis %d) ----\n", d->log, d->port, d->redis_port);
    h_print_tail(d->log, nlines);
    fprintf(stderr, "---- end of %s ----\n", d->log);
}

void h_dump_logs(void)
{
    for (int i = 0; i < H_MAX_PROCS; i++) {
        if (h_daemons[i] != NULL && h_daemons[i]->owner == getpid())
            h_dlockd_log_tail(h_daemons[i], H_TAIL_LINES);
    }
}

/* ------------------------------------------------------------- clients */

static void h_track_conn(struct h_conn *c)
{
    for (size_t i = 0; i < h_nconns; i++) {
        if (h_conns[i] == NULL) {
            h_conns[i] = c;
            return;
        }
    }
    h_conns = realloc(h_conns, (h_nconns + 1) * sizeof *h_conns);
    h_conns[h_nconns++] = c;
}

struct h_conn *h_connect_try(int port)
{
    int fd = h_tcp_connect(port);
    struct h_conn *c;

    if (fd < 0)
        return NULL;
    c = calloc(1, sizeof *c);
    c->fd = fd;
    h_track_conn(c);
    return c;
}

struct h_conn *h_connect_from_try(int port, const char *src)
{
    struct sockaddr_in from = {.sin_family = AF_INET}, to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct h_conn *c;

    if (fd < 0)
        return NULL;
    if (inet_pton(AF_INET, src, &from.sin_addr) != 1 || bind(fd, (struct sockaddr *)&from, sizeof from) < 0 ||
        connect(fd, (struct sockaddr *)&to, sizeof to) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c = calloc(1, sizeof *c);
    c->fd = fd;
    h_track_conn(c);
    return c;
}

struct h_conn *h_connect_unix_try(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct h_conn *c;

    if (fd < 0)
        return NULL;
    if (strlen(path) >= sizeof sa.sun_path || (strcpy(sa.sun_path, path), connect(fd, (struct sockaddr *)&sa, sizeof sa)) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    c = calloc(1, sizeof *c);
    c->fd = fd;
    h_track_conn(c);
    return c;
}

void h_close(struct h_conn *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < h_nconns; i++) {
        if (h_conns[i] == c)
            h_conns[i] = NULL;
    }
    if (c->fd >= 0)
        close(c->fd);
    for (size_t i = 0; i < c->nqueue; i++)
        free(c->queue[i]);
    free(c->queue);
    free(c->buf);
    free(c->last);
    free(c);
}

int h_send_raw(struct h_conn *c, const void *data, size_t len)
{
    if (c->fd < 0 || h_send_all(c->fd, data, len) < 0)
        return -1;
    return 0;
}

static int h_vsend(struct h_conn *c, const char *fmt, va_list ap)
{
    char *line = NULL;
    int n = vasprintf(&line, fmt, ap);
    int ret;

    if (n < 0)
        return -1;
    line = realloc(line, (size_t)n + 2);
    line[n] = '\n';
    ret = h_send_raw(c, line, (size_t)n + 1);
    free(line);
    return ret;
}

int h_send(struct h_conn *c, const char *fmt, ...)
{
    va_list ap;
    int ret;

    va_start(ap, fmt);
    ret = h_vsend(c, fmt, ap);
    va_end(ap);
    return ret;
}

/* Moves the complete lines of c->buf to c->queue. */
static void h_split_lines(struct h_conn *c)
{
    size_t start = 0;

    for (size_t i = 0; i < c->len; i++) {
        if (c->buf[i] != '\n')
            continue;
        size_t end = i;
        if (end > start && c->buf[end - 1] == '\r')
            end--;
        if (c->nqueue == c->qcap) {
            c->qcap = c->qcap ? c->qcap * 2 : 16;
            c->queue = realloc(c->queue, c->qcap * sizeof *c->queue);
        }
        c->queue[c->nqueue++] = strndup(c->buf + start, end - start);
        start = i + 1;
    }
    memmove(c->buf, c->buf + start, c->len - start);
    c->len -= start;
}

/* Waits until deadline for bytes. Returns 1 when some arrived, 0 on timeout, -1 at EOF. */
static int h_fill(struct h_conn *c, int64_t deadline)
{
    int64_t left = deadline - h_now_ms();
    struct pollfd p = {c->fd, POLLIN, 0};
    ssize_t r;

    if (c->fd < 0 || c->eof)
        return -1;
    if (poll(&p, 1, left > 0 ? (int)left : 0) <= 0)
        return 0;
    if (c->cap - c->len < 4096) {
        c->cap = c->cap * 2 + 8192;
        c->buf = realloc(c->buf, c->cap);
    }
    r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
    if (r < 0 && errno == EINTR)
        return 0;
    if (r <= 0) {
        c->eof = 1;
        return -1;
    }
    c->len += (size_t)r;
    h_split_lines(c);
    return 1;
}

typedef int (*h_pred)(const char *line, const char *arg);

static int h_is_any(const char *line, const char *arg)
{
    (void)line;
    (void)arg;
    return 1;
}

static int h_is_reply(const char *line, const char *arg)
{
    (void)arg;
    return line[0] != '*';
}

static int h_is_tagged(const char *line, const char *tag)
{
    size_t n = strlen(tag);

    return line[0] == '#' && strncmp(line + 1, tag, n) == 0 && line[n + 1] == ' ';
}

static int h_is_event(const char *line, const char *pattern)
{
    return line[0] == '*' && (pattern == NULL || h_match(line, pattern));
}

/* Takes the first queued (or arriving) line for which pred holds; NULL on timeout or EOF. */
static const char *h_take(struct h_conn *c, h_pred pred, const char *arg, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    for (;;) {
        for (size_t i = 0; i < c->nqueue; i++) {
            if (!pred(c->queue[i], arg))
                continue;
            free(c->last);
            c->last = c->queue[i];
            memmove(c->queue + i, c->queue + i + 1, (c->nqueue - i - 1) * sizeof *c->queue);
            c->nqueue--;
            return c->last;
        }
        if (c->fd < 0 || c->eof || h_now_ms() >= deadline)
            return NULL;
        h_fill(c, deadline);
    }
}

const char *h_line(struct h_conn *c, int timeout_ms)
{
    return h_take(c, h_is_any, NULL, timeout_ms);
}

const char *h_reply(struct h_conn *c, int timeout_ms)
{
    return h_take(c, h_is_reply, NULL, timeout_ms);
}

const char *h_reply_tag(struct h_conn *c, const char *tag, int timeout_ms)
{
    return h_take(c, h_is_tagged, tag, timeout_ms);
}

const char *h_event(struct h_conn *c, const char *pattern, int timeout_ms)
{
    return h_take(c, h_is_event, pattern, timeout_ms);
}

const char *h_request(struct h_conn *c, int timeout_ms, const char *fmt, ...)
{
    va_list ap;
    int ret;

    va_start(ap, fmt);
    ret = h_vsend(c, fmt, ap);
    va_end(ap);
    return ret < 0 ? NULL : h_reply(c, timeout_ms);
}

int h_wait_eof(struct h_conn *c, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    while (!c->eof && c->fd >= 0 && h_now_ms() < deadline)
        h_fill(c, deadline);
    return c->eof;
}

/* ------------------------------------------------------- reply parsing */

static int h_in_class(char k, char ch)
{
    switch (k) {
    case 'd':
        return ch >= '0' && ch <= '9';
    case 'x':
        return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
    default: /* 'w' */
        return ch != ' ' && ch != '\0';
    }
}

int h_match(const char *s, const char *p)
{
    for (;;) {
        if (*p == '\0')
            return *s == '\0';
        if (p[0] == '%' && p[1] == '*') {
            for (const char *t = s + strlen(s); t >= s; t--) {
                if (h_match(t, p + 2))
                    return 1;
            }
            return 0;
        }
        if (p[0] == '%' && (p[1] == 'd' || p[1] == 'x' || p[1] == 'w')) {
            size_t n = 0;

            while (s[n] != '\0' && h_in_class(p[1], s[n]))
                n++;
            for (; n > 0; n--) {
                if (h_match(s + n, p + 2))
                    return 1;
            }
            return 0;
        }
        if (p[0] == '%' && p[1] == '%')
            p++;
        if (*s != *p)
            return 0;
        s++;
        p++;
    }
}

int h_kv(const char *line, const char *key, char *out, size_t cap)
{
    size_t klen = strlen(key);

    for (const char *p = line; p != NULL && *p != '\0';) {
        while (*p == ' ')
            p++;
        if (strncmp(p, key, klen) == 0 && p[klen] == '=') {
            const char *v = p + klen + 1;
            size_t n = strcspn(v, " ");

            if (n + 1 > cap)
                return -1;
            memcpy(out, v, n);
            out[n] = '\0';
            return 0;
        }
        p = strchr(p, ' ');
    }
    return -1;
}

long long h_kv_int(const char *line, const char *key)
{
    char buf[64], *end;
    long long v;

    if (line == NULL || h_kv(line, key, buf, sizeof buf) < 0 || buf[0] == '\0')
        return LLONG_MIN;
    errno = 0;
    v = strtoll(buf, &end, 10);
    return *end != '\0' || errno != 0 ? LLONG_MIN : v;
}

/* A malloc'd copy of json without whitespace outside strings. */
static char *h_json_compact(const char *json)
{
    char *out = malloc(strlen(json) + 1), *o = out;
    int in_str = 0;

    for (const char *p = json; *p != '\0'; p++) {
        if (in_str && *p == '\\' && p[1] != '\0') {
            *o++ = *p++;
            *o++ = *p;
            continue;
        }
        if (*p == '"')
            in_str = !in_str;
        if (!in_str && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
            continue;
        *o++ = *p;
    }
    *o = '\0';
    return out;
}

int h_json_has(const char *json, const char *needle)
{
    char *c = h_json_compact(json);
    int found = strstr(c, needle) != NULL;

    free(c);
    return found;
}

long long h_info_num(struct h_conn *c, const char *key)
{
    return h_json_int(H_REQ(c, "OK {%*}", "INFO"), key);
}

char *h_holds_at(int port, const char *name)
{
    char key[256], *v, *hid, *val, *out;

    snprintf(key, sizeof key, "dlock:{%s}:h", name);
    v = h_redis_cmd(port, "HGETALL", key, NULL);
    if (v && v[0])
        return v;
    free(v);
    /* the one-key form (scripts/common.lua): "end hid value" */
    snprintf(key, sizeof key, "dlock:{%s}:k", name);
    v = h_redis_cmd(port, "GET", key, NULL);
    if (v == NULL || (hid = strchr(v, ' ')) == NULL || (val = strchr(hid + 1, ' ')) == NULL) {
        free(v);
        return strdup("");
    }
    out = malloc(strlen(v) + 1); /* "hid\nvalue" is shorter */
    *val = '\0';
    sprintf(out, "%s\n%s", hid + 1, val + 1);
    free(v);
    return out;
}

int h_holds_gone(int port, const char *name, int ms)
{
    for (int64_t deadline = h_now_ms() + ms;; h_sleep_ms(50)) {
        char *v = h_holds_at(port, name);
        int none = v[0] == '\0';
        free(v);
        if (none || h_now_ms() > deadline)
            return none;
    }
}

int h_is_free(struct h_conn *c, const char *name)
{
    const char *r = h_request(c, 5000, "LOCK %s wait=0", name);

    ck_assert_msg(r != NULL, "LOCK %s: no answer", name);
    if (strncmp(r, "OK", 2) != 0)
        return 0;
    H_REQ(c, "OK count=0", "UNLOCK %s", name);
    return 1;
}

const char *h_wait_info(struct h_conn *c, const char *needle, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    const char *info;

    for (;;) {
        info = H_REQ(c, "OK {%*}", "INFO");
        if (h_json_has(info, needle))
            return info;
        if (h_now_ms() > deadline)
            H_FAIL("INFO never had %s: %s", needle, info);
        h_sleep_ms(50);
    }
}

long long h_json_int(const char *json, const char *key)
{
    char *c = h_json_compact(json), *p, *end, needle[256];
    long long v = LLONG_MIN;

    snprintf(needle, sizeof needle, "\"%s\":", key);
    p = strstr(c, needle);
    if (p != NULL) {
        p += strlen(needle);
        v = strtoll(p, &end, 10);
        if (end == p)
            v = LLONG_MIN;
    }
    free(c);
    return v;
}

/* Polls STATUS until "waiters" reaches n (exact: equals it). */
static int h_poll_waiters(struct h_conn *c, const char *name, long long n, int exact, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;

    do {
        const char *r;
        long long w;

        if (h_send(c, "#st STATUS %s", name) < 0)
            return 0;
        r = h_reply_tag(c, "st", H_TIMEOUT);
        w = r ? h_json_int(r, "waiters") : LLONG_MIN;
        if (r != NULL && (exact ? w == n : w >= n))
            return 1;
        h_sleep_ms(20);
    } while (h_now_ms() < deadline);
    return 0;
}

int h_wait_waiters(struct h_conn *c, const char *name, long long n, int timeout_ms)
{
    return h_poll_waiters(c, name, n, 0, timeout_ms);
}

int h_wait_waiters_eq(struct h_conn *c, const char *name, long long n, int timeout_ms)
{
    return h_poll_waiters(c, name, n, 1, timeout_ms);
}

void h_dlockd_run_at(const char *file, int line, char *out, size_t cap, int want, const char *const *args)
{
    int st = h_dlockd_run(args, out, cap, 5000);

    if (st < 0)
        h_fail_at(file, line, "dlockd %s %s ... did not exit within 5 s; output: %s", args[0], args[1] ? args[1] : "",
                  out);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != want)
        h_fail_at(file, line, "dlockd %s %s ...: status %#x, expected exit %d; output: %s", args[0],
                  args[1] ? args[1] : "", st, want, out);
}

int h_count_lines(const char *text)
{
    int n = 0;

    for (; *text != '\0'; text++)
        n += *text == '\n';
    return n;
}

/* ------------------------------------------------------- files and HTTP */

void h_tmpdir(char *out, size_t cap, const char *prefix)
{
    h_make_dir(out, cap, prefix);
}

void h_write_file(const char *path, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    FILE *f;
    int bad;

    /* Written aside and renamed, so a daemon never reads half a file. */
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if ((f = fopen(tmp, "w")) == NULL)
        H_FAIL("cannot write %s: %s", tmp, strerror(errno));
    va_start(ap, fmt);
    bad = vfprintf(f, fmt, ap) < 0;
    va_end(ap);
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) < 0)
        H_FAIL("cannot write %s: %s", path, strerror(errno));
}

int h_http_get(int port, const char *path, char **headers, char **body, int timeout_ms)
{
    return h_http_get_auth(port, path, NULL, headers, body, timeout_ms);
}

int h_http_get_auth(int port, const char *path, const char *auth, char **headers, char **body, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    int fd = h_tcp_connect(port), code = -1, closed = 0;
    struct h_sb resp = {0};
    char req[1024], chunk[8192], *end;

    if (headers)
        *headers = NULL;
    if (body)
        *body = NULL;
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n%s%s%s\r\n", path, port,
             auth ? "Authorization: " : "", auth ? auth : "", auth ? "\r\n" : "");
    h_sb_add(&resp, "", 0);
    if (fd >= 0 && h_send_all(fd, req, strlen(req)) == 0) {
        /* HTTP/1.0 without keep-alive: the response ends when the server closes. */
        while (!closed) {
            struct pollfd p = {fd, POLLIN, 0};
            int64_t left = deadline - h_now_ms();
            ssize_t r;

            if (left <= 0 || poll(&p, 1, (int)left) <= 0)
                break;
            r = recv(fd, chunk, sizeof chunk, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                closed = 1;
            else
                h_sb_add(&resp, chunk, (size_t)r);
        }
    }
    if (closed && (end = strstr(resp.s, "\r\n\r\n")) != NULL && sscanf(resp.s, "HTTP/1.%*d %d", &code) == 1) {
        if (headers)
            *headers = strndup(resp.s, (size_t)(end - resp.s));
        if (body)
            *body = strdup(end + 4);
    }
    if (fd >= 0)
        close(fd);
    free(resp.s);
    return code;
}

/* ------------------------------------------------------------- assertions */

void h_fail_at(const char *file, int line, const char *fmt, ...)
{
    char msg[4096];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s:%d: %s\n", file, line, msg);
    h_dump_logs();
    _ck_assert_failed(file, line, "Failed", "%s", msg);
}

struct h_conn *h_connect_at(const char *file, int line, int port)
{
    struct h_conn *c = h_connect_try(port);

    if (c == NULL)
        h_fail_at(file, line, "cannot connect to port %d: %s", port, strerror(errno));
    return c;
}

/* The queued lines of c, for failure messages. */
static void h_queued(const struct h_conn *c, char *out, size_t cap)
{
    size_t n = 0;

    out[0] = '\0';
    for (size_t i = 0; i < c->nqueue && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, " [%s]", c->queue[i]);
}

static const char *h_expect_reply(const char *file, int line, struct h_conn *c, const char *pattern,
                                  int timeout_ms, const char *req)
{
    const char *r = h_reply(c, timeout_ms);
    char queued[1024];

    h_queued(c, queued, sizeof queued);
    if (r == NULL)
        h_fail_at(file, line, "%s%s%s: expected '%s', got %s within %d ms; queued:%s", req ? "'" : "",
                  req ? req : "", req ? "'" : "reply", pattern, c->eof ? "connection closed" : "nothing",
                  timeout_ms, queued);
    if (!h_match(r, pattern))
        h_fail_at(file, line, "%s%s%s: expected '%s', got '%s'", req ? "'" : "", req ? req : "",
                  req ? "'" : "reply", pattern, r);
    return r;
}

const char *h_req_at(const char *file, int line, struct h_conn *c, const char *pattern, const char *fmt, ...)
{
    char req[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(req, sizeof req, fmt, ap);
    va_end(ap);
    if (h_send(c, "%s", req) < 0)
        h_fail_at(file, line, "'%s': cannot send, connection broken", req);
    return h_expect_reply(file, line, c, pattern, H_TIMEOUT, req);
}

const char *h_reply_at(const char *file, int line, struct h_conn *c, const char *pattern, int timeout_ms)
{
    return h_expect_reply(file, line, c, pattern, timeout_ms, NULL);
}

struct h_conn *h_client_at(const char *file, int line, const struct h_dlockd *d, const char *hello_args)
{
    struct h_conn *c = h_connect_at(file, line, d->port);
    const char *r;

    if (hello_args != NULL && hello_args[0] != '\0')
        r = h_req_at(file, line, c, "OK session=%x%*", "HELLO %s", hello_args);
    else
        r = h_req_at(file, line, c, "OK session=%x%*", "HELLO");
    h_kv(r, "session", c->session, sizeof c->session);
    h_kv(r, "secret", c->secret, sizeof c->secret);
    return c;
}

const char *h_event_at(const char *file, int line, struct h_conn *c, const char *pattern, int timeout_ms)
{
    const char *e = h_event(c, pattern, timeout_ms);
    char queued[1024];

    if (e == NULL) {
        h_queued(c, queued, sizeof queued);
        h_fail_at(file, line, "no event matching '%s' within %d ms (%s); queued:%s", pattern, timeout_ms,
                  c->eof ? "connection closed" : "connection open", queued);
    }
    return e;
}

void h_silent_at(const char *file, int line, struct h_conn *c, int ms)
{
    const char *r = h_reply(c, ms);

    if (r != NULL)
        h_fail_at(file, line, "expected no reply for %d ms, got '%s'", ms, r);
}

void h_eof_at(const char *file, int line, struct h_conn *c, int timeout_ms)
{
    const char *r = h_reply(c, timeout_ms);

    if (r != NULL)
        h_fail_at(file, line, "expected the connection to close, got '%s'", r);
    if (!c->eof)
        h_fail_at(file, line, "connection still open after %d ms", timeout_ms);
}

long long h_kv_int_at(const char *file, int line, const char *reply, const char *key)
{
    long long v = h_kv_int(reply, key);

    if (v == LLONG_MIN)
        h_fail_at(file, line, "no number %s= in '%s'", key, reply ? reply : "(null)");
    return v;
}

/* ------------------------------------------------------------- lifecycle */

void h_cleanup(void)
{
    pid_t me = getpid();

    h_in_cleanup = 1;
    for (size_t i = 0; i < h_nconns; i++) {
        struct h_conn *c = h_conns[i];
        h_conns[i] = NULL;
        h_close(c);
    }
    for (int i = 0; i < H_MAX_PROCS; i++) {
        struct h_dlockd *d = h_daemons[i];

        if (d == NULL || d->owner != me)
            continue;
        h_dlockd_stop(d);
        h_remove_tree(d->dir);
        h_free_extra(d->extra);
        h_free_extra(d->env);
        free(d);
        h_daemons[i] = NULL;
    }
    for (int i = 0; i < H_MAX_PROCS; i++) {
        struct h_redis *r = h_redises[i];

        if (r == NULL || r->owner != me)
            continue;
        h_redis_resume(r);
        h_kill9(&r->pid);
        h_remove_tree(r->dir);
        h_free_extra(r->extra);
        free(r);
        h_redises[i] = NULL;
    }
    h_in_cleanup = 0;
}

void h_init(void)
{
    static int done;

    h_ensure_base();
    if (!done)
        atexit(h_cleanup);
    done = 1;
}

void h_fini(int failed)
{
    h_cleanup();
    if (h_base[0] == '\0')
        return;
    if (failed || getenv("H_KEEP") != NULL) {
        fprintf(stderr, "harness: logs kept in %s\n", h_base);
        return;
    }
    nftw(h_base, h_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

struct h_redis *R;
struct h_dlockd *D;

void h_setup_redis(void)
{
    R = h_redis_start(NULL);
    D = NULL;
}

void h_setup_both(void)
{
    h_setup_redis();
    D = h_dlockd_start(R->port, NULL);
}

void h_teardown(void)
{
    h_cleanup();
    R = NULL;
    D = NULL;
}

int h_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    int failed;

    h_init();
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    h_fini(failed);
    return failed;
}
