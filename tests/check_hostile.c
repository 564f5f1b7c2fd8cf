/* check_hostile.c - hostile load against a real dlockd and Redis: slowloris, a 1 MiB line,
 * a client that pipelines without reading, 10 000 waiters whose sessions die, 10 000
 * connections; each while a probe client measures its latency. Prints the figures. */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MANY 10000      /* connections, and waiters */
#define SLOW 1000       /* slowloris connections */
#define BATCH 250       /* connections opened before their first replies are read */
#define WAITER_BATCH 100 /* waiters sent before they are seen queued */
#define PROBE_P99_MS 250 /* bound on the probe's LOCK+UNLOCK p99 under load (ASan builds too) */


/* ------------------------------------------------------------ raw clients */

/* A client socket driven by hand, for thousands at once. */
struct peer {
    int fd;         /* -1 once closed */
    int eof;        /* the server closed it */
    int64_t born;   /* h_now_ms() at connect */
    int64_t died;   /* h_now_ms() at EOF */
    int lines;      /* complete lines received */
    int bye;        /* got "* BYE ..." */
    char last[128]; /* the last complete line */
    char part[128]; /* the line being received */
    size_t plen;
};

/* Connects to 127.0.0.1:port, non-blocking afterwards; rcvbuf > 0 shrinks the receive buffer first. */
static int raw_connect(int port, int rcvbuf)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        H_FAIL("socket: %s", strerror(errno));
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        H_FAIL("connect to port %d: %s", port, strerror(errno));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Sends what fits now; returns bytes sent, or -1 once the connection is broken. */
static ssize_t raw_send(int fd, const void *data, size_t len)
{
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    return n;
}

/* Reads what p has; splits lines. Returns 1 if something happened. */
static int peer_read(struct peer *p)
{
    char buf[512];
    ssize_t n;

    if (p->fd < 0 || p->eof)
        return 0;
    n = recv(p->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (n <= 0) {
        p->eof = 1;
        p->died = h_now_ms();
        return 1;
    }
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] != '\n') {
            if (p->plen < sizeof p->part - 1)
                p->part[p->plen++] = buf[i];
            continue;
        }
        p->part[p->plen] = '\0';
        memcpy(p->last, p->part, p->plen + 1);
        p->bye |= strncmp(p->last, "* BYE", 5) == 0;
        p->lines++;
        p->plen = 0;
    }
    return 1;
}

/* Polls peers [0, n) for up to timeout_ms and reads whatever is ready. */
static void peers_poll(struct peer *p, int n, int timeout_ms)
{
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    int m = 0;

    for (int i = 0; i < n; i++) {
        if (p[i].fd >= 0 && !p[i].eof) {
            pf[m].fd = p[i].fd;
            pf[m].events = POLLIN;
            m++;
        }
    }
    if (m > 0 && poll(pf, (nfds_t)m, timeout_ms) > 0) {
        for (int i = 0, k = 0; i < n; i++) {
            if (p[i].fd >= 0 && !p[i].eof) {
                if (pf[k].revents)
                    peer_read(&p[i]);
                k++;
            }
        }
    }
    free(pf);
}

/* Waits (up to timeout_ms) until every peer in [0, n) has `lines` lines or EOF. Returns how many have. */
static int peers_wait_lines(struct peer *p, int n, int lines, int timeout_ms)
{
    int64_t deadline = h_now_ms() + timeout_ms;
    int done;

    for (;;) {
        done = 0;
        for (int i = 0; i < n; i++)
            done += p[i].lines >= lines || p[i].eof;
        if (done == n || h_now_ms() >= deadline)
            return done;
        peers_poll(p, n, 50);
    }
}

/* Opens peers [i, end): each sends first (may be NULL) and, when want is not NULL, its first
 * reply must match want. */
static void peers_open_range(struct peer *p, int i, int end, int port, const char *first, const char *want)
{
    for (int k = i; k < end; k++) {
        memset(&p[k], 0, sizeof p[k]);
        p[k].fd = raw_connect(port, 0);
        p[k].born = h_now_ms();
        if (first && raw_send(p[k].fd, first, strlen(first)) != (ssize_t)strlen(first))
            H_FAIL("peer %d: could not send its first request", k);
    }
    if (want == NULL)
        return;
    if (peers_wait_lines(p + i, end - i, 1, 30000) != end - i)
        H_FAIL("peers %d..%d: not all answered within 30 s", i, end - 1);
    for (int k = i; k < end; k++)
        if (p[k].eof || !h_match(p[k].last, want))
            H_FAIL("peer %d: got '%s' (eof %d), want '%s'", k, p[k].last, p[k].eof, want);
}

