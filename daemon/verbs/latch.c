/* latch.c - count-down latches. The count lives in Redis; an AWAIT registers
 * here before it reads the count, and the script that counts down to 0
 * announces it to every daemon, so no awaiter polls or misses the moment;
 * after a reconnect, which may have lost such an announcement, every latch
 * known here is read again. The latches created through this daemon are
 * remembered until they end, for max-latches, max-latches-per-peer,
 * max-latches-total and LIST. */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "conn.h"
#include "dict.h"
#include "dlockd.h"
#include "hold.h"
#include "latch.h"
#include "log.h"
#include "redis.h"
#include "session.h"
#include "wait.h"

#define LATCH_TTL_DEFAULT (24LL * 3600 * 1000)
#define PEER_KEY_MAX 64 /* bytes of a peer's key: an IPv6 /64, or unix:uid=N */

struct awaiter {
    struct dlockd *d;
    struct req *req;           /* NULL once answered */
    struct latch *latch;       /* NULL once out of its list */
    int reading;               /* the read script is in flight */
    int counted;               /* it counts as a wait of its session and of this daemon */
    char sid[DLOCKD_ID_LEN + 1]; /* its session */
    struct deadline timeout;
    TAILQ_ENTRY(awaiter) link;
};

/* The latches created here from one client address that have not ended,
 * whichever session created them and whether it still lives. */
struct latch_peer {
    int64_t nlatches;
    char key[PEER_KEY_MAX];    /* peer_key's */
};

/* What this daemon knows of one latch: the AWAITs for it here, and the
 * session here that created it. It lives while it has either. */
struct latch {
    struct dlockd *d;
    TAILQ_HEAD(, awaiter) head;
    struct deadline lapse;     /* awaiters: when the latch's ttl runs out, read it again */
    struct deadline ends;      /* created here: when its ttl runs out */
    char creator[DLOCKD_ID_LEN + 1]; /* that session's id; "" when not created here */
    char *client;              /* that session's name then; NULL when not created here */
    struct latch_peer *peer;   /* the address it was created from; NULL when not created here */
    char name[PROTO_NAME_MAX + 1];
};

static void watch_lapse(struct latch *l, long long ttl);
static void on_lapse(struct deadline *dl);
static void on_ends(struct deadline *dl);

static struct latch *latch_get(struct dlockd *d, const char *name)
{
    struct latch *l = dict_get(d->latches, name);

    if (l != NULL)
        return l;
    l = must(calloc(1, sizeof(*l)));
    l->d = d;
    TAILQ_INIT(&l->head);
    deadline_init(&l->lapse, on_lapse);
    deadline_init(&l->ends, on_ends);
    snprintf(l->name, sizeof(l->name), "%s", name);
    dict_set(d->latches, name, l);
    return l;
}

/* Frees l once it has neither awaiters nor a creator. */
static void latch_put(struct latch *l)
{
    if (!TAILQ_EMPTY(&l->head) || l->creator[0])
        return;
    deadline_cancel(l->d->deadlines, &l->lapse);
    dict_del(l->d->latches, l->name);
    free(l);
}

/*
 * Who latches are counted against besides their session, which a client may
 * replace at will: the peer's address without its port, an IPv6 address as
 * its /64 (one host commonly has a whole /64), an IPv4-mapped one as IPv4,
 * and a unix-socket peer as its user id.
 */
static void peer_key(const struct conn *c, char *out, size_t len)
{
    const char *p = c ? c->peer : "-", *end = strrchr(p, ':');
    char host[INET6_ADDRSTRLEN + 2];
    struct in6_addr a6;

    if (c && strcmp(p, "unix") == 0) {
#ifdef SO_PEERCRED
        struct ucred uc;
        socklen_t n = sizeof(uc);
        if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &uc, &n) == 0) {
            snprintf(out, len, "unix:uid=%u", (unsigned)uc.uid);
            return;
        }
#endif
        snprintf(out, len, "unix");
        return;
    }
    if (p[0] != '[' || end == NULL || end[-1] != ']') {
        snprintf(out, len, "%.*s", end ? (int)(end - p) : (int)strlen(p), p);
        return;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(end - p - 2), p + 1);
    if (inet_pton(AF_INET6, host, &a6) != 1) {
        snprintf(out, len, "%s", host);
    } else if (IN6_IS_ADDR_V4MAPPED(&a6)) {
        inet_ntop(AF_INET, &a6.s6_addr[12], host, sizeof(host));
        snprintf(out, len, "%s", host);
    } else {
        memset(&a6.s6_addr[8], 0, 8);
        inet_ntop(AF_INET6, &a6, host, sizeof(host));
        snprintf(out, len, "%s/64", host);
    }
}

