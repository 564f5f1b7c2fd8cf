/* cluster.c - routes commands over a Redis Cluster with hiredis async, which
 * knows no cluster: the slot of a key, a slot table read from CLUSTER SLOTS
 * and refreshed one node at a time, a connection per master opened on
 * demand, and the MOVED and ASK redirects followed a bounded number of times. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "cluster.h"
#include "dlockd.h"
#include "evlink.h"
#include "log.h"

/* An open connection to a master. */
struct link {
    struct cluster *c;
    struct cluster_node node;
    redisAsyncContext *ac;  /* its data is the link while the link is in the pool, NULL after */
    LIST_ENTRY(link) in_pool;
};

/* A command on its way, through its redirects. */
struct call {
    struct cluster *c;
    sds cmd;                 /* as sent, and sent again after a redirect */
    cluster_cb *cb, *late;
    void *arg;
    struct cluster_node at;  /* where it was sent last */
    int redirects;           /* followed so far */
    int answered;            /* cb was called */
    struct deadline timeout;
    TAILQ_ENTRY(call) in_orphans;
};

struct cluster {
    struct dlockd *d;
    const struct cluster_owner *owner;
    struct cluster_node *seeds;
    int nseeds;
    struct cluster_table *table;      /* NULL before the first refresh */
    LIST_HEAD(, link) pool;           /* one link per master used */
    TAILQ_HEAD(, call) orphans;       /* calls that could not be sent, answered NULL on the next turn */
    struct event *later;              /* the next turn: orphans, the next try of a refresh */
    int refreshing;                   /* a refresh runs */
    int try_due;                      /* the refresh moves on to its next node on the next turn */
    redisAsyncContext *probe;         /* the try of the refresh; its data is c, NULL once let go */
    struct cluster_node *tries;       /* the nodes the refresh asks, in order */
    int ntries, next_try;
    struct deadline probe_late;       /* the try must be answered by then */
    int closing;                      /* cluster_free runs: no more refreshes */
    char error[CLUSTER_HOST_MAX + 256]; /* why the last try failed */
    struct cluster_stats stats;
};

/* --- the slot of a key */

/* CRC16-CCITT as XMODEM computes it (polynomial 0x1021, initial value 0), as Redis Cluster does. */
static unsigned crc16(const char *buf, size_t len)
{
    unsigned crc = 0;

    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)buf[i] << 8;
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1;
    }
    return crc & 0xffff;
}

int cluster_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len), *close = NULL;

    /* The tag runs from the first '{' to the first '}' after it, and counts only when not empty. */
    if (open)
        close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
    if (close && close > open + 1)
        return (int)(crc16(open + 1, (size_t)(close - open - 1)) % CLUSTER_SLOTS);
    return (int)(crc16(key, len) % CLUSTER_SLOTS);
}

/* --- the slot table */

static int node_eq(const struct cluster_node *a, const struct cluster_node *b)
{
    return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* Reads [host, port, id, ...] into *n. Returns 0, 1 when the node's endpoint is unknown ("?"), or -1 when malformed. */
static int parse_node(const redisReply *e, const char *from_host, struct cluster_node *n)
{
    const redisReply *host, *port;

    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2)
        return -1;
    host = e->element[0];
    port = e->element[1];
    if (host->type != REDIS_REPLY_STRING || host->len >= CLUSTER_HOST_MAX || strlen(host->str) != host->len ||
        port->type != REDIS_REPLY_INTEGER || port->integer < 1 || port->integer > 65535)
        return -1;
    if (strcmp(host->str, "?") == 0)
        return 1;
    snprintf(n->host, sizeof(n->host), "%s", host->len ? host->str : from_host);
    n->port = (int)port->integer;
    return 0;
}

/* Adds the shard of the range e names as its master, with its replicas. Returns its index, or -1. */
static int shard_add(struct cluster_table *t, const redisReply *e, const struct cluster_node *master,
                     const char *from_host, char *err, size_t len)
{
    struct cluster_shard *s = &t->shards[t->nshards];

    s->master = *master;
    s->replicas = must(calloc(e->elements - 3 ? e->elements - 3 : 1, sizeof(*s->replicas)));
    t->nshards++;
    for (size_t i = 3; i < e->elements; i++) {
        int got = parse_node(e->element[i], from_host, &s->replicas[s->nreplicas]);

        if (got < 0) {
            snprintf(err, len, "CLUSTER SLOTS: replica %zu of slots %lld-%lld is malformed", i - 2,
                     e->element[0]->integer, e->element[1]->integer);
            return -1;
        }
        s->nreplicas += got == 0; /* a replica without a known endpoint cannot be asked anyway */
    }
    return t->nshards - 1;
}