/* Opens n peers BATCH at a time, reading the first replies of a batch (when want is not NULL)
 * before the next one opens, so that the listen backlog never overflows. */
static void peers_open(struct peer *p, int n, int port, const char *first, const char *want)
{
    for (int i = 0; i < n; i += BATCH)
        peers_open_range(p, i, i + BATCH < n ? i + BATCH : n, port, first, want);
}

static void peers_close(struct peer *p, int n)
{
    for (int i = 0; i < n; i++) {
        if (p[i].fd >= 0)
            close(p[i].fd);
        p[i].fd = -1;
    }
}

/* ------------------------------------------------------------ figures */

/* Latencies in microseconds. */
struct lat {
    int64_t *us;
    int n, cap;
};

static void lat_add(struct lat *l, int64_t us)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->us = realloc(l->us, (size_t)l->cap * sizeof *l->us);
    }
    l->us[l->n++] = us;
}

static void lat_free(struct lat *l)
{
    free(l->us);
    memset(l, 0, sizeof(*l));
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* The q-quantile (0..1) in ms; sorts. */
static double lat_q(struct lat *l, double q)
{
    int i;

    if (l->n == 0)
        return 0;
    qsort(l->us, (size_t)l->n, sizeof *l->us, cmp_i64);
    i = (int)(q * (l->n - 1) + 0.5);
    return (double)l->us[i] / 1000.0;
}

static void lat_print(const char *what, struct lat *l)
{
    printf("hostile:   %s: %d LOCK+UNLOCK, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", what, l->n, lat_q(l, 0.5),
           lat_q(l, 0.99), lat_q(l, 1.0));
}

static int64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* One LOCK + UNLOCK round trip on the probe; adds its latency to l. */
static void probe_op(struct h_conn *probe, struct lat *l)
{
    static int k;
    int64_t t0 = now_us();
    const char *r;

    k++;
    r = h_request(probe, H_TIMEOUT, "LOCK probe%d", k % 16);
    if (r == NULL || !h_match(r, "OK token=%d count=1"))
        H_FAIL("probe: LOCK got '%s'", r ? r : "(nothing)");
    r = h_request(probe, H_TIMEOUT, "UNLOCK probe%d", k % 16);
    if (r == NULL || strcmp(r, "OK count=0") != 0)
        H_FAIL("probe: UNLOCK got '%s'", r ? r : "(nothing)");
    lat_add(l, now_us() - t0);
}

static void probe_baseline(struct h_conn *probe, struct lat *l, int n)
{
    for (int i = 0; i < n; i++)
        probe_op(probe, l);
    lat_print("probe, idle daemon", l);
}

/* A line of /proc/PID/status such as VmRSS, in kB; -1 when unknown. */
static long proc_kb(pid_t pid, const char *key)
{
    char path[64], line[256];
    size_t klen = strlen(key);
    long kb = -1;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == ':')
            kb = strtol(line + klen + 1, NULL, 10);
    fclose(f);
    return kb;
}