/* The record of key's latches; a fresh one counts none. */
static struct latch_peer *peer_get(struct dlockd *d, const char *key)
{
    struct latch_peer *p = dict_get(d->latch_peers, key);

    if (p != NULL)
        return p;
    p = must(calloc(1, sizeof(*p)));
    snprintf(p->key, sizeof(p->key), "%s", key);
    dict_set(d->latch_peers, key, p);
    return p;
}

/* The latches created from key that have not ended. */
static int64_t peer_count(const struct dlockd *d, const char *key)
{
    const struct latch_peer *p = dict_get(d->latch_peers, key);

    return p ? p->nlatches : 0;
}

/* Counts delta latches created by session sid (if it still lives), from peer p and by this
 * daemon; p is freed when it counts none. A session resumed here again after it moved away
 * does not know of the latches it created before, and never counts below 0. */
static void count_created(struct dlockd *d, const char *sid, struct latch_peer *p, int delta)
{
    struct session *s = session_find(d, sid);

    if (s && (delta > 0 || s->nlatches > 0))
        s->nlatches += delta;
    d->nlatches += (uint64_t)(int64_t)delta;
    if ((p->nlatches += delta) <= 0) {
        dict_del(d->latch_peers, p->key);
        free(p);
    }
}

/* The latch created here has ended (0, or its ttl ran out): it counts no more. */
static void forget_creator(struct latch *l)
{
    if (l->creator[0] == '\0')
        return;
    count_created(l->d, l->creator, l->peer, -1);
    l->creator[0] = '\0';
    l->peer = NULL;
    free(l->client);
    l->client = NULL;
    deadline_cancel(l->d->deadlines, &l->ends);
}

static void on_ends(struct deadline *dl)
{
    struct latch *l = container_of(dl, struct latch, ends);

    forget_creator(l);
    latch_put(l);
}

/* Session sid created the latch name from peer p, and it lives ttl ms: the
 * count it reserved stays with the latch. A record left from an earlier
 * latch of that name (whose end was not heard) gives way. */
static void remember(struct dlockd *d, const char *name, const char *sid, struct latch_peer *p, long long ttl)
{
    struct latch *l = latch_get(d, name);
    struct session *s = session_find(d, sid);

    forget_creator(l);
    snprintf(l->creator, sizeof(l->creator), "%s", sid);
    l->client = must(strdup(s && s->name ? s->name : ""));
    l->peer = p;
    deadline_arm(d->deadlines, &l->ends, now_ms() + (uint64_t)(ttl > 0 ? ttl : 0));
}

/* The count a LATCH reply reads; 0 (the latch ended) unless OK. */
static long long count_of(const struct contract_reply *rep)
{
    return rep->status == CONTRACT_OK ? rep->latch.count : 0;
}

/* The ms the latch of a LATCH reply lives on; -1 without one. */
static long long ttl_of(const struct contract_reply *rep)
{
    return rep->status == CONTRACT_OK ? rep->latch.ttl : -1;
}

static void on_count(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct req *r = arg;
    struct latch *l;

    if (rep == NULL) {
        req_err(r, PROTO_EBACKEND, "%s", dlockd_silence(d));
        return;
    }
    if (rep->status == CONTRACT_WRONGTYPE) {
        req_err(r, PROTO_EWRONGTYPE, "'%s' is in use as another type", r->pr.names[0]);
        return;
    }
    if (count_of(rep) == 0 && (l = dict_get(d->latches, r->pr.names[0])) != NULL) {
        forget_creator(l);
        latch_put(l);
    }
    req_reply(r, "OK", "count=%lld", count_of(rep));
}

/* LATCH's answer: a latch it made keeps the count reserved for it, else the count is given back. */
static void on_create(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct req *r = arg;

    if (rep && rep->status == CONTRACT_OK && rep->latch.created)
        remember(d, r->pr.names[0], r->sid, r->ctx, rep->latch.ttl);
    else
        count_created(d, r->sid, r->ctx, -1);
    on_count(d, rep, arg);
}

