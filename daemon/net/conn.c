/* conn.c - a client connection: splits input into lines, runs untagged
 * requests one at a time and tagged ones at once, and writes replies and events. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "conn.h"
#include "dict.h"
#include "hooks.h"
#include "log.h"
#include "mem.h"
#include "session.h"

static uint64_t next_conn_id = 1;

static void conn_free(struct conn *c, const char *reason);
static void advance_soon(struct conn *c);

static const char *const state_names[] = { "open", "quitting", "closing" };

/* state_moves[from] has bit `to` set when the move is legal; the close
 * paths (cut, conn_close_soon, conn_free) may meet a closing connection. */
static const unsigned state_moves[] = {
    [CONN_OPEN] = 1u << CONN_QUITTING | 1u << CONN_CLOSING,
    [CONN_QUITTING] = 1u << CONN_CLOSING,
    [CONN_CLOSING] = 1u << CONN_CLOSING,
};

/* Moves c to state s; a move not in state_moves is a bug. */
static void conn_state(struct conn *c, enum conn_state s)
{
    if (!(state_moves[c->state] & 1u << s)) {
        log_warnx("c%llu: bug: state %s -> %s", (unsigned long long)c->id, state_names[c->state], state_names[s]);
        assert(!"illegal connection state move");
    }
    c->state = s;
}

/* Frees c on a later turn of the loop: its callers may still be using it. */
static void reap_soon(struct conn *c, const char *reason)
{
    c->close_reason = reason;
    if (!c->reaping) {
        c->reaping = 1;
        TAILQ_INSERT_TAIL(&c->d->reaping, c, reap_link);
    }
    event_active(c->d->reap, EV_TIMEOUT, 0);
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    struct dlockd *d = arg;
    struct conn *c;

    (void)fd;
    (void)what;
    while ((c = TAILQ_FIRST(&d->reaping)) != NULL)
        conn_free(c, c->close_reason);
}

/* 1 when line (len bytes, tagged or not) is a QUIT. */
static int is_quit(const char *line, size_t len)
{
    const char *p = line, *end = line + len;

    if (p < end && *p == '#') {
        while (p < end && *p != ' ')
            p++;
        while (p < end && *p == ' ')
            p++;
    }
    return end - p >= 4 && strncasecmp(p, "QUIT", 4) == 0 && (end - p == 4 || p[4] == ' ' || p[4] == '\r');
}

/*
 * c goes without reading what it sent (its peer reset, or it read nothing
 * of its replies): a QUIT among the lines it sent still ends its session,
 * at once, rather than leaving its holds for a session ttl. Nothing else of
 * them is carried out.
 */
static void quit_unread(struct conn *c, const char *p, const char *end)
{
    struct queued *q;
    int quit = 0;

    TAILQ_FOREACH(q, &c->queued, link)
        quit = quit || is_quit(q->line, q->len);
    while (!quit && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (nl == NULL)
            break;
        quit = is_quit(p, (size_t)(nl - p));
        p = nl + 1;
    }
    if (quit && c->authed && c->quit == NULL && c->session) {
        log_debug("c%llu: gone with a QUIT unread: its session ends", (unsigned long long)c->id);
        session_end(c->session, SESSION_QUIT);
    }
}

/* Stops reading c and drops the replies it has not taken. */
static void cut(struct conn *c, const char *reason)
{
    conn_state(c, CONN_CLOSING);
    c->cut = 1;
    event_del(c->readable);
    if (c->writable)
        event_free(c->writable);
    if (c->out)
        evbuffer_free(c->out);
    c->writable = NULL;
    c->out = NULL;
    reap_soon(c, reason);
}

