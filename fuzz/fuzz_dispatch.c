/* fuzz_dispatch.c - libFuzzer harness for request dispatch: the daemon's own connection,
 * command and session code on a real struct dlockd with an event base and no Redis link
 * (daemon_init without redis_start: every verb that needs Redis answers ERR BACKEND), config
 * defaults, and no listener: clients are AF_UNIX socketpairs made into connections by
 * conn_new (the daemon's end with the smallest send buffer, so unread replies soon pile up
 * in the daemon).
 *
 * Input: byte 0 picks config variants, byte 1 seeds the chunk sizes, the rest is what the
 * clients send, with control escapes: 0xFF then a byte c:
 *   c % 8 == 0  talk on client (c >> 3) % NCLIENTS from now on (a fresh one if it is closed)
 *   c % 8 == 1  half-close that client (EOF; the daemon answers what it got, then closes)
 *   c % 8 == 2  the client closes its socket (unread replies make it a reset)
 *   c % 8 == 3  run the event loop until idle
 *   c % 8 == 4  the client stops reading its replies (they pile up in the daemon)
 *   c % 8 == 5  the client reads again
 *   else        nothing
 * Checks: no crash, leak or sanitizer report; every line the daemon writes parses with
 * proto_parse_reply; after teardown no connection, session, wait, latch awaiter or deadline
 * is left. Log lines are formatted (debug level) but go to /dev/null unless FUZZ_LOG is set. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "conn.h"
#include "daemon.h"
#include "dict.h"
#include "dlockd.h"
#include "latch.h"
#include "log.h"
#include "redis.h"
#include "session.h"
#include "wait.h"

#define NCLIENTS 3
#define REPLY_MAX (1 << 20) /* bytes of one reply line the checker keeps */

static struct dlockd D;
static FILE *report; /* the real stderr, for this harness's own failures */
static uint64_t id_counter;

#define FAIL(...) fail_at(__LINE__, __VA_ARGS__)

static void fail_at(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

static void fail_at(int line, const char *fmt, ...)
{
    va_list ap;

    fprintf(report, "fuzz_dispatch.c:%d: ", line);
    va_start(ap, fmt);
    vfprintf(report, fmt, ap);
    va_end(ap);
    fputc('\n', report);
    fflush(report);
    abort();
}

/* id.c's, which the fuzzer does not build: ids count up from 1 on every input, so an input
 * can name its own sessions (session=0000000000000001) and replays the same way. */
void dlockd_random_id(char *buf)
{
    snprintf(buf, DLOCKD_ID_LEN + 1, "%016llx", (unsigned long long)++id_counter);
}

/* One fuzzed client: our end of the socketpair and the reply bytes not yet split into lines. */
struct client {
    int fd;                  /* our end; -1: never opened, or closed */
    int gone;                /* the daemon closed its end */
    char *part;              /* a reply line so far */
    size_t plen, pcap;
    int reading;             /* 0 while it "does not read" */
    int shut;                /* it half-closed: it sends nothing more */
};

static struct client clients[NCLIENTS];

static int alive(const struct client *cl)
{
    return cl->fd >= 0 && !cl->gone;
}

static void check_line(const char *line, size_t len)
{
    struct proto_reply rep;
    char *copy;

    if (memchr(line, '\0', len) != NULL)
        FAIL("reply line with a NUL byte");
    if ((copy = malloc(len + 1)) == NULL)
        FAIL("out of memory");
    memcpy(copy, line, len);
    copy[len] = '\0';
    if (proto_parse_reply(copy, &rep) != 0) {
        memcpy(copy, line, len);
        FAIL("the daemon wrote a line that is no reply: '%s'", copy);
    }
    free(copy);
}

/* Takes what arrived on our end of a client and checks every complete line. */
static size_t drain(struct client *cl)
{
    size_t got = 0;

    while (cl->fd >= 0 && !cl->gone) {
        unsigned char buf[4096];
        ssize_t n = recv(cl->fd, buf, sizeof(buf), MSG_DONTWAIT);

        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            cl->gone = 1;
        if (n <= 0)
            break;
        got += (size_t)n;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                check_line(cl->part ? cl->part : "", cl->plen);
                cl->plen = 0;
                continue;
            }
            if (cl->plen >= REPLY_MAX)
                FAIL("a reply line longer than %d bytes", REPLY_MAX);
            if (cl->plen == cl->pcap) {
                cl->pcap = cl->pcap ? cl->pcap * 2 : 256;
                if ((cl->part = realloc(cl->part, cl->pcap)) == NULL)
                    FAIL("out of memory");
            }
            cl->part[cl->plen++] = (char)buf[i];
        }
    }
    return got;
}

/* Reads what the daemon wrote to a client that reads. */
static size_t deliver(struct client *cl)
{
    return cl->reading ? drain(cl) : 0;
}

/* Runs the loop without blocking until nothing is active and no reply moves. */
static void run_loop(void)
{
    for (int i = 0; i < 10000; i++) {
        size_t moved = 0;

        event_base_loop(D.base, EVLOOP_NONBLOCK);
        for (int k = 0; k < NCLIENTS; k++)
            moved += deliver(&clients[k]);
        if (moved == 0 && event_base_get_num_events(D.base, EVENT_BASE_COUNT_ACTIVE) == 0)
            return;
    }
    FAIL("the event loop never went idle");
}

static void client_close(struct client *cl)
{
    if (cl->fd >= 0)
        close(cl->fd);
    cl->fd = -1;
    cl->gone = 1;
}