static void latch_op(struct req *r, const char *op, long long n, long long ttl, contract_cb *cb, void *arg)
{
    struct contract_args args;

    contract_latch_args(&args, op, n, ttl);
    if (hold_script(r->d, OP_LATCH, 1, r->pr.names, &args, cb, NULL, arg) == 0)
        return;
    if (cb == on_create)
        count_created(r->d, r->sid, r->ctx, -1);
    req_err(r, PROTO_EBACKEND, "%s", redis_unavailable(r->d->redis));
}

/* ERR LIMIT when a LATCH from s at peer would pass max-latches, max-latches-per-peer or
 * max-latches-total; returns 1 then, else 0. */
static int over_limits(struct req *r, const struct session *s, const char *peer)
{
    const struct config *cfg = &r->d->cfg;
    long long n = (long long)peer_count(r->d, peer);

    if (s->nlatches >= cfg->max_latches) {
        req_err(r, PROTO_ELIMIT, "session created %d latches that have not ended, max-latches is %lld",
                s->nlatches, (long long)cfg->max_latches);
    } else if (n >= cfg->max_latches_per_peer) {
        req_err(r, PROTO_ELIMIT, "%lld latches created from %s have not ended, max-latches-per-peer is %lld", n,
                peer, (long long)cfg->max_latches_per_peer);
    } else if ((int64_t)r->d->nlatches >= cfg->max_latches_total) {
        req_err(r, PROTO_ELIMIT, "%llu latches created here have not ended, max-latches-total is %lld",
                (unsigned long long)r->d->nlatches, (long long)cfg->max_latches_total);
    } else {
        return 0;
    }
    return 1;
}

/* A LATCH counts against max-latches, max-latches-per-peer and max-latches-total from when it
 * is sent; its peer's record rides in r->ctx until the answer. */
void latch_create(struct req *r)
{
    struct dlockd *d = r->d;
    long long ttl = (r->pr.has & PROTO_O_TTL) ? (long long)r->pr.ttl_ms : LATCH_TTL_DEFAULT;
    char peer[PEER_KEY_MAX];

    peer_key(r->c, peer, sizeof(peer));
    if (over_limits(r, req_session(r), peer))
        return;
    r->ctx = peer_get(d, peer);
    count_created(d, r->sid, r->ctx, 1);
    latch_op(r, "create", (long long)r->pr.count, ttl < d->cfg.latch_ttl_max ? ttl : d->cfg.latch_ttl_max, on_create,
             r);
}

void latch_countdown(struct req *r)
{
    latch_op(r, "countdown", (long long)r->pr.n, 0, on_count, r);
}

/* --- AWAIT */

static void leave_list(struct awaiter *a)
{
    struct latch *l = a->latch;

    if (l == NULL)
        return;
    TAILQ_REMOVE(&l->head, a, link);
    a->latch = NULL;
    if (TAILQ_EMPTY(&l->head))
        deadline_cancel(a->d->deadlines, &l->lapse);
    latch_put(l);
}

/* Counts delta waits of a's session (if it still lives) and of this daemon. */
static void count_wait(struct awaiter *a, int delta)
{
    struct session *s = session_find(a->d, a->sid);

    if (s)
        s->nwaits += delta;
    a->d->nwaiting += (uint64_t)(int64_t)delta;
    a->counted = delta > 0;
}

/* Answers the awaiter (if anyone still waits) and frees it once no script holds it. */
static void finish(struct awaiter *a, const char *status)
{
    struct req *r = a->req;

    a->req = NULL;
    leave_list(a);
    deadline_cancel(a->d->deadlines, &a->timeout);
    if (a->counted)
        count_wait(a, -1);
    if (r) {
        r->gone = NULL;
        if (status)
            req_reply(r, status, NULL);
        else
            req_drop(r);
    }
    if (!a->reading)
        free(a);
}

static void on_timeout(struct deadline *dl)
{
    finish(container_of(dl, struct awaiter, timeout), "TIMEOUT");
}

static void on_gone(struct req *r)
{
    struct awaiter *a = r->ctx;

    /* After EOF an AWAIT still reading is answered if it need not wait, as a LOCK
     * granted at once is; on_read drops it if it would have to wait. */
    if (r->c && r->c->eof && r->c->state != CONN_CLOSING && a->reading)
        return;
    finish(a, NULL);
}