static int retriable(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

static void on_writable(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    (void)what;
    if (evbuffer_write(c->out, fd) < 0 && !retriable(errno)) {
        conn_free(c, "socket error");
        return;
    }
    if (evbuffer_get_length(c->out) > 0)
        return;
    event_free(c->writable);
    evbuffer_free(c->out);
    c->writable = NULL;
    c->out = NULL;
    if (c->state == CONN_CLOSING)
        reap_soon(c, c->close_reason);
}

/* A reply usually fits the socket buffer: sent at once, it needs no buffer
 * and no write event. What does not fit waits in c->out until it does. */
static void write_line(struct conn *c, const char *line, size_t len)
{
    if (c->state == CONN_CLOSING)
        return;
    if (c->out == NULL) {
        ssize_t n = send(c->fd, line, len, MSG_NOSIGNAL);
        if (n < 0 && !retriable(errno)) {
            cut(c, "socket error");
            return;
        }
        if (n > 0) {
            line += n;
            len -= (size_t)n;
        }
        if (len == 0)
            return;
        c->out = must(evbuffer_new());
        c->writable = must(event_new(c->d->base, c->fd, EV_WRITE | EV_PERSIST, on_writable, c));
        must_ok(event_add(c->writable, NULL));
    }
    must_ok(evbuffer_add(c->out, line, len));
    if ((int64_t)evbuffer_get_length(c->out) > c->d->cfg.client_output_limit) {
        /* It does not read its replies: cut it off, on the next turn of the loop. */
        log_warnx("c%llu: %s: more than %lld bytes of replies unread, closing", (unsigned long long)c->id, c->peer,
                  (long long)c->d->cfg.client_output_limit);
        cut(c, "output limit");
    }
}

#define TRIM_PEAK 4096 /* requests at once: a burst whose pages are worth giving back */

/* A burst of requests leaves its pages to the heap: give them back once it is over. */
static void req_count_down(struct dlockd *d)
{
    d->nreqs--;
    if (d->reqs_peak >= TRIM_PEAK && d->nreqs <= d->reqs_peak / 16) {
        mem_trim();
        d->reqs_peak = d->nreqs;
    }
}

static void req_end(struct req *r, const char *body)
{
    struct conn *c = r->c;
    struct dlockd *d = r->d;

    r->d->hooks->ended(r, body);
    if (c) {
        TAILQ_REMOVE(&c->running, r, link);
        c->nrunning--;
        if (r->untagged)
            c->untagged_busy = 0;
        if (c->resuming == r)
            c->resuming = NULL;
        advance_soon(c);
    }
    free(r->held);
    free(r);
    req_count_down(d);
}

static void quit_now(struct conn *c)
{
    struct req *r = c->quit;
    struct session *s = c->session;

    c->quit = NULL;
    if (s && s->has_secret) {
        c->d->hooks->session_quit(s, r); /* answered once its record shows where it was */
        return;
    }
    if (s)
        session_end(s, SESSION_QUIT);
    conn_quit_answer(r, QUIT_ENDED);
}

void conn_quit_answer(struct req *r, enum quit_end end)
{
    struct conn *c = r->c;

    if (end == QUIT_MOVED && c)
        conn_event(c, "BYE reason=moved");
    if (end == QUIT_ENDED)
        req_reply(r, "OK", NULL);
    else
        req_drop(r);
    if (c)
        conn_close_soon(c, end == QUIT_ENDED ? "quit" : end == QUIT_MOVED ? "session moved" : "quit, not confirmed");
}

/*
 * Tells every running request of c but its QUIT that c goes: its quit
 * callback at a QUIT when it has one, else gone. A callback may end any
 * request of c, not only its own, so the walk goes on from a marker it keeps
 * in the list, never from a pointer saved before the call.
 */
static void tell_running(struct conn *c, int quitting)
{
    struct req mark = { .marker = 1 }, *r;

    TAILQ_INSERT_HEAD(&c->running, &mark, link);
    while ((r = TAILQ_NEXT(&mark, link)) != NULL) {
        TAILQ_REMOVE(&c->running, &mark, link);
        TAILQ_INSERT_AFTER(&c->running, r, &mark, link);
        if (r->marker || r == c->quit)
            continue;
        if (quitting && r->quit)
            r->quit(r);
        else if (r->gone)
            r->gone(r);
    }
    TAILQ_REMOVE(&c->running, &mark, link);
}

void conn_quit(struct conn *c, struct req *r)
{
    conn_state(c, CONN_QUITTING);
    c->quit = r;
    tell_running(c, 1);
    advance_soon(c);
}

int conn_gone(const struct conn *c)
{
    return c == NULL || c->state == CONN_CLOSING || c->eof;
}

/* Writes "[#tag ]text\n" to c, whatever its length; a line break in text becomes a space. */
static void send_line(struct conn *c, const char *tag, const char *text)
{
    size_t tl = tag[0] ? strlen(tag) + 2 : 0, xl = strlen(text), len = tl + xl + 1;
    char stack[1024], *line = len <= sizeof(stack) ? stack : must(malloc(len));

    if (tl) {
        line[0] = '#';
        memcpy(line + 1, tag, tl - 2);
        line[tl - 1] = ' ';
    }
    for (size_t i = 0; i < xl; i++)
        line[tl + i] = text[i] == '\n' || text[i] == '\r' ? ' ' : text[i];
    line[len - 1] = '\n';
    write_line(c, line, len);
    if (line != stack)
        free(line);
}

/*
 * "head" followed by " " and fmt's text when fmt is not NULL: in buf when it
 * fits in cap bytes (cap > strlen(head) + 1), else in a malloc'd string.
 */
static char *format_body(char *buf, size_t cap, const char *head, const char *fmt, va_list ap)
{
    size_t hl = strlen(head), room = cap - hl - 1;
    char *big;
    va_list aq;
    int n;

    memcpy(buf, head, hl + 1);
    if (fmt == NULL)
        return buf;
    va_copy(aq, ap);
    n = vsnprintf(buf + hl + 1, room, fmt, aq);
    va_end(aq);
    if (n < 0)
        return buf;
    buf[hl] = ' ';
    if ((size_t)n < room)
        return buf;
    big = must(malloc(hl + 1 + (size_t)n + 1));
    memcpy(big, buf, hl + 1);
    vsnprintf(big + hl + 1, (size_t)n + 1, fmt, ap);
    return big;
}

void req_send(struct req *r, const char *body)
{
    if (r->holds > 0) {
        free(r->held);
        r->held = must(strdup(body));
        return;
    }
    stats_reply(&r->d->stats, r->pr.verb, body);
    if (r->c)
        send_line(r->c, r->pr.tag, body);
    req_end(r, body);
}

void req_reply(struct req *r, const char *status, const char *fmt, ...)
{
    char buf[1024], *body;
    va_list ap;

    va_start(ap, fmt);
    body = format_body(buf, sizeof(buf), status, fmt, ap);
    va_end(ap);
    req_send(r, body);
    if (body != buf)
        free(body);
}

void req_err(struct req *r, enum proto_err e, const char *fmt, ...)
{
    char head[32], buf[1024], *body;
    va_list ap;

    r->d->stats.errors++;
    snprintf(head, sizeof(head), "ERR %s", proto_err_code(e));
    va_start(ap, fmt);
    body = format_body(buf, sizeof(buf), head, fmt, ap);
    va_end(ap);
    if (r->c)
        log_debug("c%llu: %s", (unsigned long long)r->c->id, body);
    req_send(r, body);
    if (body != buf)
        free(body);
}

static void slot_gone(struct req *r)
{
    if (r->c && r->c->eof && r->c->state != CONN_CLOSING)
        return;
    *(struct req **)r->ctx = NULL;
    req_drop(r);
}

void req_await(struct req *r, struct req **slot)
{
    *slot = r;
    r->ctx = slot;
    r->gone = slot_gone;
}

void req_drop(struct req *r)
{
    if (r->holds > 0)
        r->dropped = 1;
    else
        req_end(r, NULL);
}

void req_hold(struct req *r)
{
    r->holds++;
}

void req_unhold(struct req *r)
{
    char *body = r->held;

    if (--r->holds > 0)
        return;
    r->held = NULL;
    if (body)
        req_send(r, body);
    else if (r->dropped)
        req_end(r, NULL);
    free(body);
}

/* A repeat that was to start: its connection goes first. */
static void start_gone(struct req *r)
{
    TAILQ_REMOVE(&r->c->starting, r, idlink);
    req_drop(r);
}

int req_start_soon(struct req *r)
{
    struct conn *c = r->c;

    if (conn_gone(c) || c->state == CONN_QUITTING)
        return -1;
    TAILQ_INSERT_TAIL(&c->starting, r, idlink);
    r->gone = start_gone;
    advance_soon(c);
    return 0;
}

void req_resuming(struct req *r)
{
    if (r->c)
        r->c->resuming = r;
}

struct session *req_session(struct req *r)
{
    return session_find(r->d, r->sid);
}

/* Sends "ERR CODE text" on c, untagged: for what is refused before it is a request. */
static void conn_err(struct conn *c, enum proto_err e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void conn_err(struct conn *c, enum proto_err e, const char *fmt, ...)
{
    char head[32], buf[256], *text;
    va_list ap;

    snprintf(head, sizeof(head), "ERR %s", proto_err_code(e));
    va_start(ap, fmt);
    text = format_body(buf, sizeof(buf), head, fmt, ap);
    va_end(ap);
    send_line(c, "", text);
    if (text != buf)
        free(text);
}

void conn_event(struct conn *c, const char *fmt, ...)
{
    char buf[1024], *text;
    va_list ap;

    if (c == NULL)
        return;
    va_start(ap, fmt);
    text = format_body(buf, sizeof(buf), "*", fmt, ap);
    va_end(ap);
    send_line(c, "", text);
    if (text != buf)
        free(text);
}

/* Appends the event line text to what s keeps for its next connection. */
static void keep_missed(struct session *s, const char *text)
{
    size_t len = strlen(text);

    /* A lost hold is one of at most max-holds: so are its events. */
    if (s->nmissed >= s->d->cfg.max_holds)
        return;
    s->missed = must(realloc(s->missed, s->missed_len + len + 1));
    memcpy(s->missed + s->missed_len, text, len);
    s->missed[s->missed_len + len] = '\n';
    s->missed_len += len + 1;
    s->nmissed++;
}

/* "* text" for s: sent to its connection when send is 1, and kept for the next one while
 * that connection is missing or going (always when send is 0). */
static void session_event(struct session *s, int send, const char *fmt, va_list ap)
{
    char buf[1024], *text = format_body(buf, sizeof(buf), "*", fmt, ap);

    if (send && s->conn)
        send_line(s->conn, "", text);
    if (!send || conn_gone(s->conn))
        keep_missed(s, text);
    if (text != buf)
        free(text);
}

void conn_session_event(struct session *s, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    session_event(s, 1, fmt, ap);
    va_end(ap);
}

void conn_session_missed(struct session *s, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    session_event(s, 0, fmt, ap);
    va_end(ap);
}

void conn_resumed(struct conn *c)
{
    struct session *s = c->session;

    if (s == NULL || s->missed == NULL)
        return;
    write_line(c, s->missed, s->missed_len);
    free(s->missed);
    s->missed = NULL;
    s->missed_len = 0;
    s->nmissed = 0;
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
    struct req *r = must(calloc(1, sizeof(*r) + len + 1));

    r->d = c->d;
    r->c = c;
    r->arrived = arrived;
    if (++c->d->nreqs > c->d->reqs_peak)
        c->d->reqs_peak = c->d->nreqs;
    memcpy(r->line, line, len);
    r->line[len] = '\0';
    r->len = len;
    r->untagged = !is_tagged(r->line);
    if (c->session)
        memcpy(r->sid, c->session->id, sizeof(r->sid));
    return r;
}

static void run(struct conn *c, struct req *r)
{
    TAILQ_INSERT_TAIL(&c->running, r, link);
    c->nrunning++;
    if (r->untagged)
        c->untagged_busy = 1;
    r->d->hooks->dispatch(r);
}

/* 1 while the next queued line must wait: an untagged request runs, a HELLO
 * resumes a session or, before AUTH, any request runs (one at a time: one
 * password guess at a time). */
static int busy(const struct conn *c)
{
    return c->untagged_busy || c->resuming || (!c->authed && c->nrunning > 0);
}

#define ADVANCE_BATCH 256 /* queued requests run per turn of the loop */

/*
 * What comes next on c: the repeats that took an id over, the queued
 * untagged requests, a QUIT once every other request has ended, the close
 * after EOF. It runs from an event of its own, so that ending one request
 * never starts another inside it (no recursion, and no request freed under
 * a caller that walks the lists).
 */
static void advance(struct conn *c)
{
    struct queued *q;
    struct req *r;
    int n = 0;

    /* Only a live connection has any: tell_running drops them at a close, EOF or QUIT. */
    while ((r = TAILQ_FIRST(&c->starting)) != NULL) {
        TAILQ_REMOVE(&c->starting, r, idlink);
        r->gone = NULL;
        r->d->hooks->run(r);
    }
    while (c->state == CONN_OPEN && !busy(c) && (q = TAILQ_FIRST(&c->queued)) != NULL) {
        if (++n > ADVANCE_BATCH) {
            advance_soon(c); /* let the other connections have a turn */
            return;
        }
        TAILQ_REMOVE(&c->queued, q, link);
        c->nqueued--;
        c->d->nqueued -= !q->limited;
        r = req_new(c, q->line, q->len, q->arrived);
        r->limited = q->limited;
        run(c, r);
        free(q);
    }
    if (c->state == CONN_CLOSING)
        return;
    if (c->quit && TAILQ_FIRST(&c->running) == c->quit && TAILQ_NEXT(c->quit, link) == NULL)
        quit_now(c);
    else if (c->eof && TAILQ_EMPTY(&c->running) && TAILQ_EMPTY(&c->queued))
        conn_close_soon(c, "closed by client, all answered");
}

/* Advances the connections that were due when this turn of the loop began;
 * those made due meanwhile wait for the next turn. No connection is freed
 * in here (conn_free runs from socket events and on_reap only). */
static void on_advance(evutil_socket_t fd, short what, void *arg)
{
    struct dlockd *d = arg;
    struct conn_list due;
    struct conn *c;

    (void)fd;
    (void)what;
    TAILQ_INIT(&due);
    TAILQ_CONCAT(&due, &d->advancing, advance_link);
    while ((c = TAILQ_FIRST(&due)) != NULL) {
        TAILQ_REMOVE(&due, c, advance_link);
        c->advancing = 0;
        advance(c);
    }
}

static void advance_soon(struct conn *c)
{
    if (!c->advancing) {
        c->advancing = 1;
        TAILQ_INSERT_TAIL(&c->d->advancing, c, advance_link);
    }
    event_active(c->d->advance, EV_TIMEOUT, 0);
}

#define PREAUTH_QUEUED 8 /* lines that may wait their turn before AUTH */

/* A line finds the queue full: its reply could only come out of turn, so c closes. */
static void refuse_queued(struct conn *c, int64_t max)
{
    char why[96];

    if (c->authed)
        snprintf(why, sizeof(why), "more than %lld requests wait their turn (max-queued)", (long long)max);
    else
        snprintf(why, sizeof(why), "more than %lld requests before AUTH", (long long)max);
    log_warnx("c%llu: %s: %s, closing", (unsigned long long)c->id, c->peer, why);
    conn_err(c, PROTO_ELIMIT, "%s", why);
    conn_close_soon(c, "too many queued requests");
}

static void take_line(struct conn *c, const char *line, size_t len)
{
    int64_t max = c->authed || c->d->cfg.max_queued < PREAUTH_QUEUED ? c->d->cfg.max_queued : PREAUTH_QUEUED;
    uint64_t now = now_ms();
    struct queued *q;
    int limited;

    if (c->state != CONN_OPEN)
        return; /* nothing sent after QUIT runs */
    if (c->session)
        session_touch(c->session);
    if ((c->authed && !c->resuming && is_tagged(line)) || (!busy(c) && TAILQ_EMPTY(&c->queued))) {
        run(c, req_new(c, line, len, now));
        return;
    }
    if (c->nqueued >= max) {
        refuse_queued(c, max);
        return;
    }
    /* Past max-requests only its place is kept, for an ERR LIMIT in order. */
    if ((limited = conn_requests_full(c, 0)))
        len = 0;
    /* Its turn may be far: until then it is kept as a line, not as a request. */
    q = must(malloc(sizeof(*q) + len + 1));
    q->arrived = now;
    q->limited = limited;
    q->len = len;
    memcpy(q->line, line, len);
    q->line[len] = '\0';
    TAILQ_INSERT_TAIL(&c->queued, q, link);
    c->nqueued++;
    c->d->nqueued += !q->limited;
}

int conn_requests_full(const struct conn *c, int counted)
{
    const struct dlockd *d = c->d;
    int64_t held = (int64_t)(d->nreqs + d->nqueued) - counted, own = c->nrunning + c->nqueued - counted;

    return held >= d->cfg.max_requests && own >= d->cfg.max_requests / (d->nconns > 0 ? d->nconns : 1);
}

/* Splits what arrived into lines, after the incomplete line c kept, if any. */
static void feed(struct conn *c, const char *data, size_t len)
{
    size_t max = (size_t)c->d->cfg.max_line;
    char *joined = NULL;
    const char *p = data, *end = data + len;

    if (!c->authed && c->d->cfg.preauth_max_line < c->d->cfg.max_line)
        max = (size_t)c->d->cfg.preauth_max_line;
    if (c->part) {
        joined = must(realloc(c->part, c->partlen + len));
        memcpy(joined + c->partlen, data, len);
        p = joined;
        end = joined + c->partlen + len;
        c->part = NULL;
        c->partlen = 0;
    }
    while (c->state != CONN_CLOSING && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));

        if (nl == NULL ? (size_t)(end - p) >= max : (size_t)(nl - p) + 1 > max) {
            conn_err(c, PROTO_ETOOBIG, "line longer than %zu bytes", max);
            conn_close_soon(c, "line too long");
            break;
        }
        if (nl == NULL)
            break;
        take_line(c, p, (size_t)(nl - p));
        p = nl + 1;
        if (c->state == CONN_CLOSING && c->cut)
            quit_unread(c, p, end); /* a reply it did not take cut it */
    }
    if (c->state != CONN_CLOSING && p < end) {
        c->partlen = (size_t)(end - p);
        c->part = must(malloc(c->partlen));
        memcpy(c->part, p, c->partlen);
    }
    free(joined);
}