/* The index of the shard whose master is n, or -1. */
static int shard_find(const struct cluster_table *t, const struct cluster_node *n)
{
    for (int i = 0; i < t->nshards; i++)
        if (node_eq(&t->shards[i].master, n))
            return i;
    return -1;
}

/* Reads one range [start, end, master, replicas...] into t. Returns 0, or -1 with err set. */
static int parse_range(struct cluster_table *t, const redisReply *e, const char *from_host, char *err, size_t len)
{
    struct cluster_node master;
    long long start, end;
    int shard;

    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER) {
        snprintf(err, len, "CLUSTER SLOTS: a range is malformed");
        return -1;
    }
    start = e->element[0]->integer;
    end = e->element[1]->integer;
    if (start < 0 || start > end || end >= CLUSTER_SLOTS) {
        snprintf(err, len, "CLUSTER SLOTS: range %lld-%lld is out of bounds", start, end);
        return -1;
    }
    if (parse_node(e->element[2], from_host, &master) != 0) {
        snprintf(err, len, "CLUSTER SLOTS: the master of slots %lld-%lld is malformed or unknown", start, end);
        return -1;
    }
    if ((shard = shard_find(t, &master)) < 0 && (shard = shard_add(t, e, &master, from_host, err, len)) < 0)
        return -1;
    for (long long s = start; s <= end; s++) {
        if (t->shard_of[s] >= 0) {
            snprintf(err, len, "CLUSTER SLOTS: slot %lld is listed twice", s);
            return -1;
        }
        t->shard_of[s] = (int16_t)shard;
    }
    return 0;
}

int cluster_table_parse(const redisReply *r, const char *from_host, struct cluster_table *t, char *err,
                        size_t len)
{
    memset(t, 0, sizeof(*t));
    memset(t->shard_of, 0xff, sizeof(t->shard_of)); /* -1: no node */
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        snprintf(err, len, "CLUSTER SLOTS: %s",
                 r == NULL                            ? "no reply"
                 : r->type == REDIS_REPLY_ERROR       ? r->str
                 : r->type == REDIS_REPLY_ARRAY       ? "no slot is served"
                                                      : "not an array");
        return -1;
    }
    /* Every range holds a slot of its own, so there are at most CLUSTER_SLOTS of them before one overlaps. */
    t->shards = must(calloc(r->elements < CLUSTER_SLOTS ? r->elements : CLUSTER_SLOTS, sizeof(*t->shards)));
    for (size_t i = 0; i < r->elements; i++) {
        if (i == CLUSTER_SLOTS) {
            snprintf(err, len, "CLUSTER SLOTS: more ranges than slots");
            cluster_table_clear(t);
            return -1;
        }
        if (parse_range(t, r->element[i], from_host, err, len) < 0) {
            cluster_table_clear(t);
            return -1;
        }
    }
    return 0;
}

void cluster_table_clear(struct cluster_table *t)
{
    for (int i = 0; i < t->nshards; i++)
        free(t->shards[i].replicas);
    free(t->shards);
    t->shards = NULL;
    t->nshards = 0;
    memset(t->shard_of, 0xff, sizeof(t->shard_of));
}

const struct cluster_shard *cluster_table_shard(const struct cluster_table *t, int slot)
{
    if (t == NULL || slot < 0 || slot >= CLUSTER_SLOTS || t->shard_of[slot] < 0)
        return NULL;
    return &t->shards[t->shard_of[slot]];
}

/* --- redirects */

enum cluster_redirect cluster_redirect_parse(const char *err, int *slot, struct cluster_node *to)
{
    enum cluster_redirect kind;
    const char *p, *colon;
    size_t hostlen, portlen;
    long v;

