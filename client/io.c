/* io.c - libdlock's I/O thread: one per handle. It owns the socket: connects and says HELLO,
 * sends queued requests, reads lines and hands replies to their requests, turns `*` events
 * into callbacks, sends a heartbeat every ttl/3, and reconnects after a broken connection,
 * resuming the session while it can still be alive.
 *
 * The session is alive until (send time of the last acknowledged heartbeat) + ttl, on
 * the monotonic clock: the server renews it no earlier than it receives that PING. Its holds
 * are trusted for less when the server tells its lock-lease (HELLO lease=): a dlockd that
 * died or lost Redis renews nothing, so holds that no answer confirmed in time are lost
 * ("jeopardy") before their Redis lease could run out and someone else be granted them. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "internal.h"

#define BACKOFF_MIN 50   /* ms between reconnect attempts, doubling */
#define BACKOFF_MAX 2000

/* ---------------------------------------------------------------- queues and events */

void io_wake(struct dlock *h)
{
    char c = 1;

    if (write(h->wake[1], &c, 1) < 0 && errno != EAGAIN)
        return; /* a full pipe wakes it as well */
}

int io_queue(struct dlock *h, const char *data, size_t len)
{
    if (h->outlen + len > h->outcap) {
        size_t cap = h->outcap ? h->outcap : 1024;
        while (cap < h->outlen + len)
            cap *= 2;
        char *p = realloc(h->out, cap);
        if (p == NULL)
            return -1;
        h->out = p;
        h->outcap = cap;
    }
    memcpy(h->out + h->outlen, data, len);
    h->outlen += len;
    return 0;
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

void io_event(struct dlock *h, enum dlock_event_type type, const char *name, const char *owner, enum dl_mode mode,
              unsigned long long token, const char *reason)
{
    struct dl_event *e = calloc(1, sizeof(*e));

    if (e == NULL)
        return;
    e->name = dup_or_null(name);
    e->owner = dup_or_null(owner);
    e->reason = dup_or_null(reason);
    e->ev.type = type;
    e->ev.name = e->name;
    e->ev.owner = e->owner;
    e->ev.reason = e->reason;
    e->ev.flags = mode == M_SHARED ? DLOCK_SHARED : 0;
    e->ev.token = token;
    *h->evtail = e;
    h->evtail = &e->next;
}

void io_hold_lost(struct dlock *h, struct dl_hold *hd, const char *reason)
{
    if (hd->lost)
        return;
    hd->lost = 1;
    io_event(h, DLOCK_EVENT_LOST, hd->name, hd->owner, hd->mode, hd->token, reason);
}

/* Calls the callback for every queued event, with h->mu released meanwhile. */
static void deliver(struct dlock *h)
{
    while (h->evq) {
        struct dl_event *list = h->evq;

        h->evq = NULL;
        h->evtail = &h->evq;
        pthread_mutex_unlock(&h->mu);
        while (list) {
            struct dl_event *e = list;
            list = e->next;
            if (h->opt.cb)
                h->opt.cb(h, &e->ev, h->opt.cbarg);
            free(e->name);
            free(e->owner);
            free(e->reason);
            free(e);
        }
        pthread_mutex_lock(&h->mu);
    }
}

static void set_jeopardy(struct dlock *h, unsigned bit, int on, const char *reason)
{
    unsigned old = h->jeopardy;

    h->jeopardy = on ? old | bit : old & ~bit;
    if (!old && h->jeopardy)
        io_event(h, DLOCK_EVENT_JEOPARDY, NULL, NULL, M_EXCL, 0, reason);
    else if (old && !h->jeopardy)
        io_event(h, DLOCK_EVENT_SAFE, NULL, NULL, M_EXCL, 0, NULL);
}

/* ---------------------------------------------------------------- session state */

/*
 * How long holds outlive a confirmation on a server whose lock-lease is lease ms (0: not
 * told). dlockd renews every hold's lease every lease/3, so whenever it answers, a hold has
 * at least 2/3 of it left; the margin covers the clocks and the time it takes to tell the
 * application: a tenth of the lease, at least 500 ms, at most half of what is left.
 */
static int64_t trust_of(int64_t lease)
{
    int64_t left = lease * 2 / 3, margin = lease / 10 > 500 ? lease / 10 : 500;

    return left - (margin < left / 2 ? margin : left / 2);
}

/* The time within which a heartbeat must be answered: the ttl, or the trust when shorter. */
static int64_t period(const struct dlock *h)
{
    return h->trust > 0 && h->trust < h->ttl ? h->trust : h->ttl;
}

/* When the session may have expired, or its holds lapsed unconfirmed: too late to resume it. */
static int64_t session_end(const struct dlock *h)
{
    int64_t holds = h->confirmed + h->trust;

    return h->trust > 0 && holds < h->safe_until ? holds : h->safe_until;
}

struct lost_arg {
    struct dlock *h;
    const char *name;           /* only holds of this name (NULL: all) */
    unsigned long long token;   /* only the hold with this token (0: any) */
    const char *reason;
};

static void lose_one(struct dl_hold *hd, void *arg)
{
    struct lost_arg *a = arg;

    if ((a->name == NULL || strcmp(hd->name, a->name) == 0) && (a->token == 0 || hd->token == a->token))
        io_hold_lost(a->h, hd, a->reason);
}

/* The session is gone: every hold is lost, pending releases can only fail, the next HELLO starts afresh. */
static void session_dead(struct dlock *h, const char *reason)
{
    struct lost_arg a = {h, NULL, 0, reason};
    struct dl_req *r, *next;

    if (h->session_dead || h->session[0] == '\0')
        return;
    h->session_dead = 1;
    explicit_bzero(h->secret, sizeof(h->secret));
    holds_foreach(&h->holds, lose_one, &a);
    for (r = h->reqs; r; r = next) {
        next = r->next;
        if (!r->internal && (r->kind == K_UNLOCK || r->kind == K_RELEASE))
            req_finish(h, r, DLOCK_ERR_LOST);
    }
    set_jeopardy(h, J_HB | J_BACKEND, 0, NULL);
}

/* Ends the session once session_end() has come (caller holds h->mu). 1 when it did now. */
static int session_due(struct dlock *h, int64_t now)
{
    if (h->session[0] == '\0' || h->session_dead || now < session_end(h))
        return 0;
    session_dead(h, now >= h->safe_until ? "expired" : "jeopardy");
    return 1;
}

static void on_event(struct dlock *h, const struct proto_reply *rp)
{
    const char *reason = proto_reply_get(rp, "reason");

    if (strcmp(rp->status, "LOST") == 0 && rp->arg) {
        struct lost_arg a = {h, rp->arg, 0, reason ? reason : "expired"};

        if (dl_parse_ull(proto_reply_get(rp, "token"), &a.token) < 0)
            a.token = 0;
        holds_foreach(&h->holds, lose_one, &a);
    } else if (strcmp(rp->status, "JEOPARDY") == 0) {
        set_jeopardy(h, J_BACKEND, 1, "backend");
    } else if (strcmp(rp->status, "SAFE") == 0) {
        set_jeopardy(h, J_BACKEND, 0, NULL);
        h->next_hb = dl_now(); /* its answer confirms the holds */
    } else if (strcmp(rp->status, "BYE") == 0 && (reason == NULL || strcmp(reason, "shutdown") != 0)) {
        session_dead(h, reason ? reason : "expired");
    }
    /* A dlockd that shuts down leaves the session and its holds in Redis: the connection
     * drops and the session is resumed there once it is back, or on another address. */
}

static void on_heartbeat(struct dlock *h, const struct proto_reply *rp)
{
    unsigned long long n;
    int64_t sent;

    if (dl_parse_ull(rp->tag + 2, &n) < 0 || n > h->hb_seq || h->hb_seq - n >= DL_HB_RING ||
        strcmp(rp->status, "OK") != 0)
        return;
    sent = h->hb_sent[n % DL_HB_RING];
    if (sent + h->ttl > h->safe_until)
        h->safe_until = sent + h->ttl;
    if (!(h->jeopardy & J_BACKEND) && sent > h->confirmed)
        h->confirmed = sent; /* a dlockd in touch with Redis renews the holds */
    set_jeopardy(h, J_HB, 0, NULL);
}

/* One received line (caller holds h->mu). */
static void dispatch(struct dlock *h, char *line)
{
    struct proto_reply rp;
    struct dl_req *r;

    if (proto_parse_reply(line, &rp) < 0) {
        /* A reply we cannot read (a newer server's error code, say) still ends its request. */
        if (rp.tag[0] && strncmp(rp.tag, "hb", 2) != 0 && (r = req_find(h, rp.tag)) != NULL)
            req_finish(h, r, DLOCK_ERR_PROTO);
        return;
    }
    if (rp.event)
        on_event(h, &rp);
    else if (strncmp(rp.tag, "hb", 2) == 0)
        on_heartbeat(h, &rp);
    else if (rp.tag[0] && (r = req_find(h, rp.tag)) != NULL)
        req_on_reply(h, r, &rp);
}

/* ---------------------------------------------------------------- connecting */

static int wait_fd(int fd, short events, int64_t deadline)
{
    struct pollfd p = {.fd = fd, .events = events};
    int64_t left;
    int n;

    do {
        left = deadline - dl_now();
        if (left < 0)
            left = 0;
        n = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
    } while ((n < 0 && errno == EINTR) || (n == 0 && dl_now() < deadline));
    return n > 0 ? 0 : -1;
}

static int connect_addr(const struct sockaddr *sa, socklen_t len, int64_t deadline)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = 0, one = 1;
    socklen_t elen = sizeof(err);

    if (fd < 0)
        return -1;
    if (connect(fd, sa, len) < 0) {
        if (errno != EINPROGRESS || wait_fd(fd, POLLOUT, deadline) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0 || err != 0) {
            close(fd);
            return -1;
        }
    }
    if (sa->sa_family != AF_UNIX)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* A connected non-blocking socket to a, or -1. */
static int dial(const struct dl_addr *a, int64_t deadline)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
    int fd = -1;

    if (a->path[0]) {
        struct sockaddr_un sun = {.sun_family = AF_UNIX};

        snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", a->path);
        return connect_addr((struct sockaddr *)&sun, sizeof(sun), deadline);
    }
    if (getaddrinfo(a->host, a->port, &hints, &res) != 0)
        return -1;
    for (ai = res; ai && fd < 0; ai = ai->ai_next)
        fd = connect_addr(ai->ai_addr, ai->ai_addrlen, deadline);
    freeaddrinfo(res);
    return fd;
}