static void on_read(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct awaiter *a = arg;

    a->reading = 0;
    if (a->req == NULL) {
        free(a);
        return;
    }
    if (rep == NULL) {
        struct req *r = a->req;
        a->req = NULL;
        r->gone = NULL;
        req_err(r, PROTO_EBACKEND, "%s", dlockd_silence(d));
        finish(a, NULL);
        return;
    }
    (void)d;
    if (rep->status == CONTRACT_WRONGTYPE) {
        struct req *r = a->req;
        a->req = NULL;
        r->gone = NULL;
        req_err(r, PROTO_EWRONGTYPE, "'%s' is in use as another type", r->pr.names[0]);
        finish(a, NULL);
    } else if (count_of(rep) == 0) {
        finish(a, "OK");
    } else if (a->req->pr.wait_ms == 0) {
        finish(a, "TIMEOUT");
    } else if (conn_gone(a->req->c)) {
        finish(a, NULL);
    } else {
        watch_lapse(a->latch, ttl_of(rep));
    }
}

static void latch_release(struct dlockd *d, const char *name);

static void on_reread(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    char *name = arg;
    struct latch *l;

    if (rep) {
        if ((l = dict_get(d->latches, name)) != NULL && count_of(rep) == 0)
            latch_release(d, name);
        else if (l && !TAILQ_EMPTY(&l->head))
            watch_lapse(l, ttl_of(rep));
    }
    free(name);
}

static void on_lapse(struct deadline *dl)
{
    struct latch *l = container_of(dl, struct latch, lapse);
    const char *names[] = { l->name };
    char *name = must(strdup(l->name));
    struct contract_args args;

    contract_latch_args(&args, "read", 0, 0);
    if (hold_script(l->d, OP_LATCH, 1, names, &args, on_reread, NULL, name))
        free(name);
}

static void watch_lapse(struct latch *l, long long ttl)
{
    if (l && ttl >= 0)
        deadline_arm(l->d->deadlines, &l->lapse, now_ms() + (uint64_t)ttl + 1);
}

void latch_await(struct req *r)
{
    struct dlockd *d = r->d;
    struct contract_args args;
    struct awaiter *a;

    if (wait_within_limits(r, req_session(r)))
        return;
    a = must(calloc(1, sizeof(*a)));
    a->d = d;
    a->req = r;
    a->latch = latch_get(d, r->pr.names[0]);
    a->reading = 1;
    memcpy(a->sid, r->sid, sizeof(a->sid));
    if (r->pr.wait_ms != 0)
        count_wait(a, 1);
    TAILQ_INSERT_TAIL(&a->latch->head, a, link);
    deadline_init(&a->timeout, on_timeout);
    if (r->pr.wait_ms > 0)
        deadline_arm(d->deadlines, &a->timeout, r->arrived + (uint64_t)r->pr.wait_ms);
    r->gone = on_gone;
    r->ctx = a;
    /* Registered first: a count that reaches 0 after the read is announced to us. */
    contract_latch_args(&args, "read", 0, 0);
    if (hold_script(d, OP_LATCH, 1, r->pr.names, &args, on_read, NULL, a)) {
        a->reading = 0;
        r->gone = NULL;
        a->req = NULL;
        req_err(r, PROTO_EBACKEND, "%s", redis_unavailable(r->d->redis));
        finish(a, NULL);
    }
}

/* Releases every awaiter of a latch that Redis says reached 0 or is gone. */
static void latch_release(struct dlockd *d, const char *name)
{
    struct latch *l = dict_get(d->latches, name);
    struct awaiter *a;

    if (l == NULL)
        return;
    forget_creator(l);
    /* The latch is freed with its last awaiter. */
    while ((a = TAILQ_FIRST(&l->head)) != NULL) {
        int last = TAILQ_NEXT(a, link) == NULL;
        finish(a, "OK");
        if (last)
            return;
    }
    latch_put(l);
}

void latch_on_message(struct dlockd *d, const char *name)
{
    struct latch *l = dict_get(d->latches, name);

    /* Anyone who can PUBLISH can send this: the count is read before anyone is
     * released. A burst of messages moves the one deadline, it does not add reads. */
    if (l != NULL)
        deadline_arm(d->deadlines, &l->lapse, now_ms());
}

/* The link is back: reads l at once (latch_on_message's deadline), for what it may have missed. */
static int reread_one(const char *key, void *val, void *arg)
{
    struct latch *l = val;

    (void)key;
    (void)arg;
    deadline_arm(l->d->deadlines, &l->lapse, now_ms());
    return 0;
}

void latch_recheck(struct dlockd *d)
{
    dict_each(d->latches, reread_one, NULL);
}

/* --- LIST */