    if (err == NULL)
        return CLUSTER_NO_REDIRECT;
    if (strncmp(err, "MOVED ", 6) == 0) {
        kind = CLUSTER_MOVED;
        p = err + 6;
    } else if (strncmp(err, "ASK ", 4) == 0) {
        kind = CLUSTER_ASK;
        p = err + 4;
    } else {
        return CLUSTER_NO_REDIRECT;
    }
    for (v = 0; isdigit((unsigned char)*p) && v < CLUSTER_SLOTS; p++)
        v = v * 10 + (*p - '0');
    if (v >= CLUSTER_SLOTS || p[-1] == ' ' || *p++ != ' ')
        return CLUSTER_NO_REDIRECT;
    if ((colon = strrchr(p, ':')) == NULL || strchr(p, ' ') != NULL)
        return CLUSTER_NO_REDIRECT;
    hostlen = (size_t)(colon - p);
    portlen = strlen(colon + 1);
    if (hostlen >= CLUSTER_HOST_MAX || portlen == 0 || portlen > 5 || strspn(colon + 1, "0123456789") != portlen ||
        atoi(colon + 1) < 1 || atoi(colon + 1) > 65535)
        return CLUSTER_NO_REDIRECT;
    *slot = (int)v;
    memcpy(to->host, p, hostlen);
    to->host[hostlen] = '\0';
    to->port = atoi(colon + 1);
    return kind;
}

/* --- the pool: one link per master */

static void send_auth(const struct cluster *c, redisAsyncContext *ac, redisCallbackFn *fn)
{
    const struct config *cfg = &c->d->cfg;

    if (cfg->redis_user)
        redisAsyncCommand(ac, fn, NULL, "AUTH %s %s", cfg->redis_user,
                          cfg->redis_password ? cfg->redis_password : "");
    else if (cfg->redis_password)
        redisAsyncCommand(ac, fn, NULL, "AUTH %s", cfg->redis_password);
}

/* Takes l out of the pool and frees it; returns its context, which no callback links to l any more. */
static redisAsyncContext *link_forget(struct link *l)
{
    redisAsyncContext *ac = l->ac;

    LIST_REMOVE(l, in_pool);
    l->c->stats.conns--;
    ac->data = NULL;
    free(l);
    return ac;
}

/* A link that failed: the node may be gone, so the table may be stale. */
static void link_lost(struct link *l, const char *why)
{
    struct cluster *c = l->c;

    log_debug("cluster: connection to %s:%d lost: %s", l->node.host, l->node.port, why);
    link_forget(l);
    cluster_refresh(c);
}

static void on_link_connect(const redisAsyncContext *ac, int status)
{
    /* hiredis frees a context that failed to connect after this returns. */
    if (status != REDIS_OK && ac->data)
        link_lost(ac->data, ac->errstr);
}

static void on_link_disconnect(const redisAsyncContext *ac, int status)
{
    if (ac->data)
        link_lost(ac->data, status == REDIS_OK ? "closed" : ac->errstr);
}

static void on_link_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct link *l = ac->data;
    redisReply *r = reply;

    (void)privdata;
    if (l == NULL || r == NULL || r->type != REDIS_REPLY_ERROR)
        return;
    log_warnx("cluster: AUTH at %s:%d: %s", l->node.host, l->node.port, r->str);
    redisAsyncDisconnect(link_forget(l));
}

/* The link to n, opened now when there is none. NULL when it cannot be opened. */
static struct link *link_get(struct cluster *c, const struct cluster_node *n)
{
    redisAsyncContext *ac;
    struct link *l;

    LIST_FOREACH(l, &c->pool, in_pool)
        if (node_eq(&l->node, n))
            return l;
    ac = must(redisAsyncConnect(n->host, n->port));
    if (ac->err) {
        log_debug("cluster: cannot connect to %s:%d: %s", n->host, n->port, ac->errstr);
        redisAsyncFree(ac);
        return NULL;
    }
    l = must(calloc(1, sizeof(*l)));
    l->c = c;
    l->node = *n;
    l->ac = ac;
    ac->data = l;
    evlink_attach(ac, c->d->base);
    redisAsyncSetConnectCallback(ac, on_link_connect);
    redisAsyncSetDisconnectCallback(ac, on_link_disconnect);
    send_auth(c, ac, on_link_auth);
    LIST_INSERT_HEAD(&c->pool, l, in_pool);
    c->stats.conns++;
    return l;
}