static int send_all(int fd, const char *buf, size_t len, int64_t deadline)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (wait_fd(fd, POLLOUT, deadline) < 0)
                return -1;
            continue;
        }
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads until the reply tagged tag arrives (events on the way are handled). Returns a malloc'd copy or NULL. */
static char *sync_reply(struct dlock *h, int fd, const char *tag, int64_t deadline)
{
    char buf[4096];

    for (;;) {
        long n;

        while ((n = proto_lines_next(&h->lines, h->line, DL_REPLY_MAX)) >= 0) {
            struct proto_reply rp;
            char *copy = strdup(h->line);

            if (copy == NULL)
                return NULL;
            if (proto_parse_reply(h->line, &rp) == 0 && !rp.event && strcmp(rp.tag, tag) == 0)
                return copy;
            free(copy);
            if (rp.event) {
                pthread_mutex_lock(&h->mu);
                on_event(h, &rp);
                pthread_mutex_unlock(&h->mu);
            }
        }
        if (n == -2 || wait_fd(fd, POLLIN, deadline) < 0)
            return NULL;
        ssize_t got = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
            return NULL;
        if (got > 0 && proto_lines_feed(&h->lines, buf, (size_t)got) < 0)
            return NULL;
    }
}

struct hello {
    int64_t sent;                    /* when HELLO was sent */
    int64_t ttl;                     /* granted */
    int64_t lease;                   /* the server's lock-lease; 0 when it does not say */
    char sid[PROTO_STR_MAX + 1];     /* session id */
    char secret[PROTO_STR_MAX + 1];  /* its secret; "" when the server has none */
};

