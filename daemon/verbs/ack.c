/* ack.c - min-replicas-ack: the answer to a grant waits for a round of SET
 * and WAIT on each master its grant went to (every master of a cluster when
 * that is not known). A master applies writes in one order and replicates
 * them in that order, so a SET it applies after a grant, followed by WAIT
 * on the same connection, confirms the grant, whichever connection wrote
 * it: one round serves every answer held when it starts, and those that
 * come meanwhile wait for the next. A master that fails the round fails
 * only the answers whose grants went to it. */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "ack.h"
#include "conn.h"
#include "contract.h"
#include "dlockd.h"
#include "hold.h"
#include "log.h"
#include "redis.h"

#define ACK_KEY_TTL "60000" /* ms the round's key lives: it is written only to be replicated */
#define TAG_TRIES 16384     /* hash tags tried to find a key on each master; a master of fewer slots may have none */

/* An answer held until a round confirms its grant. */
struct held {
    struct req *r;             /* the request to answer */
    const char *body;          /* its answer */
    const char *hid;           /* the hold granted */
    long long k;               /* counts granted on each name */
    int nnames;
    int in_round;              /* in the round in flight, not the next */
    uint32_t nodes;            /* of the round: the masters its grant went to, a bit each */
    TAILQ_ENTRY(held) link;
    const char *v[];           /* nnames names, then nnames tokens; then the strings */
};

TAILQ_HEAD(held_list, held);

struct ack {
    struct held_list next;     /* answers for the next round */
    struct held_list round;    /* answers the round in flight confirms */
    int pending;               /* calls of the round in flight not answered yet */
    uint64_t seq;              /* rounds sent: the value of the keys */
    long long want;            /* replicas the round in flight asks for */
    uint64_t routing;          /* redis_routing when the round in flight started */
    char why[200];             /* why the round in flight fails for all; "" while it may succeed */
    uint32_t failed;           /* the masters that failed it, a bit each */
    char node_why[200];        /* why the first of them did */
    int tags_known;            /* tag[] was found once */
    uint64_t tags_routing;     /* redis_routing tag[] was found for */
    int tag[REDIS_NODES_MAX];  /* per node, the k of a key P{ID.k}:ack it serves; -1: none */
    struct event *start;       /* starts a round once this turn of the loop is over */
};

static void round_start(evutil_socket_t fd, short what, void *arg);

static struct ack *ack_get(struct dlockd *d)
{
    struct ack *a = d->ack;

    if (a == NULL) {
        a = d->ack = must(calloc(1, sizeof(*a)));
        a->start = must(event_new(d->base, -1, 0, round_start, d));
        TAILQ_INIT(&a->next);
        TAILQ_INIT(&a->round);
    }
    return a;
}

/* Copies str to *p and moves *p past its '\0'; returns the copy. */
static const char *put(char **p, const char *str)
{
    char *copy = *p;
    size_t n = strlen(str) + 1;

    memcpy(copy, str, n);
    *p += n;
    return copy;
}

static struct held *held_new(struct req *r, const struct ack_grant *g, const char *body)
{
    size_t size = sizeof(struct held) + 2 * (size_t)g->nnames * sizeof(char *) + strlen(body) + strlen(g->hid) + 2;
    struct held *e;
    char *p;

    for (int i = 0; i < g->nnames; i++)
        size += strlen(g->names[i]) + strlen(g->tokens[i]) + 2;
    e = must(calloc(1, size));
    p = (char *)&e->v[2 * g->nnames];
    e->r = r;
    e->k = g->k;
    e->nnames = g->nnames;
    e->body = put(&p, body);
    e->hid = put(&p, g->hid);
    for (int i = 0; i < g->nnames; i++) {
        e->v[i] = put(&p, g->names[i]);
        e->v[g->nnames + i] = put(&p, g->tokens[i]);
    }
    return e;
}

static void held_remove(struct ack *a, struct held *e)
{
    if (e->in_round)
        TAILQ_REMOVE(&a->round, e, link);
    else
        TAILQ_REMOVE(&a->next, e, link);
    e->r->gone = NULL;
}

/* Takes back the counts e granted: here, and in Redis (where the token guards a later hold). */
static void undo(struct dlockd *d, const struct held *e, const char *why)
{
    for (int i = 0; i < e->nnames; i++) {
        const char *name = e->v[i], *token = e->v[e->nnames + i];

        log_info("audit: undone name=%s hid=%s token=%s reason=%s", name, e->hid, token, why);
        hold_undo(d, name, e->hid, token, e->k, NULL, NULL);
    }
}