/* How many lines of d's log contain needle. */
static int log_count(const struct h_dlockd *d, const char *needle)
{
    char line[4096];
    int n = 0;
    FILE *f = fopen(d->log, "r");

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* INFO's number for key. */
static long long info_int(struct h_conn *c, const char *key)
{
    const char *r = h_request(c, H_TIMEOUT, "#i INFO");

    if (r == NULL || strncmp(r, "#i OK {", 7) != 0)
        H_FAIL("INFO got '%s'", r ? r : "(nothing)");
    return h_json_int(r + 6, key);
}

/* ------------------------------------------------------------ tests */

/* 1 000 connections that send a byte every second and never a whole line: no request renews
 * their session, so it runs out (--session-ttl 2s) and dlockd says BYE and closes them. */
START_TEST(test_slowloris)
{
    struct peer *p = calloc(SLOW, sizeof *p);
    struct lat base = {0}, during = {0};
    struct h_conn *probe;
    int64_t start, last_tick = 0;
    int closed = 0, byes = 0, early = 0;
    int64_t lmin = INT64_MAX, lmax = 0, lsum = 0;

    D = h_dlockd_start(R->port, H_ARGS("--session-ttl", "2s", "--maxclients", "20000"));
    probe = H_CLIENT(D, "ttl=60s name=probe");
    probe_baseline(probe, &base, 200);
    start = h_now_ms();
    peers_open(p, SLOW, D->port, "P", NULL);
    printf("hostile: slowloris: %d connections opened in %lld ms\n", SLOW, (long long)(h_now_ms() - start));
    while (closed < SLOW && h_now_ms() - start < 15000) {
        if (h_now_ms() - last_tick >= 1000) {
            last_tick = h_now_ms();
            for (int i = 0; i < SLOW; i++)
                if (!p[i].eof && raw_send(p[i].fd, "x", 1) < 0)
                    p[i].eof = 1, p[i].died = h_now_ms();
        }
        peers_poll(p, SLOW, 0);
        probe_op(probe, &during);
        closed = 0;
        for (int i = 0; i < SLOW; i++)
            closed += p[i].eof;
    }
    for (int i = 0; i < SLOW; i++) {
        int64_t life = p[i].died - p[i].born;
        if (!p[i].eof)
            continue;
        byes += p[i].bye;
        early += life < 1900;
        lsum += life;
        lmin = life < lmin ? life : lmin;
        lmax = life > lmax ? life : lmax;
    }
    printf("hostile: slowloris: %d/%d closed by the daemon (%d with * BYE reason=expired), after %lld..%lld ms "
           "(mean %lld) with --session-ttl 2s\n",
           closed, SLOW, byes, (long long)lmin, (long long)lmax, (long long)(closed ? lsum / closed : 0));
    lat_print("probe during slowloris", &during);
    ck_assert_int_eq(closed, SLOW);
    ck_assert_int_eq(byes, SLOW);
    ck_assert_msg(early == 0, "%d connections closed before their ttl", early);
    ck_assert_msg(lmax < 5000, "a slowloris connection lived %lld ms", (long long)lmax);
    ck_assert_msg(lat_q(&during, 0.99) < PROBE_P99_MS, "probe p99 %.2f ms", lat_q(&during, 0.99));
    H_REQ(probe, "OK", "PING");
    ck_assert_int_eq(info_int(probe, "connections"), 1);
    peers_close(p, SLOW);
    free(p);
    lat_free(&base);
    lat_free(&during);
}
END_TEST

/* A 1 MiB line without a newline: ERR TOOBIG once max-line is passed, then the connection is
 * closed; another client does not notice. */
START_TEST(test_huge_line)
{
    size_t total = 1 << 20, sent = 0;
    char *junk = malloc(total);
    struct peer p = {0};
    struct lat base = {0}, during = {0};
    struct h_conn *probe, *other;
    int64_t start;

    D = h_dlockd_start(R->port, NULL);
    probe = H_CLIENT(D, "name=probe");
    other = H_CLIENT(D, "name=other");
    H_REQ(other, "OK token=%d count=1", "LOCK kept");
    probe_baseline(probe, &base, 100);
    memset(junk, 'a', total);
    p.fd = raw_connect(D->port, 0);
    start = h_now_ms();
    while (sent < total && h_now_ms() - start < 10000) {
        ssize_t n = raw_send(p.fd, junk + sent, total - sent);
        if (n < 0)
            break;
        sent += (size_t)n;
        peers_poll(&p, 1, 0);
        if (p.eof)
            break;
        probe_op(probe, &during);
    }
    peers_wait_lines(&p, 1, 1, 5000);
    while (!p.eof && h_now_ms() - start < 15000)
        peers_poll(&p, 1, 50);
    printf("hostile: 1 MiB line: the daemon took %zu bytes, answered '%s' and closed after %lld ms\n", sent, p.last,
           (long long)(p.died - start));
    lat_print("probe during the 1 MiB line", &during);
    ck_assert_msg(h_match(p.last, "ERR TOOBIG %*"), "got '%s'", p.last);
    ck_assert_int_eq(p.lines, 1);
    ck_assert(p.eof);
    H_REQ(other, "OK count=0", "UNLOCK kept");
    H_REQ(probe, "OK", "PING");
    ck_assert_msg(lat_q(&during, 0.99) < PROBE_P99_MS, "probe p99 %.2f ms", lat_q(&during, 0.99));
    close(p.fd);
    free(junk);
    lat_free(&base);
    lat_free(&during);
}
END_TEST

/* A client pipelines 1 M requests and never reads a reply: once its unsent replies pass
 * --client-output-limit it is cut off; the daemon's memory stays bounded and the probe is served. */
START_TEST(test_pipeline_no_read)
{
    static const char line[] = "#abcdefghijklmnopqrstuvwxyz012345 PING\n";
    const size_t len = sizeof line - 1, lines = 1000000, chunk_lines = 1024;
    char *chunk = malloc(len * chunk_lines);
    size_t sent = 0, total = len * lines;
    struct lat base = {0}, during = {0};
    struct h_conn *probe;
    int64_t start, cut = -1;
    long rss0, hwm;
    int fd;

    D = h_dlockd_start(R->port, H_ARGS("--client-output-limit", "1048576"));
    probe = H_CLIENT(D, "name=probe");
    probe_baseline(probe, &base, 100);
    rss0 = proc_kb(D->pid, "VmRSS");
    for (size_t i = 0; i < chunk_lines; i++)
        memcpy(chunk + i * len, line, len);
    fd = raw_connect(D->port, 4096);
    start = h_now_ms();
    while (sent < total && h_now_ms() - start < 60000) {
        size_t off = sent % (len * chunk_lines), want = len * chunk_lines - off;
        ssize_t n;

        if (want > total - sent)
            want = total - sent;
        n = raw_send(fd, chunk + off, want);
        if (n < 0) {
            cut = h_now_ms() - start;
            break;
        }
        sent += (size_t)n;
        if (n == 0) {
            struct pollfd pf = {fd, POLLOUT, 0};
            probe_op(probe, &during);
            poll(&pf, 1, 10);
        }
    }
    hwm = proc_kb(D->pid, "VmHWM");
    printf("hostile: pipeline without reading: %zu of %zu requests sent (%zu bytes) before %s after %lld ms; "
           "daemon RSS %ld kB before, peak %ld kB\n",
           sent / len, lines, sent, cut >= 0 ? "the daemon cut it off" : "the end", (long long)(h_now_ms() - start),
           rss0, hwm);
    lat_print("probe during the pipeline", &during);
    ck_assert_msg(cut >= 0, "the daemon never cut off a client that does not read");
    ck_assert_int_eq(log_count(D, "replies unread, closing"), 1);
    H_REQ(probe, "OK", "PING");
    ck_assert_int_eq(info_int(probe, "connections"), 1);
    ck_assert_msg(lat_q(&during, 0.99) < PROBE_P99_MS, "probe p99 %.2f ms", lat_q(&during, 0.99));
    close(fd);
    free(chunk);
    lat_free(&base);
    lat_free(&during);
}
END_TEST

/* Lists the keys matching pattern (SCAN), newline-separated, into a malloc'd string. */
static char *scan_keys(int port, const char *pattern, int *count)
{
    char cursor[32] = "0", *all = calloc(1, 1);
    size_t alen = 0;

    *count = 0;
    do {
        char *r = h_redis_cmd(port, "SCAN", cursor, "MATCH", pattern, "COUNT", "1000", NULL);
        char *save = NULL, *tok;

        if (r == NULL || r[0] == '-')
            H_FAIL("SCAN: %s", r ? r : "no reply");
        tok = strtok_r(r, "\n", &save);
        snprintf(cursor, sizeof cursor, "%s", tok ? tok : "0");
        while ((tok = strtok_r(NULL, "\n", &save)) != NULL) {
            size_t n = strlen(tok);
            all = realloc(all, alen + n + 2);
            memcpy(all + alen, tok, n);
            alen += n;
            all[alen++] = ' ';
            all[alen] = '\0';
            (*count)++;
        }
        free(r);
    } while (strcmp(cursor, "0") != 0);
    return all;
}

/* 10 000 sessions wait for one lock; then half close their sockets and half go silent, all
 * with ttl=1s: no queue entry of theirs may stay in Redis. */
START_TEST(test_waiters_killed)
{
    struct peer *p = calloc(MANY, sizeof *p);
    struct h_conn *holder;
    int64_t start, queued_ms, killed, clean_ms = -1;
    long long q = -1, w = -1;
    long rss;
    char *keys;
    int nkeys, open_ok, expired;

    D = h_dlockd_start(R->port, H_ARGS("--maxclients", "20000"));
    holder = H_CLIENT(D, "ttl=300s name=holder");
    H_REQ(holder, "OK token=%d count=1", "LOCK big");
    /* In batches, each queued before the next is sent: each LOCK that has to wait costs Redis
     * time that grows with the queue (see RELIABILITY.md), and a backlog of them past
     * backend-timeout would answer ERR BACKEND. */
    start = h_now_ms();
    for (int i = 0; i < MANY; i += WAITER_BATCH) {
        peers_open_range(p, i, i + WAITER_BATCH, D->port, "HELLO ttl=120s\n#w LOCK big wait=300s\n",
                         "OK session=%x secret=%x ttl=120000 %*");
        if (!h_wait_waiters(holder, "big", i + WAITER_BATCH, 30000))
            H_FAIL("waiters %d..%d not queued within 30 s", i, i + WAITER_BATCH - 1);
    }
    queued_ms = h_now_ms() - start;
    peers_poll(p, MANY, 0);
    for (int i = 0; i < MANY; i++)
        if (p[i].lines != 1 || p[i].eof)
            H_FAIL("waiter %d: got '%s' (eof %d) while it should wait", i, p[i].last, p[i].eof);
    ck_assert_msg(log_count(D, "did not answer within") == 0, "Redis calls timed out while the waiters queued");
    rss = proc_kb(D->pid, "VmRSS");
    printf("hostile: %d waiters on one lock queued in %lld ms; Redis queue %lld entries; daemon RSS %ld kB\n", MANY,
           (long long)queued_ms, h_redis_int(R->port, "ZCARD", "dlock:{big}:q", NULL), rss);
    ck_assert_int_eq(h_redis_int(R->port, "ZCARD", "dlock:{big}:q", NULL), MANY);

    /* Every session gets ttl=1s; the even ones close their socket at once, the odd ones go silent. */
    for (int i = 0; i < MANY; i++)
        if (raw_send(p[i].fd, "HELLO ttl=1s\n", 13) != 13)
            H_FAIL("peer %d: cannot send", i);
    open_ok = peers_wait_lines(p, MANY, 2, 30000);
    ck_assert_int_eq(open_ok, MANY);
    killed = h_now_ms();
    for (int i = 0; i < MANY; i += 2) {
        close(p[i].fd);
        p[i].fd = -1;
    }
    for (int64_t deadline = killed + 60000; h_now_ms() < deadline;) {
        peers_poll(p, MANY, 100);
        q = h_redis_int(R->port, "ZCARD", "dlock:{big}:q", NULL);
        w = h_redis_int(R->port, "HLEN", "dlock:{big}:w", NULL);
        expired = 0;
        for (int i = 1; i < MANY; i += 2)
            expired += p[i].eof;
        if (q == 0 && w == 0 && expired == MANY / 2) {
            clean_ms = h_now_ms() - killed;
            break;
        }
    }
    expired = 0;
    for (int i = 1; i < MANY; i += 2)
        expired += p[i].bye;
    keys = scan_keys(R->port, "dlock:*", &nkeys);
    printf("hostile: %d waiters killed (%d sockets closed, %d sessions expired with BYE): Redis queue empty after "
           "%lld ms; keys left: %s\n",
           MANY, MANY / 2, expired, (long long)clean_ms, keys);
    ck_assert_msg(clean_ms >= 0, "queue entries left: zset %lld, hash %lld", q, w);
    ck_assert_int_eq(expired, MANY / 2);
    ck_assert_msg(strstr(keys, ":q ") == NULL && strstr(keys, ":w ") == NULL, "orphan queue keys: %s", keys);
    {
        int64_t t0 = h_now_ms();
        long long n;
        while ((n = info_int(holder, "waiters")) > 0 && h_now_ms() - t0 < 10000)
            h_sleep_ms(20);
        printf("hostile:   the daemon's own wait records: %lld left %lld ms later\n", n, (long long)(h_now_ms() - t0));
        ck_assert_msg(n == 0, "the daemon still counts %lld waiters whose queue entries are gone", n);
    }
    for (int64_t deadline = h_now_ms() + 10000; info_int(holder, "sessions") > 1 && h_now_ms() < deadline;)
        h_sleep_ms(50);
    ck_assert_int_eq(info_int(holder, "sessions"), 1);
    H_REQ(holder, "OK count=0", "UNLOCK big");
    free(keys);
    keys = scan_keys(R->port, "dlock:*", &nkeys);
    printf("hostile:   after UNLOCK, keys left: %s\n", keys);
    ck_assert_msg(strstr(keys, ":q ") == NULL && strstr(keys, ":w ") == NULL && strstr(keys, ":h ") == NULL,
                  "keys left: %s", keys);
    free(keys);
    peers_close(p, MANY);
    free(p);
}
END_TEST

/* 10 000 connections, each with a session, PING each second; a probe's LOCK+UNLOCK p99 stays low. */
START_TEST(test_many_connections)
{
    struct peer *p = calloc(MANY, sizeof *p);
    struct lat base = {0}, during = {0};
    struct h_conn *probe;
    int64_t start, opened_ms, round_max = 0;
    long rss0, rss;

    D = h_dlockd_start(R->port, H_ARGS("--maxclients", "20000"));
    probe = H_CLIENT(D, "ttl=120s name=probe");
    probe_baseline(probe, &base, 300);
    rss0 = proc_kb(D->pid, "VmRSS");
    start = h_now_ms();
    peers_open(p, MANY, D->port, "HELLO ttl=120s\n", "OK session=%x secret=%x ttl=120000 %*");
    opened_ms = h_now_ms() - start;
    rss = proc_kb(D->pid, "VmRSS");
    printf("hostile: %d connections opened and answered HELLO in %lld ms; daemon RSS %ld kB -> %ld kB "
           "(%.1f kB per connection)\n",
           MANY, (long long)opened_ms, rss0, rss, (double)(rss - rss0) / MANY);
    ck_assert_int_eq(info_int(probe, "connections"), MANY + 1);
    /* The harness's start-up PING left one more session, until its ttl. */
    ck_assert_int_ge(info_int(probe, "sessions"), MANY + 1);
    ck_assert_int_le(info_int(probe, "sessions"), MANY + 2);
    for (int round = 2; round <= 6; round++) {
        int64_t t0 = h_now_ms(), took;
        int done;

        for (int i = 0; i < MANY; i++)
            if (raw_send(p[i].fd, "PING\n", 5) != 5)
                H_FAIL("peer %d: cannot send", i);
        do {
            probe_op(probe, &during);
            peers_poll(p, MANY, 0);
            done = 0;
            for (int i = 0; i < MANY; i++)
                done += p[i].lines >= round;
        } while (done < MANY && h_now_ms() - t0 < 30000);
        took = h_now_ms() - t0;
        round_max = took > round_max ? took : round_max;
        ck_assert_int_eq(done, MANY);
        for (int i = 0; i < MANY; i++)
            if (strcmp(p[i].last, "OK") != 0 || p[i].eof)
                H_FAIL("peer %d: got '%s' (eof %d)", i, p[i].last, p[i].eof);
        while (h_now_ms() - t0 < 1000)
            probe_op(probe, &during);
    }
    printf("hostile: 5 rounds of %d PINGs, each answered in at most %lld ms\n", MANY, (long long)round_max);
    lat_print("probe with 10000 clients pinging", &during);
    ck_assert_msg(lat_q(&during, 0.99) < PROBE_P99_MS, "probe p99 %.2f ms", lat_q(&during, 0.99));
    peers_close(p, MANY);
    free(p);
    lat_free(&base);
    lat_free(&during);
}
END_TEST

/* Requests pipelined behind a QUIT: the QUIT answers, ends the session once and closes; what
 * follows it is not run. (A second QUIT run from inside the first one's reply used to end the
 * session a second time, after it was freed; then a tagged AWAIT that QUIT ended at once let
 * QUIT answer and free itself while it was still walking the running requests.) */
START_TEST(test_pipelined_quit)
{
    static const char *const scripts[] = { "LOCK pq\nQUIT\nQUIT\n", "LOCK pq\nQUIT\nPING\nLOCK pq2\nQUIT\n",
                                           "#t LOCK pq\nQUIT\nQUIT\nQUIT\n",
                                           "LATCH pql count=1\n#t AWAIT pql wait=5s\nQUIT\n" };
    struct h_conn *probe;

    D = h_dlockd_start(R->port, NULL);
    probe = H_CLIENT(D, "name=probe");
    for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++) {
        struct h_conn *c = H_CONNECT(D->port);
        const char *r;
        int n = 0;

        h_send_raw(c, scripts[i], strlen(scripts[i]));
        while ((r = h_line(c, H_TIMEOUT)) != NULL)
            n += strcmp(r, "OK") == 0;
        if (h_request(probe, H_TIMEOUT, "PING") == NULL)
            H_FAIL("script %zu: the daemon died (pid %d)", i, (int)D->pid);
        ck_assert_msg(c->eof, "script %zu: the connection was not closed", i);
        ck_assert_msg(n == 1, "script %zu: %d plain OK replies, want 1 (for the first QUIT)", i, n);
        h_close(c);
    }
    H_REQ(probe, "OK token=%d count=1", "LOCK pq");
    H_REQ(probe, "OK token=%d count=1", "LOCK pq2");
}
END_TEST