/* What the next HELLO says: the session to resume, with its secret, or a new session. */
struct resume {
    int fresh;                       /* start a new session */
    int cur;                         /* index of the address the session lives on */
    int64_t until;                   /* too late to resume from then on (DL_INF when fresh) */
    char sid[PROTO_STR_MAX + 1];
    char secret[PROTO_STR_MAX + 1];
};

/* The HELLO reply into out. 0 or a DLOCK_ERR_*. */
static int parse_hello(char *reply, struct hello *out)
{
    struct proto_reply rp;
    const char *sid, *ttl, *secret, *lease;

    if (proto_parse_reply(reply, &rp) < 0)
        return DLOCK_ERR_PROTO;
    if (strcmp(rp.status, "ERR") == 0)
        return dl_err_from_proto(rp.err);
    sid = proto_reply_get(&rp, "session");
    ttl = proto_reply_get(&rp, "ttl");
    secret = proto_reply_get(&rp, "secret");
    lease = proto_reply_get(&rp, "lease");
    if (strcmp(rp.status, "OK") != 0 || sid == NULL || ttl == NULL || proto_duration(ttl, 0, &out->ttl) < 0 ||
        out->ttl <= 0 || (secret && !dl_valid_value(secret)) ||
        (lease && (proto_duration(lease, 0, &out->lease) < 0 || out->lease <= 0)))
        return DLOCK_ERR_PROTO;
    if (lease == NULL)
        out->lease = 0;
    snprintf(out->sid, sizeof(out->sid), "%s", sid);
    snprintf(out->secret, sizeof(out->secret), "%s", secret ? secret : "");
    return 0;
}

