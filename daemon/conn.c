/* conn.c - a client connection: splits input into lines, runs untagged
 * requests one at a time and tagged ones at once, and writes replies and events. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "cmd.h"
#include "conn.h"
#include "dict.h"
#include "log.h"
#include "reqid.h"
#include "session.h"

static uint64_t next_conn_id = 1;

static void conn_free(struct conn *c, const char *reason);
static void advance_soon(struct conn *c);

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    (void)fd;
    (void)what;
    conn_free(c, c->close_reason);
}

/* Frees c on a later turn of the loop: its callers may still be using it. */
static void reap_soon(struct conn *c, const char *reason)
{
    c->close_reason = reason;
    event_active(c->reaper, EV_TIMEOUT, 0);
}

static void write_line(struct conn *c, const char *line, int len)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    evutil_socket_t fd = bufferevent_getfd(c->bev);

    if (c->closing || len < 0)
        return;
    /* A reply usually fits the socket buffer: sent at once, it needs no write event.
     * What does not fit, or fails, goes through the bufferevent, which reports errors. */
    if (fd >= 0 && evbuffer_get_length(out) == 0) {
        ssize_t n = send(fd, line, (size_t)len, MSG_NOSIGNAL);
        if (n > 0) {
            line += n;
            len -= (int)n;
        }
        if (len == 0)
            return;
    }
    bufferevent_write(c->bev, line, (size_t)len);
    if ((int64_t)evbuffer_get_length(out) > c->d->cfg.client_output_limit) {
        /* It does not read its replies: cut it off, on the next turn of the loop. */
        log_warnx("c%llu: %s: more than %lld bytes of replies unread, closing", (unsigned long long)c->id, c->peer,
                  (long long)c->d->cfg.client_output_limit);
        c->closing = 1;
        bufferevent_disable(c->bev, EV_READ | EV_WRITE);
        evbuffer_drain(out, evbuffer_get_length(out));
        reap_soon(c, "output limit");
    }
}

static void req_end(struct req *r)
{
    struct conn *c = r->c;

    if (r->idrec)
        reqid_dropped(r);
    if (c) {
        TAILQ_REMOVE(&c->running, r, link);
        if (r->untagged)
            c->untagged_busy = 0;
        advance_soon(c);
    }
    free(r);
}

static void quit_now(struct conn *c)
{
    struct req *r = c->quit;
    struct session *s = c->session;

    c->quit = NULL;
    if (s)
        session_end(s, SESSION_QUIT);
    req_reply(r, "OK", NULL);
    conn_close_soon(c, "quit");
}

void conn_quit(struct conn *c, struct req *r)
{
    struct req *other, *next;

    c->quitting = 1;
    c->quit = r;
    for (other = TAILQ_FIRST(&c->running); other != NULL; other = next) {
        next = TAILQ_NEXT(other, link);
        if (other != r && other->quit)
            other->quit(other);
        else if (other != r && other->gone)
            other->gone(other);
    }
    advance_soon(c);
}

int conn_gone(const struct conn *c)
{
    return c == NULL || c->closing || c->eof;
}

void req_send(struct req *r, const char *body)
{
    char line[8192];

    stats_reply(&r->d->stats, r->pr.verb, body);
    /* ERR BACKEND changed nothing (or is undone): a repeat must run again. */
    if (r->idrec && strncmp(body, "ERR BACKEND", 11) == 0)
        reqid_dropped(r);
    else if (r->idrec)
        reqid_answered(r, body);
    if (r->c)
        write_line(r->c, line, proto_fmt_reply(line, sizeof(line), r->pr.tag, body, NULL));
    req_end(r);
}