/* Untagged requests pipelined behind one that waits for Redis run one after the other when it
 * is answered, in order, as many as max-queued lets wait. (Each one used to be run from inside
 * the reply of the one before: a few hundred of them overflowed the daemon's stack.) */
START_TEST(test_pipelined_untagged)
{
    const int n = 100000;
    const size_t len = strlen("LOCK pu\n") + (size_t)n * 5;
    char *burst = malloc(len + 1);
    struct h_conn *probe, *c;
    const char *r;
    int ok = 0, locked;
    int64_t start;

    D = h_dlockd_start(R->port, H_ARGS("--max-queued", "100000"));
    probe = H_CLIENT(D, "name=probe");
    strcpy(burst, "LOCK pu\n");
    for (int i = 0; i < n; i++)
        memcpy(burst + 8 + (size_t)i * 5, "PING\n", 5);
    c = H_CONNECT(D->port);
    start = h_now_ms();
    h_send_raw(c, burst, len);
    r = h_line(c, H_TIMEOUT);
    locked = r != NULL && h_match(r, "OK token=%d count=1");
    while (locked && ok < n && (r = h_line(c, H_TIMEOUT)) != NULL && strcmp(r, "OK") == 0)
        ok++;
    printf("hostile: LOCK + %d untagged PINGs in one write: %d answered in order in %lld ms\n", n, ok,
           (long long)(h_now_ms() - start));
    if (h_request(probe, H_TIMEOUT, "PING") == NULL)
        H_FAIL("the daemon died (pid %d) after LOCK + %d untagged PINGs in one write", (int)D->pid, n);
    ck_assert_msg(locked, "LOCK got '%s'", r ? r : "(nothing)");
    ck_assert_int_eq(ok, n);
    free(burst);
}
END_TEST

/* Raises the open-file limit to its hard maximum: 10 000 clients need as many descriptors
 * here and in the daemon (which inherits the limit). */
static void raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < MANY + 200)
        fprintf(stderr, "check_hostile: RLIMIT_NOFILE is %llu, below %d: the 10 000-client tests will fail\n",
                (unsigned long long)rl.rlim_cur, MANY + 200);
}

/* One case per test, so that one can run alone: CK_RUN_CASE=waiters tests/check_hostile */
static void add_case(Suite *s, const char *name, const TTest *test)
{
    TCase *tc = tcase_create(name);

    tcase_add_checked_fixture(tc, h_setup_redis, h_teardown);
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, test);
    suite_add_tcase(s, tc);
}

static Suite *hostile_suite(void)
{
    Suite *s = suite_create("hostile");

    add_case(s, "quit", test_pipelined_quit);
    add_case(s, "untagged", test_pipelined_untagged);
    add_case(s, "slowloris", test_slowloris);
    add_case(s, "hugeline", test_huge_line);
    add_case(s, "pipeline", test_pipeline_no_read);
    add_case(s, "waiters", test_waiters_killed);
    add_case(s, "connections", test_many_connections);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(hostile_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