static void client_open(struct client *cl, int k)
{
    int sv[2], small = 1;
    char peer[32];

    client_close(cl);
    cl->plen = 0;
    cl->shut = 0;
    cl->gone = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0 || evutil_make_socket_nonblocking(sv[0]) != 0 ||
        evutil_make_socket_nonblocking(sv[1]) != 0)
        FAIL("socketpair");
    (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    snprintf(peer, sizeof(peer), "fuzz:%d", k);
    conn_new(&D, sv[0], peer);
    cl->fd = sv[1];
    cl->reading = 1;
}

static void client_free(struct client *cl)
{
    client_close(cl);
    free(cl->part);
    memset(cl, 0, sizeof(*cl));
    cl->fd = -1;
}

static void set_config(uint8_t b)
{
    static char pass[] = "sekrit";

    D.cfg.requirepass = (b & 1) ? pass : NULL;
    D.cfg.max_line = (b & 2) ? 64 : PROTO_LINE_DEFAULT;
    D.cfg.client_output_limit = (b & 4) ? 256 : 1048576;
    D.cfg.auth_fail_delay = (b & 8) ? 0 : 500;
    D.cfg.preauth_max_line = (b & 16) ? 24 : 512;
    D.cfg.max_holds = (b & 32) ? 1 : 10000;
    D.cfg.max_waiters = (b & 32) ? 0 : 100000;
    D.cfg.session_ttl = (b & 64) ? 1000 : 10000;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char err[256];

    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    report = stderr;
    if (getenv("FUZZ_LOG") == NULL && (stderr = fopen("/dev/null", "w")) == NULL)
        stderr = report;
    if (config_load(&D.cfg, NULL, 0, NULL, err, sizeof(err)) != 0)
        FAIL("config defaults: %s", err);
    log_set_level(LEVEL_DEBUG);
    snprintf(D.id, sizeof(D.id), "f0f0f0f0f0f0f0f0");
    daemon_init(&D); /* the Redis link is never started: the backend is down */
    for (int k = 0; k < NCLIENTS; k++)
        clients[k].fd = -1;
    return 0;
}

/* Sends bytes to a client in chunks, running the loop after each one. */
static void send_chunks(struct client *cl, const uint8_t *p, size_t n, uint32_t *seed)
{
    while (n > 0) {
        uint32_t r = *seed = *seed * 1103515245u + 12345u;
        size_t chunk = (r >> 16) % 4 == 0 ? n : (r >> 16) % 64 + 1;

        if (chunk > n)
            chunk = n;
        /* A daemon that stopped reading (it closes once its replies are read) may never
         * take the rest: the client gives up after a few tries, as a real one would. */
        for (size_t sent = 0, tries = 0; alive(cl) && !cl->shut && sent < chunk && tries < 16; tries++) {
            ssize_t w = send(cl->fd, p + sent, chunk - sent, MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                break;
            if (w > 0)
                sent += (size_t)w;
            if (sent < chunk)
                run_loop();
        }
        run_loop();
        p += chunk;
        n -= chunk;
    }
}

static void control(uint8_t c, struct client **cur)
{
    struct client *cl = *cur;

    switch (c % 8) {
    case 0:
        cl = *cur = &clients[(c >> 3) % NCLIENTS];
        if (!alive(cl))
            client_open(cl, (int)(cl - clients));
        break;
    case 1:
        if (alive(cl) && !cl->shut) {
            cl->shut = 1;
            shutdown(cl->fd, SHUT_WR);
        }
        break;
    case 2:
        client_close(cl);
        break;
    case 4:
        cl->reading = 0;
        break;
    case 5:
        cl->reading = 1;
        break;
    default:
        break;
    }
    run_loop();
}

/* Closes everything as a shutdown does, then checks that nothing is left behind. */
static void teardown(void)
{
    for (int k = 0; k < NCLIENTS; k++)
        clients[k].reading = 1;
    run_loop();
    conn_close_all(&D);
    session_free_all(&D);
    wait_free_all(&D);
    latch_free_all(&D);
    run_loop();
    for (int k = 0; k < NCLIENTS; k++)
        client_free(&clients[k]);
    if (D.nconns != 0 || !TAILQ_EMPTY(&D.conns))
        FAIL("%d connections left after close", D.nconns);
    conn_init(&D); /* conn_close_all freed its events */
    if (dict_size(D.sessions) || dict_size(D.waits) || D.nholds || dict_size(D.names) || dict_size(D.latches))
        FAIL("left behind: %zu sessions, %zu waits, %llu holds, %zu names, %zu latches", dict_size(D.sessions),
             dict_size(D.waits), (unsigned long long)D.nholds, dict_size(D.names), dict_size(D.latches));
    if (deadlines_count(D.deadlines) != 0)
        FAIL("%zu deadlines still armed after teardown (would fire on freed memory)",
             deadlines_count(D.deadlines));
    id_counter = 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct client *cur = &clients[0];
    uint32_t seed;
    size_t i = 2, start;

    if (size < 2)
        return 0;
    set_config(data[0]);
    seed = data[1] + 1u;
    client_open(cur, 0);
    run_loop();
    while (i < size) {
        start = i;
        while (i < size && data[i] != 0xFF)
            i++;
        send_chunks(cur, data + start, i - start, &seed);
        if (i + 1 < size)
            control(data[i + 1], &cur);
        i += 2;
    }
    teardown();
    return 0;
}