/* Its connection went before the answer could be given: the grant is undone. */
static void on_gone(struct req *r)
{
    struct held *e = r->ctx;

    held_remove(r->d->ack, e);
    undo(r->d, e, "gone");
    req_drop(r);
    free(e);
}

/* 1 while every hold e granted is here with its token: its lease= may run out, or it be lost, while held. */
static int still_held(struct dlockd *d, const struct held *e)
{
    for (int i = 0; i < e->nnames; i++)
        if (!hold_has(d, e->v[i], e->hid, e->v[e->nnames + i]))
            return 0;
    return 1;
}

/* Answers every request of the round in flight: OK, or ERR BACKEND why after undoing its grant;
 * TIMEOUT, undoing the rest, when a hold it granted ended meanwhile. */
static void round_end(struct dlockd *d, const char *why)
{
    struct ack *a = d->ack;
    struct held *e;

    while ((e = TAILQ_FIRST(&a->round)) != NULL) {
        const char *fail = why ? why : (e->nodes & a->failed) ? a->node_why : NULL;

        held_remove(a, e);
        if (fail == NULL && still_held(d, e)) {
            req_send(e->r, e->body);
        } else if (fail == NULL) {
            /* Its OK would name a hold that is gone, maybe someone else's now. */
            d->stats.timeouts++;
            undo(d, e, "ended");
            req_reply(e->r, "TIMEOUT", NULL);
        } else {
            d->stats.ack_refused++;
            undo(d, e, "replicas");
            req_err(e->r, PROTO_EBACKEND, "%s", fail);
        }
        free(e);
    }
}

/* Marks the round in flight failed, unless it failed already. */
static void round_fail(struct ack *a, const char *why)
{
    if (a->why[0] == '\0')
        snprintf(a->why, sizeof(a->why), "%s", why);
}

/* Marks the round failed for the answers whose grants went to node. */
static void node_fail(struct ack *a, int node, const char *why)
{
    if (a->failed == 0)
        snprintf(a->node_why, sizeof(a->node_why), "%s", why);
    a->failed |= 1u << node;
}

/* One call of the round in flight was answered: the last one ends the round and starts the next. */
static void round_answered(struct dlockd *d)
{
    struct ack *a = d->ack;

    if (--a->pending > 0)
        return;
    if (redis_routing(d->redis) != a->routing)
        round_fail(a, "the Redis Cluster slot table changed while the replicas were asked; the grant is undone");
    round_end(d, a->why[0] ? a->why : NULL);
    event_active(a->start, EV_TIMEOUT, 0);
}

static void on_written(struct dlockd *d, redisReply *r, void *arg)
{
    if (r == NULL || r->type != REDIS_REPLY_STATUS)
        node_fail(d->ack, (int)(intptr_t)arg, "Redis did not confirm the grant to its replicas in time; it is undone");
    round_answered(d);
}

static void on_waited(struct dlockd *d, redisReply *r, void *arg)
{
    struct ack *a = d->ack;
    char why[160];

    if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
        node_fail(a, (int)(intptr_t)arg, "Redis did not confirm the grant to its replicas in time; it is undone");
    } else if (r->integer < a->want) {
        snprintf(why, sizeof(why), "only %lld of %lld replicas confirmed the grant (min-replicas-ack); it is undone",
                 r->integer, a->want);
        node_fail(a, (int)(intptr_t)arg, why);
    }
    round_answered(d);
}

/* WAIT gives up a quarter of backend-timeout before its call's deadline,
 * which would put the link in jeopardy when only the replicas are slow. */
static long long wait_ms(const struct dlockd *d)
{
    return d->cfg.backend_timeout - d->cfg.backend_timeout / 4;
}

/* The key P{ID.k}:ack: this daemon's own, in the slot of the tag ID.k. */
static void tag_key(const struct dlockd *d, int k, char *key, size_t len)
{
    char tag[64];

    snprintf(tag, sizeof(tag), "%s.%d", d->id, k);
    contract_ack_key(key, len, d->cfg.key_prefix, tag);
}

/* Finds, once per slot table, a k whose key each node serves: ID.0, ID.1, ... in turn. */
static void tags_find(struct dlockd *d, struct ack *a)
{
    char key[CONTRACT_KEY_MAX];
    int left = redis_nodes(d->redis), node;

    if (a->tags_known && a->tags_routing == redis_routing(d->redis))
        return;
    a->tags_known = 1;
    a->tags_routing = redis_routing(d->redis);
    for (int i = 0; i < REDIS_NODES_MAX; i++)
        a->tag[i] = -1;
    for (int k = 0; k < TAG_TRIES && left > 0; k++) {
        tag_key(d, k, key, sizeof(key));
        node = redis_node_of(d->redis, redis_slot(d->redis, key));
        if (node >= 0 && node < REDIS_NODES_MAX && a->tag[node] < 0) {
            a->tag[node] = k;
            left--;
        }
    }
}

