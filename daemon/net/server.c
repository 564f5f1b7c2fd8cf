/* server.c - TCP and unix-socket listeners; accepted sockets become connections. */
#include <errno.h>
#include <limits.h>
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
#include "redis.h"
#include "server.h"

#define ACCEPT_RETRY_MS 100 /* accepting stays paused this long after it failed */
#define ACCEPT_LOG_MS 10000 /* at most one log line about failed or refused accepts this often */
#define FD_RESERVE 64       /* descriptors no client may take: stdio, log, event base, listeners, Redis, Sentinel */
#define SERVER_ADOPTED 4    /* listeners of other modules (admin.c) that pause with ours */

struct server {
    struct evconnlistener *listeners[CONFIG_MAX_ADDRS];
    int n;
    int inherited;        /* the sockets came from systemd: their paths are not ours to unlink */
    struct evconnlistener *adopted[SERVER_ADOPTED]; /* other modules', NULL in free slots */
    int wanted[SERVER_ADOPTED]; /* their owner wants them accepting */
    struct event *resume; /* ends a pause of accepting */
    int paused;           /* accepting is paused for want of descriptors */
    struct log_rate failed; /* accepts that failed */
    int failing;          /* such a line was logged and no accept has succeeded since */
    struct log_rate refused; /* connections refused: maxclients, or too few descriptors left */
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

/* The descriptors a client connection may take: those numbered below the soft limit less a
 * reserve. The reserve keeps descriptors for Redis links (one per Cluster master), the admin
 * endpoint's connections and the daemon's own files, which clients could otherwise exhaust;
 * on a low limit it is half of it. */
int server_fd_line(const struct dlockd *d)
{
    rlim_t reserve = FD_RESERVE + (rlim_t)d->cfg.admin_maxclients + 2 * (rlim_t)redis_nodes(d->redis);
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > INT_MAX)
        return INT_MAX;
    if (reserve > rl.rlim_cur / 2)
        reserve = rl.rlim_cur / 2;
    return (int)(rl.rlim_cur - reserve);
}

/* Refuses a client with ERR LIMIT why; one log line at most every ACCEPT_LOG_MS. */
static void refuse(struct dlockd *d, evutil_socket_t fd, const char *peer, const char *why)
{
    struct server *srv = d->server;
    char line[128];
    int n = proto_fmt_err(line, sizeof(line), NULL, PROTO_ELIMIT, "%s", why);

    if (n > 0 && write(fd, line, (size_t)n) < 0)
        log_debug("server: refusing %s", peer);
    evutil_closesocket(fd);
    if (log_rate_due(&srv->refused, now_ms(), ACCEPT_LOG_MS)) {
        log_warnx("server: %s, refused %s (%d refused since the last such line)", why, peer, srv->refused.count);
        srv->refused.count = 0;
    }
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
    if (d->nconns >= d->cfg.maxclients)
        refuse(d, fd, peer, "max number of clients reached");
    else if (fd >= server_fd_line(d))
        refuse(d, fd, peer, "too few file descriptors left");
    else
        conn_accept(d, fd, peer);
}

/* Enables every listener that should accept now, disables the others. */
static void apply(struct server *srv)
{
    for (int i = 0; i < srv->n; i++)
        (srv->paused ? evconnlistener_disable : evconnlistener_enable)(srv->listeners[i]);
    for (int i = 0; i < SERVER_ADOPTED; i++)
        if (srv->adopted[i])
            (srv->paused || !srv->wanted[i] ? evconnlistener_disable : evconnlistener_enable)(srv->adopted[i]);
}

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
    struct server *srv = arg;

    (void)fd;
    (void)what;
    srv->paused = 0;
    apply(srv);
}

/* accept failed, most likely for want of descriptors (EMFILE, ENFILE): the
 * connection stays in the backlog and the listener readable, so every
 * listener pauses instead of spinning, and accepts again after ACCEPT_RETRY_MS. */
void server_accept_failed(struct dlockd *d, struct evconnlistener *l)
{
    struct server *srv = d->server;
    struct timeval tv = { 0, ACCEPT_RETRY_MS * 1000 };
    int err = EVUTIL_SOCKET_ERROR();

    if (srv == NULL) { /* shutting down */
        evconnlistener_disable(l);
        return;
    }
    if (log_rate_due(&srv->failed, now_ms(), ACCEPT_LOG_MS)) {
        log_warnx("server: accept: %s; accepting paused for %d ms, %d time(s) since the last such line",
                  strerror(err), ACCEPT_RETRY_MS, srv->failed.count);
        srv->failed.count = 0;
        srv->failing = 1;
    }
    srv->paused = 1;
    apply(srv);
    evtimer_add(srv->resume, &tv);
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
    server_accept_failed(arg, l);
}

void server_adopt(struct dlockd *d, struct evconnlistener *l, int on)
{
    struct server *srv = d->server;

    for (int i = 0; i < SERVER_ADOPTED; i++)
        if (srv->adopted[i] == NULL || srv->adopted[i] == l) {
            srv->adopted[i] = l;
            srv->wanted[i] = on;
            apply(srv);
            return;
        }
    fatalx("server: more than %d adopted listeners", SERVER_ADOPTED);
}

void server_want(struct dlockd *d, struct evconnlistener *l, int on)
{
    if (d->server)
        server_adopt(d, l, on);
    else if (!on)
        evconnlistener_disable(l);
}

void server_disown(struct dlockd *d, struct evconnlistener *l)
{
    for (int i = 0; d->server && i < SERVER_ADOPTED; i++)
        if (d->server->adopted[i] == l)
            d->server->adopted[i] = NULL;
}

void server_fd_limit(const struct config *cfg)
{
    rlim_t want = (rlim_t)cfg->maxclients + FD_RESERVE + (rlim_t)cfg->admin_maxclients;
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
        log_warn("server: cannot raise the limit of descriptors to %llu", (unsigned long long)rl.rlim_cur);
    else if (rl.rlim_cur < want)
        log_warnx("server: maxclients %lld needs %llu descriptors, the hard limit is %llu: "
                  "clients past what it leaves are refused",
                  (long long)cfg->maxclients, (unsigned long long)want, (unsigned long long)rl.rlim_max);
}

/* Connections the kernel holds for accept: on a unix socket a full backlog refuses a connect
 * (EAGAIN) rather than letting it retry, so bursts of clients need the same room there as on TCP. */
#define LISTEN_BACKLOG 511

static struct evconnlistener *listen_unix(struct dlockd *d, const struct addr *a)
{
    struct sockaddr_un sun;
    struct evconnlistener *l;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    strcpy(sun.sun_path, a->path);
    unlink(a->path);
    l = evconnlistener_new_bind(d->base, on_accept, d, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, LISTEN_BACKLOG,
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
                                LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | LEV_OPT_REUSEABLE, LISTEN_BACKLOG,
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
    struct server *srv = must(calloc(1, sizeof(*srv)));
    char name[300];

    srv->resume = must(evtimer_new(d->base, on_resume, srv));
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