/* Says HELLO on fd, resuming rs's session unless rs is NULL. 0 or a DLOCK_ERR_*. */
static int hello(struct dlock *h, int fd, const struct resume *rs, int64_t deadline, struct hello *out)
{
    char *line = NULL, *reply;
    size_t len = 0, cap = 0, rlen;
    int rc, bad = dl_appendf(&line, &len, &cap, "#hello HELLO");

    if (!bad && rs)
        bad = dl_appendf(&line, &len, &cap, " session=%s", rs->sid);
    if (!bad && rs && rs->secret[0])
        bad = dl_appendf(&line, &len, &cap, " secret=%s", rs->secret);
    if (!bad && h->opt.ttl_ms > 0)
        bad = dl_appendf(&line, &len, &cap, " ttl=%lld", h->opt.ttl_ms);
    if (!bad && h->opt.name[0])
        bad = dl_appendf(&line, &len, &cap, " name=%s", h->opt.name);
    if (!bad && h->opt.password[0])
        bad = dl_appendf(&line, &len, &cap, " auth=%s", h->opt.password);
    if (bad || dl_appendf(&line, &len, &cap, "\n") < 0) {
        if (line)
            explicit_bzero(line, cap);
        free(line);
        return DLOCK_ERR_NOMEM;
    }
    out->sent = dl_now();
    bad = send_all(fd, line, len, deadline);
    explicit_bzero(line, len); /* it may carry the password and the secret */
    free(line);
    if (bad || (reply = sync_reply(h, fd, "hello", deadline)) == NULL)
        return DLOCK_ERR_CONN;
    rlen = strlen(reply);
    rc = parse_hello(reply, out);
    explicit_bzero(reply, rlen);
    free(reply);
    return rc;
}

/* The connection is up: publish it and send what waits. */
static void install(struct dlock *h, int fd, int idx, const struct hello *hl, int resumed)
{
    struct dl_req *r, *next;

    h->fd = fd;
    h->gen++;
    h->up = 1;
    h->cur = idx;
    memcpy(h->session, hl->sid, sizeof(h->session));
    if (hl->secret[0] || !resumed)
        memcpy(h->secret, hl->secret, sizeof(h->secret));
    h->session_dead = 0;
    h->ttl = hl->ttl;
    h->trust = trust_of(hl->lease);
    h->safe_until = hl->sent + hl->ttl;
    if (!resumed || !(h->jeopardy & J_BACKEND))
        h->confirmed = hl->sent; /* it still had the session, and renewed the holds */
    /* A JEOPARDY heard from an earlier connection is not this dlockd's: one in jeopardy says so
     * right after the HELLO's OK, before any answer. After one, the answer to a heartbeat sent
     * now confirms the holds again. */
    h->next_hb = resumed && (h->jeopardy & J_BACKEND) ? dl_now() : dl_now() + period(h) / 3;
    set_jeopardy(h, J_CONN | J_HB | J_BACKEND, 0, NULL);
    for (r = h->reqs; r; r = next) {
        next = r->next;
        if (!r->done && r->gen == 0)
            req_on_reconnect(h, r, resumed);
    }
    if (h->first_rc == 1) {
        h->first_rc = 0;
        pthread_cond_broadcast(&h->cv);
    }
    if (h->closing)
        io_queue(h, "#bye QUIT\n", 10); /* shut down meanwhile: end the session now */
}

/* One connection attempt on address idx, with its HELLO. 0 once the connection is in use, else a DLOCK_ERR_*.
 * Called without h->mu. */