static void on_eof(struct conn *c);

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    char buf[16384];
    ssize_t n;

    (void)what;
    if ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
        feed(c, buf, (size_t)n);
    else if (n == 0 && !c->eof && c->state != CONN_CLOSING)
        on_eof(c);
    else if (n == 0)
        conn_free(c, "closed by client");
    else if (!retriable(errno))
        conn_free(c, "socket error");
}

/* The client closed its side. As Redis does, what it sent before is still
 * carried out and answered; but whatever waits for a lock is cancelled, as
 * for any closed connection. Then the connection closes. */
static void on_eof(struct conn *c)
{
    c->eof = 1;
    event_del(c->readable);
    free(c->part);
    c->part = NULL;
    c->partlen = 0;
    tell_running(c, 0);
    advance_soon(c);
}

void conn_close_soon(struct conn *c, const char *reason)
{
    if (c->state == CONN_CLOSING)
        return;
    log_debug("c%llu: closing: %s", (unsigned long long)c->id, reason);
    conn_state(c, CONN_CLOSING);
    c->close_reason = reason;
    event_del(c->readable);
    tell_running(c, 0);
    if (c->out == NULL)
        reap_soon(c, reason);
}

static void conn_free(struct conn *c, const char *reason)
{
    struct dlockd *d = c->d;
    struct req *r;
    struct queued *q;

    if (reason)
        log_debug("c%llu: %s", (unsigned long long)c->id, reason);
    conn_state(c, CONN_CLOSING);
    tell_running(c, 0);
    if (!TAILQ_EMPTY(&c->queued))
        quit_unread(c, NULL, NULL);
    while ((q = TAILQ_FIRST(&c->queued)) != NULL) {
        TAILQ_REMOVE(&c->queued, q, link);
        d->nqueued -= !q->limited;
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
    if (c->advancing)
        TAILQ_REMOVE(&d->advancing, c, advance_link);
    if (c->reaping)
        TAILQ_REMOVE(&d->reaping, c, reap_link);
    TAILQ_REMOVE(&d->conns, c, link);
    d->nconns--;
    event_free(c->readable);
    if (c->writable)
        event_free(c->writable);
    if (c->out)
        evbuffer_free(c->out);
    free(c->part);
    evutil_closesocket(c->fd);
    free(c);
}

void conn_close_all(struct dlockd *d)
{
    struct conn *c;

    while ((c = TAILQ_FIRST(&d->conns)) != NULL)
        conn_free(c, "shutdown");
    event_free(d->advance);
    event_free(d->reap);
    d->advance = d->reap = NULL;
}

void conn_init(struct dlockd *d)
{
    TAILQ_INIT(&d->conns);
    TAILQ_INIT(&d->advancing);
    TAILQ_INIT(&d->reaping);
    d->advance = must(event_new(d->base, -1, 0, on_advance, d));
    d->reap = must(event_new(d->base, -1, 0, on_reap, d));
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
    if (c->session == NULL)
        conn_attach(c, session_new(c->d, c->peer, c->d->cfg.session_ttl));
}

void conn_attach(struct conn *c, struct session *s)
{
    struct conn *old = s->conn;

    if (c->session && c->session != s)
        c->session->conn = NULL;
    s->conn = c;
    c->session = s;
    if (old && old != c) {
        old->session = NULL;
        conn_event(old, "BYE reason=moved");
        conn_close_soon(old, "session moved");
    }
}

void conn_moved_away(struct session *s)
{
    struct conn *c = s->conn;

    if (c == NULL)
        return;
    c->session = NULL;
    s->conn = NULL;
    conn_event(c, "BYE reason=moved");
    conn_close_soon(c, "session moved");
}

void conn_session_ended(struct conn *c, int expired)
{
    c->session = NULL;
    if (expired) {
        conn_event(c, "BYE reason=expired");
        conn_close_soon(c, "session expired");
    }
}

struct conn *conn_new(struct dlockd *d, evutil_socket_t fd, const char *peer)
{
    struct conn *c;

    c = must(calloc(1, sizeof(*c) + strlen(peer) + 1));
    c->d = d;
    c->id = next_conn_id++;
    memcpy(c->peer, peer, strlen(peer) + 1);
    deadline_init(&c->auth_dl, on_auth_timeout);
    TAILQ_INIT(&c->queued);
    TAILQ_INIT(&c->running);
    TAILQ_INIT(&c->starting);
    TAILQ_INIT(&c->reads);
    c->fd = fd;
    c->readable = must(event_new(d->base, fd, EV_READ | EV_PERSIST, on_readable, c));
    must_ok(event_add(c->readable, NULL));
    TAILQ_INSERT_TAIL(&d->conns, c, link);
    d->nconns++;
    if (d->cfg.requirepass == NULL)
        conn_authed(c);
    else
        deadline_arm(d->deadlines, &c->auth_dl, now_ms() + (uint64_t)d->cfg.auth_timeout);
    log_debug("c%llu: connected from %s, session %s", (unsigned long long)c->id, peer,
              c->session ? c->session->id : "none before AUTH");
    return c;
}

void conn_accept(struct dlockd *d, evutil_socket_t fd, const char *peer)
{
    evutil_make_socket_nonblocking(fd);
    /* Replies are small and often follow a request the client pipelined: without this,
     * Nagle holds a grant until the client's delayed ACK (40 ms). Fails harmlessly on unix sockets. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
    conn_new(d, fd, peer);
}