/* One latch of a LIST: what is known here, then its entry once Redis answered. */
struct shown {
    struct listing *ls;
    char *name, *client;
    char sid[DLOCKD_ID_LEN + 1];
    char peer[PEER_KEY_MAX];
    json_t *entry;             /* NULL until read, and when it has ended */
};

/* The latches of a LIST being read. */
struct listing {
    struct dlockd *d;
    const char *pattern;       /* NULL for all; only while the walk runs */
    latch_listed *done;
    void *arg;
    struct shown *v;
    long long n, cap, limit;
    long long pending;         /* reads not answered, plus one while they are sent */
    const char *err;           /* why a read had no answer; NULL while all had */
};

static int add_shown(const char *key, void *val, void *arg)
{
    struct listing *ls = arg;
    struct latch *l = val;
    struct shown *sh;

    if (l->creator[0] == '\0' || (ls->pattern && fnmatch(ls->pattern, key, 0) != 0))
        return 0;
    if (ls->n == ls->cap) {
        ls->cap = ls->cap ? ls->cap * 2 : 16;
        ls->v = must(realloc(ls->v, (size_t)ls->cap * sizeof(*ls->v)));
    }
    sh = &ls->v[ls->n++];
    *sh = (struct shown){ .ls = ls, .name = must(strdup(l->name)), .client = must(strdup(l->client)) };
    memcpy(sh->sid, l->creator, sizeof(sh->sid));
    memcpy(sh->peer, l->peer->key, sizeof(sh->peer));
    return 0;
}

static int by_shown_name(const void *a, const void *b)
{
    return strcmp(((const struct shown *)a)->name, ((const struct shown *)b)->name);
}

static void listing_end(struct listing *ls)
{
    json_t *list = json_array();
    int more = ls->n > ls->limit;

    for (long long i = 0; i < ls->n; i++) {
        if (ls->v[i].entry && i < ls->limit)
            json_array_append(list, ls->v[i].entry);
        json_decref(ls->v[i].entry);
        free(ls->v[i].name);
        free(ls->v[i].client);
    }
    if (ls->err) {
        json_decref(list);
        ls->done(ls->d, NULL, 0, ls->err, ls->arg);
    } else {
        ls->done(ls->d, list, more, NULL, ls->arg);
    }
    free(ls->v);
    free(ls);
}

static void on_shown(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct shown *sh = arg;
    struct listing *ls = sh->ls;

    if (rep == NULL)
        ls->err = NO_ANSWER;
    else if (count_of(rep) == 0)
        latch_release(d, sh->name); /* it ended unheard: it counts no more */
    else
        sh->entry = json_pack("{s:s, s:I, s:I, s:s, s:s, s:s}", "name", sh->name, "count",
                              (json_int_t)count_of(rep), "ttl_ms", (json_int_t)ttl_of(rep), "session", sh->sid,
                              "client", sh->client, "peer", sh->peer);
    if (--ls->pending == 0)
        listing_end(ls);
}

void latch_list(struct dlockd *d, const char *pattern, long long limit, latch_listed *done, void *arg)
{
    struct listing *ls = must(calloc(1, sizeof(*ls)));
    struct contract_args args;

    *ls = (struct listing){ .d = d, .pattern = pattern, .done = done, .arg = arg, .limit = limit };
    dict_each(d->latches, add_shown, ls);
    ls->pattern = NULL;
    if (ls->n > 0)
        qsort(ls->v, (size_t)ls->n, sizeof(*ls->v), by_shown_name);
    contract_latch_args(&args, "read", 0, 0);
    ls->pending = 1;
    for (long long i = 0; i < ls->n && i < limit; i++) {
        const char *names[] = { ls->v[i].name };
        ls->pending++;
        if (hold_script(d, OP_LATCH, 1, names, &args, on_shown, NULL, &ls->v[i])) {
            ls->err = redis_unavailable(d->redis);
            ls->pending--;
        }
    }
    if (--ls->pending == 0)
        listing_end(ls);
}

static int free_one(const char *key, void *val, void *arg)
{
    struct latch *l = val;

    (void)key;
    (void)arg;
    forget_creator(l);
    deadline_cancel(l->d->deadlines, &l->lapse);
    dict_del(l->d->latches, l->name);
    free(l);
    return 0;
}

static int free_peer(const char *key, void *val, void *arg)
{
    struct dlockd *d = arg;

    dict_del(d->latch_peers, key);
    free(val);
    return 0;
}

void latch_free_all(struct dlockd *d)
{
    dict_each(d->latches, free_one, NULL);
    dict_each(d->latch_peers, free_peer, d);
}
