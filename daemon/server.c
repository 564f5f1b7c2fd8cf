/* server.c - TCP and unix-socket listeners; accepted sockets become connections. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "conn.h"
#include "dlockd.h"
#include "log.h"
#include "server.h"

#define ACCEPT_RETRY_MS 100 /* accepting stays paused this long after it failed */
#define ACCEPT_LOG_MS 10000 /* at most one log line about failed accepts this often */
#define FD_RESERVE 32       /* descriptors besides maxclients: Redis links, listeners, admin, logs */

struct server {
    struct evconnlistener *listeners[CONFIG_MAX_ADDRS];
    int n;
    int inherited;        /* the sockets came from systemd: their paths are not ours to unlink */
    struct event *resume; /* ends a pause of accepting */
    uint64_t logged;      /* monotonic ms of the last line about a failed accept, 0 for none */
    int pauses;           /* of accepting, since that line */
    int failing;          /* that line was logged and no accept has succeeded since */
};

static void peer_name(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%d", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(buf, len, "[%s]:%d", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "unix");
    }
}

int server_fd_exposed(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &sslen) < 0) {
        snprintf(buf, len, "socket %d (getsockname: %s)", fd, strerror(errno));
        return 1;
    }
    peer_name((struct sockaddr *)&ss, buf, len);
    return !config_loopback((struct sockaddr *)&ss);
}

int server_exposed(struct dlockd *d, char *buf, size_t len)
{
    struct server *srv = d->server;
    char bound[128], name[300];

    for (int i = 0; srv && i < srv->n; i++) {
        if (!server_fd_exposed(evconnlistener_get_fd(srv->listeners[i]), bound, sizeof(bound)))
            continue;
        if (srv->inherited)
            snprintf(buf, len, "socket %d from systemd (bound to %s)", 3 + i, bound);
        else
            snprintf(buf, len, "listen %s (bound to %s)", config_addr_str(&d->cfg.listen.addr[i], name, sizeof(name)),
                     bound);
        return 1;
    }
    return 0;
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    struct dlockd *d = arg;
    char peer[64];

    (void)l;
    (void)salen;
    if (d->server->failing) {
        d->server->failing = 0;
        log_notice("server: accepting connections again");
    }
    peer_name(sa, peer, sizeof(peer));
    conn_accept(d, fd, peer);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct server *srv = arg;

    (void)fd;
    (void)what;
    for (int i = 0; i < srv->n; i++)
        evconnlistener_enable(srv->listeners[i]);
}

