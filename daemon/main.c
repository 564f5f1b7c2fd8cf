/* main.c - dlockd: parse the command line and config, open the listeners,
 * connect to Redis and run the event loop until SIGINT or SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <event2/event.h>

#include "conn.h"
#include "dict.h"
#include "dlockd.h"
#include "log.h"
#include "redis.h"
#include "renew.h"
#include "server.h"
#include "session.h"
#include "wait.h"

void dlockd_random_id(char *buf)
{
    unsigned char raw[DLOCKD_ID_LEN / 2];

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        fatal("getrandom");
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(buf + 2 * i, 3, "%02x", raw[i]);
}

static void usage(void)
{
    fprintf(stderr, "usage: dlockd [CONFIG-FILE] [--key value ...]\n"
                    "       dlockd --version\n");
    exit(1);
}

#define SHUTDOWN_FLUSH_MS 200 /* time to write * BYE before closing */

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct dlockd *d = arg;
    struct timeval flush = { 0, SHUTDOWN_FLUSH_MS * 1000 };

    (void)what;
    log_info("signal %d: shutting down", (int)sig);
    server_close(d);
    conn_broadcast(d, "BYE reason=shutdown");
    event_base_loopexit(d->base, &flush);
}

/* Frees everything. Holds stay in Redis until their lease: a restarted
 * daemon cannot take over sessions, and their clients learn nothing from
 * a release they did not ask for. */
static void dlockd_free(struct dlockd *d)
{
    redis_close(d->redis);
    conn_close_all(d);
    session_free_all(d);
    wait_free_all(d);
    redis_free(d->redis);
    event_free(d->renew_timer);
    dict_free(d->sessions);
    dict_free(d->holds);
    dict_free(d->waits);
    dict_free(d->names);
    dict_free(d->latches);
    deadlines_free(d->deadlines);
    config_free(&d->cfg);
    event_base_free(d->base);
}

int main(int argc, char **argv)
{
    struct dlockd d;
    struct event *sigint, *sigterm;
    const char *file = NULL;
    char err[1024];
    int first = 1;

    if (argc > 1 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-v") == 0)) {
        printf("dlockd %s\n", PACKAGE_VERSION);
        return 0;
    }
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        usage();
    if (argc > 1 && strncmp(argv[1], "--", 2) != 0) {
        file = argv[1];
        first = 2;
    }
    memset(&d, 0, sizeof(d));
    if (config_load(&d.cfg, file, argc - first, argv + first, err, sizeof(err))) {
        fprintf(stderr, "dlockd: %s\n", err);
        return 1;
    }
    log_set_level(d.cfg.log_level);
    signal(SIGPIPE, SIG_IGN);
    if ((d.base = event_base_new()) == NULL)
        fatalx("event_base_new failed");
    dlockd_random_id(d.id);
    d.started = now_ms();
    d.deadlines = deadlines_new(d.base);
    d.sessions = dict_new();
    d.holds = dict_new();
    d.waits = dict_new();
    d.names = dict_new();
    d.latches = dict_new();
    TAILQ_INIT(&d.conns);
    if (server_listen(&d))
        return 1;
    d.redis = redis_new(&d);
    redis_start(d.redis);
    renew_start(&d);
    sigint = evsignal_new(d.base, SIGINT, on_signal, &d);
    sigterm = evsignal_new(d.base, SIGTERM, on_signal, &d);
    evsignal_add(sigint, NULL);
    evsignal_add(sigterm, NULL);
    log_info("dlockd %s started, id %s", PACKAGE_VERSION, d.id);
    event_base_dispatch(d.base);
    server_close(&d);
    event_free(sigint);
    event_free(sigterm);
    dlockd_free(&d);
    log_info("dlockd stopped; holds are left to their lease in Redis");
    return 0;
}