static int attempt(struct dlock *h, int idx, const struct resume *rs)
{
    int64_t limit = dl_now() + h->opt.connect_ms, deadline = rs->until < limit ? rs->until : limit;
    int fd, rc, resumed = !rs->fresh;
    struct hello hl;

    if ((fd = dial(&h->opt.addrs[idx], deadline)) < 0)
        return DLOCK_ERR_CONN;
    proto_lines_free(&h->lines);
    proto_lines_init(&h->lines, DL_REPLY_MAX);
    rc = hello(h, fd, resumed ? rs : NULL, deadline, &hl);
    if (rc == DLOCK_ERR_NOSESSION && resumed) {
        pthread_mutex_lock(&h->mu);
        session_dead(h, "expired");
        pthread_mutex_unlock(&h->mu);
        resumed = 0;
        rc = hello(h, fd, NULL, limit, &hl);
    }
    if (rc == 0) {
        pthread_mutex_lock(&h->mu);
        install(h, fd, idx, &hl, resumed);
        pthread_mutex_unlock(&h->mu);
    } else {
        close(fd);
    }
    explicit_bzero(&hl, sizeof(hl));
    return rc;
}

/* One round of connection attempts. 0 when connected, else a DLOCK_ERR_*. Called without h->mu. */
static int try_connect(struct dlock *h)
{
    struct resume rs;
    int rc = DLOCK_ERR_CONN, tries;

    pthread_mutex_lock(&h->mu);
    rs.fresh = h->session_dead || h->session[0] == '\0';
    rs.cur = h->cur;
    rs.until = rs.fresh ? DL_INF : session_end(h);
    memcpy(rs.sid, h->session, sizeof(rs.sid));
    memcpy(rs.secret, h->secret, sizeof(rs.secret));
    pthread_mutex_unlock(&h->mu);
    /* A live session can be resumed on any dlockd sharing the Redis: its own server first. */
    tries = h->opt.naddrs;
    for (int i = 0; i < tries && rc != 0; i++) {
        int r = attempt(h, (rs.cur + i) % h->opt.naddrs, &rs);

        if (r != DLOCK_ERR_CONN)
            rc = r; /* a server's answer says more than an address that does not answer */
    }
    explicit_bzero(&rs, sizeof(rs));
    return rc;
}

/* The connection broke (or is given up): requests on their way are marked, the session waits for a resume. */
static void drop(struct dlock *h)
{
    struct dl_req *r, *next;

    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    h->up = 0;
    h->outlen = 0;
    for (r = h->reqs; r; r = next) {
        next = r->next;
        if (r->gen != 0)
            req_on_drop(h, r);
    }
    if (!h->session_dead && !h->closing)
        set_jeopardy(h, J_CONN, 1, "connection");
}

/* ---------------------------------------------------------------- the loop */

/* Reads what is there and dispatches the lines. -1 when the connection is gone. */
static int read_some(struct dlock *h)
{
    char buf[16384];
    long n;

    for (;;) {
        ssize_t got = recv(h->fd, buf, sizeof(buf), MSG_DONTWAIT);

        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        if (got <= 0 || proto_lines_feed(&h->lines, buf, (size_t)got) < 0)
            return -1;
        while ((n = proto_lines_next(&h->lines, h->line, DL_REPLY_MAX)) >= 0) {
            dispatch(h, h->line);
            if (h->fd < 0)
                return -1;
        }
        if (n == -2)
            return -1;
    }
}