/* Closes the links to nodes that are not masters in t, once their replies are in. */
static void pool_prune(struct cluster *c, const struct cluster_table *t)
{
    struct link *l, *next;

    for (l = LIST_FIRST(&c->pool); l != NULL; l = next) {
        next = LIST_NEXT(l, in_pool);
        if (shard_find(t, &l->node) < 0)
            redisAsyncDisconnect(link_forget(l));
    }
}

/* --- the refresh: one node at a time, until one answers CLUSTER SLOTS */

static void kick(struct cluster *c)
{
    event_active(c->later, EV_TIMEOUT, 0);
}

static void tries_add(struct cluster *c, const struct cluster_node *n)
{
    for (int i = 0; i < c->ntries; i++)
        if (node_eq(&c->tries[i], n))
            return;
    c->tries[c->ntries++] = *n;
}

/* The nodes to ask, in order: the masters and replicas of the table, then the seeds. */
static void tries_collect(struct cluster *c)
{
    const struct cluster_table *t = c->table;
    int n = c->nseeds;

    for (int i = 0; t && i < t->nshards; i++)
        n += 1 + t->shards[i].nreplicas;
    free(c->tries);
    c->tries = must(calloc((size_t)n, sizeof(*c->tries)));
    c->ntries = c->next_try = 0;
    for (int i = 0; t && i < t->nshards; i++)
        tries_add(c, &t->shards[i].master);
    for (int i = 0; t && i < t->nshards; i++)
        for (int j = 0; j < t->shards[i].nreplicas; j++)
            tries_add(c, &t->shards[i].replicas[j]);
    for (int i = 0; i < c->nseeds; i++)
        tries_add(c, &c->seeds[i]);
}

/* Lets go of the try's connection; its callbacks still due find no cluster. */
static void probe_drop(struct cluster *c, int free_it)
{
    redisAsyncContext *ac = c->probe;

    if (ac == NULL)
        return;
    c->probe = NULL;
    ac->data = NULL;
    deadline_cancel(c->d->deadlines, &c->probe_late);
    if (free_it)
        redisAsyncFree(ac);
}

static const struct cluster_node *probe_node(const struct cluster *c)
{
    return &c->tries[c->next_try - 1];
}