/* The nodes e's grant went to, as a bit each; all of them when that is not sure. */
static uint32_t held_nodes(struct dlockd *d, const struct held *e)
{
    int n = redis_nodes(d->redis), node;
    uint32_t all = n >= 32 ? UINT32_MAX : (1u << n) - 1, nodes = 0;
    char key[CONTRACT_KEY_MAX];

    if (!redis_routing_settled(d->redis) || e->nnames == 0)
        return all;
    for (int i = 0; i < e->nnames; i++) {
        contract_key(key, sizeof(key), d->cfg.key_prefix, e->v[i], 'x');
        if ((node = redis_node_of(d->redis, redis_slot(d->redis, key))) < 0)
            return all;
        nodes |= 1u << node;
    }
    return nodes;
}

/* SET of the node's key, then WAIT, pipelined on that node's connection. */
static void node_send(struct dlockd *d, struct ack *a, int node)
{
    char key[CONTRACT_KEY_MAX], seq[24], n[24], ms[24];
    const char *set[] = { "SET", key, seq, "PX", ACK_KEY_TTL }, *wait[] = { "WAIT", n, ms };

    if (a->tag[node] < 0) {
        node_fail(a, node, "no key of this daemon lives on one of the Redis Cluster masters; the grant is undone");
        return;
    }
    tag_key(d, a->tag[node], key, sizeof(key));
    snprintf(seq, sizeof(seq), "%" PRIu64, a->seq);
    snprintf(n, sizeof(n), "%lld", a->want);
    snprintf(ms, sizeof(ms), "%lld", wait_ms(d));
    if (redis_command(d->redis, node, 5, set, on_written, (void *)(intptr_t)node)) {
        node_fail(a, node, redis_unavailable(d->redis));
        return;
    }
    a->pending++;
    if (redis_command(d->redis, node, 3, wait, on_waited, (void *)(intptr_t)node)) {
        node_fail(a, node, redis_unavailable(d->redis));
        return;
    }
    a->pending++;
}

/* Sends a round for the answers held, unless one is in flight: SET and WAIT on each node it needs. */
static void round_start(evutil_socket_t fd, short what, void *arg)
{
    struct dlockd *d = arg;
    struct ack *a = d->ack;
    struct held *e;
    uint32_t nodes;

    (void)fd;
    (void)what;
    if (a->pending || TAILQ_EMPTY(&a->next))
        return;
    nodes = 0;
    TAILQ_FOREACH(e, &a->next, link) {
        e->in_round = 1;
        e->nodes = held_nodes(d, e);
        nodes |= e->nodes;
    }
    TAILQ_CONCAT(&a->round, &a->next, link);
    a->want = d->cfg.min_replicas_ack;
    a->routing = redis_routing(d->redis);
    a->why[0] = '\0';
    a->failed = 0;
    a->seq++;
    d->stats.ack_rounds++;
    tags_find(d, a);
    a->pending = 1; /* so that no answer ends the round while it is sent */
    for (int node = 0; node < redis_nodes(d->redis); node++)
        if (nodes & (1u << node))
            node_send(d, a, node);
    round_answered(d);
}

void ack_answer(struct req *r, const struct ack_grant *g, const char *body)
{
    struct dlockd *d = r->d;
    struct ack *a;
    struct held *e;

    if (d->cfg.min_replicas_ack == 0) {
        req_send(r, body);
        return;
    }
    a = ack_get(d);
    e = held_new(r, g, body);
    TAILQ_INSERT_TAIL(&a->next, e, link);
    r->gone = on_gone;
    r->quit = NULL;
    r->ctx = e;
    if (!a->pending)
        event_active(a->start, EV_TIMEOUT, 0);
}

void ack_free(struct dlockd *d)
{
    struct ack *a = d->ack;
    struct held *e;

    if (a == NULL)
        return;
    while ((e = TAILQ_FIRST(&a->next)) != NULL) {
        TAILQ_REMOVE(&a->next, e, link);
        free(e);
    }
    while ((e = TAILQ_FIRST(&a->round)) != NULL) {
        TAILQ_REMOVE(&a->round, e, link);
        free(e);
    }
    event_free(a->start);
    free(a);
    d->ack = NULL;
}
