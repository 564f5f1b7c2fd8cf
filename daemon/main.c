/* main.c - dlockd: read the config, open the listeners, connect to Redis and
 * run the event loop; SIGHUP reloads the config, SIGINT and SIGTERM stop. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "admin.h"
#include "conn.h"
#include "daemon.h"
#include "dlockd.h"
#include "id.h"
#include "log.h"
#include "notify.h"
#include "redis.h"
#include "renew.h"
#include "server.h"

#define SHUTDOWN_FLUSH_MS 200 /* time to write * BYE before closing */
#define SHUTDOWN_RETRY "1000" /* ms after which a client may try this address again (systemd restarts it) */

struct args {
    const char *file; /* config file, or NULL */
    int argc;         /* --key value pairs */
    char **argv;
};

/* --help: the invocation and every config key on stdout, then exit 0. */
static void usage(void)
{
    printf("usage: dlockd [CONFIG-FILE] [--key value ...]\n"
           "       dlockd --test-config [CONFIG-FILE] [--key value ...]\n"
           "       dlockd --version | --help\n");
    config_help(stdout);
    exit(0);
}

static void on_stop(evutil_socket_t sig, short what, void *arg)
{
    struct dlockd *d = arg;
    struct timeval flush = { 0, SHUTDOWN_FLUSH_MS * 1000 };

    (void)what;
    log_info("signal %d: shutting down", (int)sig);
    notify("STOPPING=1\nSTATUS=shutting down");
    server_close(d);
    /* Holds and session records stay in Redis: the client resumes here once restarted, or elsewhere. */
    conn_broadcast(d, "BYE reason=shutdown retry=" SHUTDOWN_RETRY);
    event_base_loopexit(d->base, &flush);
}

/* Protected mode, judged by the addresses the listeners are bound to (host
 * names and sockets from systemd included): without requirepass, each must
 * be loopback or a unix socket. Returns 0, or -1 after logging which is not. */
static int check_protected(struct dlockd *d, const char *requirepass)
{
    char where[512];

    if (!d->cfg.protected_mode || requirepass != NULL)
        return 0;
    if (!server_exposed(d, where, sizeof(where)) && !admin_exposed(d, where, sizeof(where)))
        return 0;
    log_warnx("protected mode: %s is not a loopback address: it needs requirepass (or protected-mode no)", where);
    return -1;
}

/* Reads the config again; live keys change now, the others need a restart. */
static void on_reload(evutil_socket_t sig, short what, void *arg)
{
    struct dlockd *d = arg;
    struct args *a = d->args;
    struct config fresh;
    char err[1024], restart[512];

    (void)sig;
    (void)what;
    notify("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading the config", (unsigned long long)now_us());
    if (config_load(&fresh, a->file, a->argc, a->argv, err, sizeof(err))) {
        log_warnx("config: reload failed: %s; keeping the old config", err);
    } else if (check_protected(d, fresh.requirepass)) {
        log_warnx("config: reload failed: requirepass: protected mode needs it; keeping the old config");
    } else {
        config_apply_live(&d->cfg, &fresh, restart, sizeof(restart));
        server_fd_limit(&d->cfg);
        log_set_level(d->cfg.log_level);
        log_set_syslog(d->cfg.log_syslog);
        if (restart[0])
            log_warnx("config: reloaded; changes to %s need a restart and were not applied", restart);
        else
            log_info("config: reloaded%s%s", a->file ? " from " : "", a->file ? a->file : "");
    }
    config_free(&fresh);
    notify("READY=1\nSTATUS=serving");
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    notify("WATCHDOG=1");
}

static void watchdog_start(struct dlockd *d)
{
    uint64_t every = notify_watchdog_ms();
    struct timeval tv;

    if (every == 0)
        return;
    d->watchdog = must(event_new(d->base, -1, EV_PERSIST, on_watchdog, d));
    tv.tv_sec = (time_t)(every / 1000);
    tv.tv_usec = (suseconds_t)(every % 1000) * 1000;
    evtimer_add(d->watchdog, &tv);
}

static void parse_args(int argc, char **argv, struct args *a, int *test_config)
{
    int i = 1;

    if (argc > 1 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-v") == 0)) {
        printf("dlockd %s\n", PACKAGE_VERSION);
        exit(0);
    }
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
        usage();
    *test_config = argc > 1 && strcmp(argv[1], "--test-config") == 0;
    i += *test_config;
    a->file = NULL;
    if (i < argc && strncmp(argv[i], "--", 2) != 0)
        a->file = argv[i++];
    a->argc = argc - i;
    a->argv = argv + i;
}

int main(int argc, char **argv)
{
    struct event *sigint, *sigterm, *sighup;
    struct dlockd d;
    struct args a;
    char err[1024];
    int test_config;

    parse_args(argc, argv, &a, &test_config);
    memset(&d, 0, sizeof(d));
    if (config_load(&d.cfg, a.file, a.argc, a.argv, err, sizeof(err))) {
        fprintf(stderr, "dlockd: %s\n", err);
        return 1;
    }
    if (test_config) {
        printf("OK\n");
        config_free(&d.cfg);
        return 0;
    }
    d.args = &a;
    log_set_level(d.cfg.log_level);
    log_set_syslog(d.cfg.log_syslog);
    signal(SIGPIPE, SIG_IGN);
    dlockd_random_id(d.id);
    daemon_init(&d);
    if (server_listen(&d) || admin_start(&d) || check_protected(&d, d.cfg.requirepass)) {
        daemon_free(&d);
        return 1;
    }
    redis_start(d.redis);
    renew_start(&d);
    watchdog_start(&d);
    sigint = evsignal_new(d.base, SIGINT, on_stop, &d);
    sigterm = evsignal_new(d.base, SIGTERM, on_stop, &d);
    sighup = evsignal_new(d.base, SIGHUP, on_reload, &d);
    evsignal_add(sigint, NULL);
    evsignal_add(sigterm, NULL);
    evsignal_add(sighup, NULL);
    log_info("dlockd %s started, id %s", PACKAGE_VERSION, d.id);
    log_buffer(d.base);
    event_base_dispatch(d.base);
    log_buffer(NULL);
    event_free(sigint);
    event_free(sigterm);
    event_free(sighup);
    daemon_free(&d);
    log_info("dlockd stopped; holds are left to their lease in Redis");
    return 0;
}