void req_reply(struct req *r, const char *status, const char *fmt, ...)
{
    char body[8192];
    int n = snprintf(body, sizeof(body), "%s", status);
    va_list ap;

    if (fmt && n > 0 && (size_t)n + 1 < sizeof(body)) {
        body[n++] = ' ';
        va_start(ap, fmt);
        vsnprintf(body + n, sizeof(body) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    req_send(r, body);
}

void req_err(struct req *r, enum proto_err e, const char *fmt, ...)
{
    char body[1024];
    int n = snprintf(body, sizeof(body), "ERR %s ", proto_err_code(e));
    va_list ap;

    r->d->stats.errors++;
    va_start(ap, fmt);
    vsnprintf(body + n, sizeof(body) - (size_t)n, fmt, ap);
    va_end(ap);
    if (r->c)
        log_debug("c%llu: %s", (unsigned long long)r->c->id, body);
    req_send(r, body);
}

void req_drop(struct req *r)
{
    req_end(r);
}

struct session *req_session(struct req *r)
{
    return session_find(r->d, r->sid);
}

void conn_event(struct conn *c, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;

    if (c == NULL)
        return;
    memcpy(line, "* ", 2);
    va_start(ap, fmt);
    n = vsnprintf(line + 2, sizeof(line) - 3, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    n = n + 2 > (int)sizeof(line) - 2 ? (int)sizeof(line) - 2 : n + 2;
    line[n++] = '\n';
    write_line(c, line, n);
}

void conn_broadcast(struct dlockd *d, const char *text)
{
    struct conn *c;

    TAILQ_FOREACH(c, &d->conns, link)
        if (c->session)
            conn_event(c, "%s", text);
}

/* A line is tagged when its first token starts with '#'. */
static int is_tagged(const char *line)
{
    line += strspn(line, " \t");
    return *line == '#';
}

static struct req *req_new(struct conn *c, const char *line, size_t len, uint64_t arrived)
{
    struct req *r = calloc(1, sizeof(*r) + len + 1);

    if (r == NULL)
        fatalx("conn: out of memory");
    r->d = c->d;
    r->c = c;
    r->arrived = arrived;
    memcpy(r->line, line, len);
    r->line[len] = '\0';
    r->untagged = !is_tagged(r->line);
    if (c->session)
        memcpy(r->sid, c->session->id, sizeof(r->sid));
    return r;
}

static void run(struct conn *c, struct req *r)
{
    TAILQ_INSERT_TAIL(&c->running, r, link);
    if (r->untagged)
        c->untagged_busy = 1;
    cmd_dispatch(r);
}

#define ADVANCE_BATCH 256 /* queued requests run per turn of the loop */

/*
 * What comes next on c: the queued untagged requests, a QUIT once every
 * other request has ended, the close after EOF. It runs from c's own event,
 * so that ending one request never starts another inside it (no recursion,
 * and no request freed under a caller that walks the lists).
 */
static void on_advance(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    struct queued *q;
    int n = 0;

    (void)fd;
    (void)what;
    while (!c->closing && !c->quitting && !c->untagged_busy && (q = TAILQ_FIRST(&c->queued)) != NULL) {
        if (++n > ADVANCE_BATCH) {
            advance_soon(c); /* let the other connections have a turn */
            return;
        }
        TAILQ_REMOVE(&c->queued, q, link);
        run(c, req_new(c, q->line, strlen(q->line), q->arrived));
        free(q);
    }
    if (c->closing)
        return;
    if (c->quit && TAILQ_FIRST(&c->running) == c->quit && TAILQ_NEXT(c->quit, link) == NULL)
        quit_now(c);
    else if (c->eof && TAILQ_EMPTY(&c->running) && TAILQ_EMPTY(&c->queued))
        conn_close_soon(c, "closed by client, all answered");
}

static void advance_soon(struct conn *c)
{
    event_active(c->advance, EV_TIMEOUT, 0);
}

static void take_line(struct conn *c, const char *line, size_t len)
{
    uint64_t now = now_ms();
    struct queued *q;

    if (c->session)
        session_touch(c->session);
    if (is_tagged(line) || (!c->untagged_busy && TAILQ_EMPTY(&c->queued))) {
        run(c, req_new(c, line, len, now));
        return;
    }
    /* Its turn may be far: until then it is kept as a line, not as a request. */
    if ((q = malloc(sizeof(*q) + len + 1)) == NULL)
        fatalx("conn: out of memory");
    q->arrived = now;
    memcpy(q->line, line, len);
    q->line[len] = '\0';
    TAILQ_INSERT_TAIL(&c->queued, q, link);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t max = (size_t)c->d->cfg.max_line;

    if (!c->authed && c->d->cfg.preauth_max_line < c->d->cfg.max_line)
        max = (size_t)c->d->cfg.preauth_max_line;
    while (!c->closing) {
        size_t eol_len, avail = evbuffer_get_length(in);
        struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        char buf[65536], *line;

        if (eol.pos < 0 ? avail >= max : (size_t)eol.pos + 1 > max) {
            char reply[128];
            write_line(c, reply, proto_fmt_err(reply, sizeof(reply), NULL, PROTO_ETOOBIG,
                                               "line longer than %zu bytes", max));
            conn_close_soon(c, "line too long");
            return;
        }
        if (eol.pos < 0)
            return;
        line = (size_t)eol.pos + 1 <= sizeof(buf) ? buf : malloc((size_t)eol.pos + 1);
        if (line == NULL)
            fatalx("conn: out of memory");
        evbuffer_remove(in, line, (size_t)eol.pos + 1);
        take_line(c, line, (size_t)eol.pos);
        if (line != buf)
            free(line);
    }
}

static void on_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;

    if (c->closing && evbuffer_get_length(bufferevent_get_output(bev)) == 0)
        reap_soon(c, c->close_reason);
}

/* The client closed its side. As Redis does, what it sent before is still
 * carried out and answered; but whatever waits for a lock is cancelled, as
 * for any closed connection. Then the connection closes. */
static void on_eof(struct conn *c)
{
    struct req *r, *next;

    c->eof = 1;
    bufferevent_disable(c->bev, EV_READ);
    for (r = TAILQ_FIRST(&c->running); r != NULL; r = next) {
        next = TAILQ_NEXT(r, link);
        if (r->gone)
            r->gone(r);
    }
    advance_soon(c);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;

    (void)bev;
    if ((what & BEV_EVENT_EOF) && !c->eof && !c->closing)
        on_eof(c);
    else
        conn_free(c, (what & BEV_EVENT_EOF) ? "closed by client" : "socket error");
}

void conn_close_soon(struct conn *c, const char *reason)
{
    if (c->closing)
        return;
    log_debug("c%llu: closing: %s", (unsigned long long)c->id, reason);
    c->closing = 1;
    c->close_reason = reason;
    bufferevent_disable(c->bev, EV_READ);
    if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
        reap_soon(c, reason);
}

static void conn_free(struct conn *c, const char *reason)
{
    struct dlockd *d = c->d;
    struct req *r, *next;
    struct queued *q;

    if (reason)
        log_debug("c%llu: %s", (unsigned long long)c->id, reason);
    c->closing = 1;
    for (r = TAILQ_FIRST(&c->running); r != NULL; r = next) {
        next = TAILQ_NEXT(r, link);
        if (r->gone)
            r->gone(r);
    }
    while ((q = TAILQ_FIRST(&c->queued)) != NULL) {
        TAILQ_REMOVE(&c->queued, q, link);
        free(q);
    }
    if (c->quit) {
        /* It asked to QUIT: gone or not, its session ends; nothing else frees a QUIT. */
        struct req *quit = c->quit;
        c->quit = NULL;
        if (c->session)
            session_end(c->session, SESSION_QUIT);
        req_drop(quit);
    }
    while ((r = TAILQ_FIRST(&c->running)) != NULL) {
        TAILQ_REMOVE(&c->running, r, link);
        r->c = NULL; /* its reply, when it comes, is swallowed */
    }
    if (c->session)
        c->session->conn = NULL;
    deadline_cancel(d->deadlines, &c->auth_dl);
    event_free(c->reaper);
    event_free(c->advance);
    TAILQ_REMOVE(&d->conns, c, link);
    d->nconns--;
    bufferevent_free(c->bev);
    free(c);
}

void conn_close_all(struct dlockd *d)
{
    struct conn *c;

    while ((c = TAILQ_FIRST(&d->conns)) != NULL)
        conn_free(c, "shutdown");
}

static void on_auth_timeout(struct deadline *dl)
{
    struct conn *c = container_of(dl, struct conn, auth_dl);

    log_info("c%llu: %s did not authenticate in time, closing", (unsigned long long)c->id, c->peer);
    conn_close_soon(c, "not authenticated in time");
}

void conn_authed(struct conn *c)
{
    c->authed = 1;
    deadline_cancel(c->d->deadlines, &c->auth_dl);
}

struct conn *conn_new(struct dlockd *d, struct bufferevent *bev, const char *peer)
{
    struct conn *c;

    if ((c = calloc(1, sizeof(*c) + strlen(peer) + 1)) == NULL)
        fatalx("conn: out of memory");
    c->d = d;
    c->id = next_conn_id++;
    memcpy(c->peer, peer, strlen(peer) + 1);
    c->authed = d->cfg.requirepass == NULL;
    deadline_init(&c->auth_dl, on_auth_timeout);
    if (!c->authed)
        deadline_arm(d->deadlines, &c->auth_dl, now_ms() + (uint64_t)d->cfg.auth_timeout);
    TAILQ_INIT(&c->queued);
    TAILQ_INIT(&c->running);
    c->bev = bev;
    c->advance = event_new(d->base, -1, 0, on_advance, c);
    if ((c->reaper = event_new(d->base, -1, 0, on_reap, c)) == NULL || c->advance == NULL)
        fatalx("conn: out of memory");
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    TAILQ_INSERT_TAIL(&d->conns, c, link);
    d->nconns++;
    session_attach(session_new(d, peer, d->cfg.session_ttl), c);
    log_debug("c%llu: connected from %s, session %s", (unsigned long long)c->id, peer, c->session->id);
    return c;
}

void conn_accept(struct dlockd *d, evutil_socket_t fd, const char *peer)
{
    struct bufferevent *bev;

    if (d->nconns >= d->cfg.maxclients) {
        char line[128];
        int n = proto_fmt_err(line, sizeof(line), NULL, PROTO_ELIMIT, "max number of clients reached");
        if (n > 0 && write(fd, line, (size_t)n) < 0)
            log_debug("server: refusing %s", peer);
        evutil_closesocket(fd);
        log_warnx("server: maxclients (%lld) reached, refused %s", (long long)d->cfg.maxclients, peer);
        return;
    }
    evutil_make_socket_nonblocking(fd);
    /* Replies are small and often follow a request the client pipelined: without this,
     * Nagle holds a grant until the client's delayed ACK (40 ms). Fails harmlessly on unix sockets. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
    if ((bev = bufferevent_socket_new(d->base, fd, BEV_OPT_CLOSE_ON_FREE)) == NULL)
        fatalx("conn: out of memory");
    conn_new(d, bev, peer);
}
