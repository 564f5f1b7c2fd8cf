/* server.c - TCP and unix-socket listeners; accepted sockets become connections. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <event2/listener.h>

#include "conn.h"
#include "dlockd.h"
#include "log.h"
#include "server.h"

struct server {
    struct evconnlistener *listeners[CONFIG_MAX_LISTEN];
    int n;
    int inherited; /* the sockets came from systemd: their paths are not ours to unlink */
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

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    char peer[64];

    (void)l;
    (void)salen;
    peer_name(sa, peer, sizeof(peer));
    conn_accept(arg, fd, peer);
}

static void on_accept_error(struct evconnlistener *l, void *arg)
{
    (void)l;
    (void)arg;
    log_warn("server: accept");
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
    for (int i = 0; i < n && srv->n < CONFIG_MAX_LISTEN; i++) {
        struct evconnlistener *l;
        evutil_make_socket_nonblocking(3 + i);
        evutil_make_socket_closeonexec(3 + i);
        l = evconnlistener_new(d->base, on_accept, d, LEV_OPT_CLOSE_ON_FREE, -1, 3 + i);
        if (l == NULL)
            fatalx("server: cannot use socket %d from systemd", 3 + i);
        evconnlistener_set_error_cb(l, on_accept_error);
        srv->listeners[srv->n++] = l;
    }
    log_info("server: listening on %d socket(s) from systemd", srv->n);
    return srv->n;
}

int server_listen(struct dlockd *d)
{
    struct server *srv = calloc(1, sizeof(*srv));
    char name[300];

    if (srv == NULL)
        fatalx("server: out of memory");
    d->server = srv;
    if ((srv->inherited = listen_inherited(d, srv)) > 0)
        return 0;
    for (int i = 0; i < d->cfg.nlisten; i++) {
        const struct addr *a = &d->cfg.listen[i];
        struct evconnlistener *l = a->is_unix ? listen_unix(d, a) : listen_tcp(d, a);

        config_addr_str(a, name, sizeof(name));
        if (l == NULL) {
            log_warn("server: cannot listen on %s", name);
            return -1;
        }
        evconnlistener_set_error_cb(l, on_accept_error);
        srv->listeners[srv->n++] = l;
        log_info("server: listening on %s", name);
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
    for (int i = 0; i < d->cfg.nlisten && !srv->inherited; i++)
        if (d->cfg.listen[i].is_unix)
            unlink(d->cfg.listen[i].path);
    free(srv);
    d->server = NULL;
}