/* The try failed: the next node is asked on the next turn. free_it: 0 when hiredis frees the context itself. */
static void probe_fail(struct cluster *c, int free_it, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void probe_fail(struct cluster *c, int free_it, const char *fmt, ...)
{
    const struct cluster_node *n = probe_node(c);
    char why[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    snprintf(c->error, sizeof(c->error), "%s:%d: %s", n->host, n->port, why);
    log_debug("cluster: refresh: %s", c->error);
    probe_drop(c, free_it);
    c->try_due = 1;
    kick(c);
}

static void refresh_end(struct cluster *c, int ok)
{
    c->refreshing = 0;
    if (ok) {
        c->stats.refreshes++;
        c->error[0] = '\0';
    } else {
        c->stats.failures++;
    }
    if (c->owner && c->owner->refreshed)
        c->owner->refreshed(c->d, ok);
}

static void install(struct cluster *c, struct cluster_table *t)
{
    if (c->table) {
        cluster_table_clear(c->table);
        free(c->table);
    }
    c->table = t;
    pool_prune(c, t);
    log_debug("cluster: slot table from %s:%d, %d masters", probe_node(c)->host, probe_node(c)->port, t->nshards);
}

static void on_probe_slots(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct cluster *c = ac->data;
    struct cluster_table *t;
    char err[256];

    (void)privdata;
    if (c == NULL)
        return;
    if (reply == NULL) {
        probe_fail(c, 0, "connection lost");
        return;
    }
    t = must(malloc(sizeof(*t)));
    if (cluster_table_parse(reply, probe_node(c)->host, t, err, sizeof(err)) < 0) {
        free(t);
        probe_fail(c, 1, "%s", err);
        return;
    }
    install(c, t);
    probe_drop(c, 1);
    refresh_end(c, 1);
}

static void on_probe_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = reply;

    (void)privdata;
    if (ac->data && r && r->type == REDIS_REPLY_ERROR)
        probe_fail(ac->data, 1, "AUTH: %s", r->str);
}

static void on_probe_connect(const redisAsyncContext *ac, int status)
{
    if (status != REDIS_OK && ac->data)
        probe_fail(ac->data, 0, "%s", ac->errstr);
}

static void on_probe_late(struct deadline *dl)
{
    struct cluster *c = container_of(dl, struct cluster, probe_late);

    probe_fail(c, 1, "no answer within %lldms", (long long)c->d->cfg.backend_timeout);
}

/* Asks n for CLUSTER SLOTS. Returns 0, or -1 when it cannot even be connected to. */
static int probe_open(struct cluster *c, const struct cluster_node *n)
{
    redisAsyncContext *ac = must(redisAsyncConnect(n->host, n->port));

    if (ac->err) {
        snprintf(c->error, sizeof(c->error), "%s:%d: %s", n->host, n->port, ac->errstr);
        redisAsyncFree(ac);
        return -1;
    }
    c->probe = ac;
    ac->data = c;
    evlink_attach(ac, c->d->base);
    redisAsyncSetConnectCallback(ac, on_probe_connect);
    send_auth(c, ac, on_probe_auth);
    redisAsyncCommand(ac, on_probe_slots, NULL, "CLUSTER SLOTS");
    deadline_arm(c->d->deadlines, &c->probe_late, now_ms() + (uint64_t)c->d->cfg.backend_timeout);
    return 0;
}

static void try_next(struct cluster *c)
{
    while (c->next_try < c->ntries)
        if (probe_open(c, &c->tries[c->next_try++]) == 0)
            return;
    log_debug("cluster: refresh failed, no node answered; last: %s", c->error);
    refresh_end(c, 0);
}

void cluster_refresh(struct cluster *c)
{
    if (c->refreshing || c->closing)
        return;
    c->refreshing = 1;
    tries_collect(c);
    if (c->ntries == 0)
        snprintf(c->error, sizeof(c->error), "no node to ask");
    c->try_due = 1;
    kick(c);
}

/* --- calls */

static void call_free(struct call *call)
{
    deadline_cancel(call->c->d->deadlines, &call->timeout);
    sdsfree(call->cmd);
    free(call);
}

/* The final reply of call (NULL: none), to cb or, after a NULL, to late. Frees call. */
static void call_end(struct call *call, redisReply *r)
{
    struct cluster *c = call->c;

    if (!call->answered) {
        call->answered = 1;
        deadline_cancel(c->d->deadlines, &call->timeout);
        call->cb(c->d, r, call->arg);
        if (r == NULL && call->late)
            call->late(c->d, NULL, call->arg);
    } else if (call->late) {
        call->late(c->d, r, call->arg);
    }
    if (r == NULL)
        cluster_refresh(c);
    call_free(call);
}

static void on_call_timeout(struct deadline *dl)
{
    struct call *call = container_of(dl, struct call, timeout);

    call->answered = 1;
    call->cb(call->c->d, NULL, call->arg);
    cluster_refresh(call->c);
}

static void call_send(struct call *call, int asking);

/* Follows a redirect of call to `to`. Returns 0, or -1 when call must end with the redirect as its reply. */
static int call_redirect(struct call *call, enum cluster_redirect kind, const struct cluster_node *to)
{
    struct cluster_node next = *to;

    /* After a timeout, the redirect is the answer: it says the command did not run. */
    if (call->answered || call->redirects >= CLUSTER_REDIRECTS_MAX)
        return -1;
    call->redirects++;
    if (next.host[0] == '\0')
        memcpy(next.host, call->at.host, sizeof(next.host));
    if (kind == CLUSTER_MOVED) {
        call->c->stats.moved++;
        cluster_refresh(call->c);
    } else {
        call->c->stats.asked++;
    }
    call->at = next;
    call_send(call, kind == CLUSTER_ASK);
    return 0;
}

static void on_call_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct call *call = privdata;
    redisReply *r = reply;
    struct cluster_node to;
    enum cluster_redirect kind;
    int slot;

    (void)ac;
    if (r && r->type == REDIS_REPLY_ERROR && (kind = cluster_redirect_parse(r->str, &slot, &to)) != CLUSTER_NO_REDIRECT &&
        call_redirect(call, kind, &to) == 0)
        return;
    call_end(call, r);
}

