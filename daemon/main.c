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

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    struct dlockd *d = arg;

    (void)what;
    log_info("signal %d: shutting down", (int)sig);
    conn_broadcast(d, "BYE reason=shutdown");
    event_base_loopexit(d->base, NULL);
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
    log_info("dlockd stopped; holds are left to their lease in Redis");
    return 0;
}