static int flush_out(struct dlock *h)
{
    size_t done = 0;

    while (done < h->outlen) {
        ssize_t n = send(h->fd, h->out + done, h->outlen - done, MSG_NOSIGNAL | MSG_DONTWAIT);

        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            break;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    memmove(h->out, h->out + done, h->outlen - done);
    h->outlen -= done;
    return 0;
}

/* Heartbeats, and the deadlines of the session and its holds. Returns the ms until the next timer is due. */
static int64_t timers(struct dlock *h)
{
    int64_t now = dl_now(), next = DL_INF;

    if (session_due(h, now)) {
        if (h->fd >= 0) {
            /* Our holds are reported lost: make sure they are released if the server still has them. */
            (void)!send(h->fd, "#bye QUIT\n", 10, MSG_NOSIGNAL | MSG_DONTWAIT);
            drop(h);
        }
        return 0;
    }
    if (h->session[0] && !h->session_dead) {
        /* Two thirds of the period without an answer: holds are in jeopardy. */
        int64_t late = h->safe_until - h->ttl + period(h) - period(h) / 3;

        if (now >= late)
            set_jeopardy(h, J_HB, 1, "heartbeat");
        else
            next = late;
        if (session_end(h) < next)
            next = session_end(h);
    }
    if (h->up) {
        if (now >= h->next_hb) {
            char line[64];
            int n = snprintf(line, sizeof(line), "#hb%llu PING\n", (unsigned long long)++h->hb_seq);

            h->hb_sent[h->hb_seq % DL_HB_RING] = now;
            io_queue(h, line, (size_t)n);
            h->next_hb = now + (period(h) / 3 > 0 ? period(h) / 3 : 1);
        }
        if (h->next_hb < next)
            next = h->next_hb;
    }
    return next == DL_INF ? 60000 : next - now;
}

/* Sleeps until woken or ms passed (caller holds h->mu; released meanwhile). */
static void nap(struct dlock *h, int64_t ms)
{
    struct pollfd p = {.fd = h->wake[0], .events = POLLIN};
    char buf[64];

    pthread_mutex_unlock(&h->mu);
    if (poll(&p, 1, ms < 0 ? -1 : (int)(ms > 60000 ? 60000 : ms)) > 0)
        while (read(h->wake[0], buf, sizeof(buf)) > 0)
            ;
    pthread_mutex_lock(&h->mu);
}

/* Disconnected: one round of attempts, then a pause. Returns -1 when the first connection failed. */
static int reconnect(struct dlock *h, int64_t *backoff)
{
    int rc;

    if (h->closing) {
        nap(h, -1);
        return 0;
    }
    if (session_due(h, dl_now()))
        return 0; /* the loss is told before the next attempt */
    pthread_mutex_unlock(&h->mu);
    rc = try_connect(h);
    pthread_mutex_lock(&h->mu);
    if (rc == 0) {
        *backoff = BACKOFF_MIN;
        return 0;
    }
    if (h->first_rc == 1) {
        h->first_rc = rc;
        pthread_cond_broadcast(&h->cv);
        return -1;
    }
    int64_t wait = timers(h);
    nap(h, wait < *backoff ? wait : *backoff);
    *backoff = *backoff * 2 > BACKOFF_MAX ? BACKOFF_MAX : *backoff * 2;
    return 0;
}

/* One round while connected: timers, poll, read, write. */
static void serve(struct dlock *h)
{
    struct pollfd p[2];
    int64_t wait = timers(h);
    char buf[64];

    if (h->fd < 0)
        return;
    p[0] = (struct pollfd){.fd = h->fd, .events = POLLIN | (h->outlen ? POLLOUT : 0)};
    p[1] = (struct pollfd){.fd = h->wake[0], .events = POLLIN};
    pthread_mutex_unlock(&h->mu);
    if (poll(p, 2, (int)(wait > 60000 ? 60000 : wait < 0 ? 0 : wait)) < 0)
        p[0].revents = p[1].revents = 0;
    if (p[1].revents)
        while (read(h->wake[0], buf, sizeof(buf)) > 0)
            ;
    pthread_mutex_lock(&h->mu);
    if (h->fd < 0)
        return;
    if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && read_some(h) < 0) {
        drop(h);
        return;
    }
    if (h->outlen && flush_out(h) < 0)
        drop(h);
}

static void *io_main(void *arg)
{
    struct dlock *h = arg;
    int64_t backoff = BACKOFF_MIN;

    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        if (h->fd >= 0)
            serve(h);
        else if (reconnect(h, &backoff) < 0)
            break;
        deliver(h); /* before the next wait: the events of a reconnect are not held up by a poll */
    }
    if (h->fd >= 0) {
        flush_out(h); /* a QUIT queued at the last moment */
        close(h->fd);
    }
    h->fd = -1;
    h->up = 0;
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int io_start(struct dlock *h)
{
    sigset_t all, old;
    int rc;

    if (pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) < 0)
        return DLOCK_ERR_SYSTEM;
    if ((h->line = malloc(DL_REPLY_MAX)) == NULL)
        return DLOCK_ERR_NOMEM;
    proto_lines_init(&h->lines, DL_REPLY_MAX);
    /* Signals are the application's business: the thread takes none. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&h->io, NULL, io_main, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return DLOCK_ERR_SYSTEM;
    h->io_started = 1;
    return 0;
}