/* Sends call to call->at, after ASKING when asking; a call that cannot be sent is answered NULL on the next turn. */
static void call_send(struct call *call, int asking)
{
    struct link *l = link_get(call->c, &call->at);

    if (l && asking && redisAsyncCommand(l->ac, NULL, NULL, "ASKING") != REDIS_OK)
        l = NULL;
    if (l && redisAsyncFormattedCommand(l->ac, on_call_reply, call, call->cmd, sdslen(call->cmd)) == REDIS_OK)
        return;
    TAILQ_INSERT_TAIL(&call->c->orphans, call, in_orphans);
    kick(call->c);
}

int cluster_send(struct cluster *c, int slot, sds cmd, cluster_cb *cb, cluster_cb *late, void *arg)
{
    const struct cluster_node *n = cluster_node_for_slot(c, slot);
    struct call *call;

    if (n == NULL) {
        sdsfree(cmd);
        return -1;
    }
    call = must(calloc(1, sizeof(*call)));
    call->c = c;
    call->cmd = cmd;
    call->cb = cb;
    call->late = late;
    call->arg = arg;
    call->at = *n;
    deadline_init(&call->timeout, on_call_timeout);
    deadline_arm(c->d->deadlines, &call->timeout, now_ms() + (uint64_t)c->d->cfg.backend_timeout);
    call_send(call, 0);
    return 0;
}

/* --- the router */

/* The next turn of the loop: answers the calls that could not be sent, moves a refresh on. */
static void on_later(evutil_socket_t fd, short what, void *arg)
{
    struct cluster *c = arg;
    struct call *call;

    (void)fd;
    (void)what;
    while ((call = TAILQ_FIRST(&c->orphans)) != NULL) {
        TAILQ_REMOVE(&c->orphans, call, in_orphans);
        call_end(call, NULL);
    }
    if (c->try_due && !c->closing) {
        c->try_due = 0;
        try_next(c);
    }
}

struct cluster *cluster_new(struct dlockd *d, const struct cluster_owner *owner, const struct addr *seeds,
                            int nseeds)
{
    struct cluster *c = must(calloc(1, sizeof(*c)));

    c->seeds = must(calloc((size_t)nseeds + 1, sizeof(*c->seeds)));
    c->later = must(event_new(d->base, -1, 0, on_later, c));
    c->d = d;
    c->owner = owner;
    for (int i = 0; i < nseeds; i++) {
        snprintf(c->seeds[i].host, sizeof(c->seeds[i].host), "%s", seeds[i].host);
        c->seeds[i].port = seeds[i].port;
    }
    c->nseeds = nseeds;
    LIST_INIT(&c->pool);
    TAILQ_INIT(&c->orphans);
    deadline_init(&c->probe_late, on_probe_late);
    snprintf(c->error, sizeof(c->error), "not refreshed yet");
    return c;
}

void cluster_free(struct cluster *c)
{
    struct call *call;
    struct link *l;

    c->closing = 1;
    /* Calls still pending are answered NULL from here. */
    while ((l = LIST_FIRST(&c->pool)) != NULL)
        redisAsyncFree(link_forget(l));
    while ((call = TAILQ_FIRST(&c->orphans)) != NULL) {
        TAILQ_REMOVE(&c->orphans, call, in_orphans);
        call_end(call, NULL);
    }
    probe_drop(c, 1);
    event_free(c->later);
    if (c->table) {
        cluster_table_clear(c->table);
        free(c->table);
    }
    free(c->tries);
    free(c->seeds);
    free(c);
}

int cluster_refreshing(const struct cluster *c)
{
    return c->refreshing;
}

const struct cluster_table *cluster_table(const struct cluster *c)
{
    return c->table;
}

const struct cluster_node *cluster_node_for_slot(const struct cluster *c, int slot)
{
    const struct cluster_shard *s = cluster_table_shard(c->table, slot);

    return s ? &s->master : NULL;
}

const char *cluster_error(const struct cluster *c)
{
    return c->error;
}

const struct cluster_stats *cluster_stats(const struct cluster *c)
{
    return &c->stats;
}