/* accept failed, most likely for want of descriptors (EMFILE, ENFILE): the
 * connection stays in the backlog and the listener readable, so accepting
 * pauses instead of spinning, and is tried again after ACCEPT_RETRY_MS. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    struct server *srv = ((struct dlockd *)arg)->server;
    struct timeval tv = { 0, ACCEPT_RETRY_MS * 1000 };
    int err = EVUTIL_SOCKET_ERROR();

    (void)l;
    srv->pauses++;
    if (srv->logged == 0 || now_ms() >= srv->logged + ACCEPT_LOG_MS) {
        log_warnx("server: accept: %s; accepting paused for %d ms, %d time(s) since the last such line",
                  strerror(err), ACCEPT_RETRY_MS, srv->pauses);
        srv->logged = now_ms();
        srv->pauses = 0;
        srv->failing = 1;
    }
    for (int i = 0; i < srv->n; i++)
        evconnlistener_disable(srv->listeners[i]);
    evtimer_add(srv->resume, &tv);
}

void server_fd_limit(const struct config *cfg)
{
    rlim_t want = (rlim_t)cfg->maxclients + FD_RESERVE;
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
        log_warn("server: cannot raise the limit of descriptors to %llu", (unsigned long long)rl.rlim_cur);
    else if (rl.rlim_cur < want)
        log_warnx("server: maxclients %lld needs %llu descriptors, the hard limit is %llu: "
                  "connections past that wait in the backlog",
                  (long long)cfg->maxclients, (unsigned long long)want, (unsigned long long)rl.rlim_max);
}

static struct evconnlistener *listen_unix(struct dlockd *d, const struct addr *a)
{
    struct sockaddr_un sun;
    struct evconnlistener *l;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    strcpy(sun.sun_path, a->path);
    unlink(a->path);
    l = evconnlistener_new_bind(d->base, on_accept, d, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 128,
                                (struct sockaddr *)&sun, sizeof(sun));
    if (l && chmod(a->path, (mode_t)d->cfg.unixsocket_perm) < 0)
        log_warn("server: chmod %s", a->path);
    return l;
}

static struct evconnlistener *listen_tcp(struct dlockd *d, const struct addr *a)
{
    struct evutil_addrinfo hints, *res = NULL;
    struct evconnlistener *l;
    char port[16];
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = EVUTIL_AI_PASSIVE;
    snprintf(port, sizeof(port), "%d", a->port);
    if ((rc = evutil_getaddrinfo(a->host, port, &hints, &res)) != 0) {
        log_warnx("server: %s: %s", a->host, evutil_gai_strerror(rc));
        return NULL;
    }
    l = evconnlistener_new_bind(d->base, on_accept, d,
                                LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE, 511,
                                res->ai_addr, (int)res->ai_addrlen);
    evutil_freeaddrinfo(res);
    return l;
}

/* Takes the sockets systemd passed (socket activation). Returns how many. */
static int listen_inherited(struct dlockd *d, struct server *srv)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    int n;

    if (pid == NULL || fds == NULL || strtol(pid, NULL, 10) != (long)getpid())
        return 0;
    n = (int)strtol(fds, NULL, 10);
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    for (int i = 0; i < n && srv->n < CONFIG_MAX_ADDRS; i++) {
        struct evconnlistener *l;
        evutil_make_socket_nonblocking(3 + i);
        evutil_make_socket_closeonexec(3 + i);
        l = evconnlistener_new(d->base, on_accept, d, LEV_OPT_CLOSE_ON_FREE, -1, 3 + i);
        if (l == NULL)
            fatalx("server: cannot use socket %d from systemd", 3 + i);
        evconnlistener_set_error_cb(l, on_accept_error);
        srv->listeners[srv->n++] = l;
    }
    log_notice("server: listening on %d socket(s) from systemd", srv->n);
    return srv->n;
}

int server_listen(struct dlockd *d)
{
    struct server *srv = calloc(1, sizeof(*srv));
    char name[300];

    if (srv == NULL || (srv->resume = evtimer_new(d->base, on_resume, srv)) == NULL)
        fatalx("server: out of memory");
    d->server = srv;
    server_fd_limit(&d->cfg);
    if ((srv->inherited = listen_inherited(d, srv)) > 0)
        return 0;
    for (int i = 0; i < d->cfg.listen.n; i++) {
        const struct addr *a = &d->cfg.listen.addr[i];
        struct evconnlistener *l = a->is_unix ? listen_unix(d, a) : listen_tcp(d, a);

        config_addr_str(a, name, sizeof(name));
        if (l == NULL) {
            log_warn("server: cannot listen on %s", name);
            return -1;
        }
        evconnlistener_set_error_cb(l, on_accept_error);
        srv->listeners[srv->n++] = l;
        log_notice("server: listening on %s", name);
    }
    return 0;
}

void server_close(struct dlockd *d)
{
    struct server *srv = d->server;

    if (srv == NULL)
        return;
    for (int i = 0; i < srv->n; i++)
        evconnlistener_free(srv->listeners[i]);
    event_free(srv->resume);
    for (int i = 0; i < d->cfg.listen.n && !srv->inherited; i++)
        if (d->cfg.listen.addr[i].is_unix)
            unlink(d->cfg.listen.addr[i].path);
    free(srv);
    d->server = NULL;
}
