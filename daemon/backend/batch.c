/* batch.c - gathers the script operations of one turn of the event loop
 * into one call of the batch script (scripts/common.lua) per hash slot (all
 * in one but with Redis Cluster, where an operation goes with its names),
 * and hands each operation its own part of the reply. One call costs Redis
 * far less than one per request: a script call's fixed cost is paid once
 * per turn. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "batch.h"
#include "dlockd.h"
#include "log.h"
#include "redis.h"
#include "strbuf.h"

#define BATCH_OPS 256            /* operations in one call at most */
#define BATCH_BYTES (256 * 1024) /* of keys and arguments, about */
/* Calls of gated batches in flight at once (per Cluster master): a renewal, which
 * bypasses them, waits behind no more than these at Redis. */
#define BATCH_WINDOW 16

/* Strings one after the other, formatted for Redis (redis_resp_bulk). */
struct strv {
    char *buf;
    size_t len, cap;
    int n;
};

struct batch_op {
    enum op_id op;
    contract_cb *cb, *late;
    void *arg;
};

struct batch {
    struct dlockd *d;
    int flags;                /* BATCH_BOUNDED, BATCH_UNGATED */
    int slot;                 /* of its names' keys (redis_slot) */
    TAILQ_ENTRY(batch) opened; /* in the batcher's list while it is gathered */
    struct batch *next;       /* kept behind the gate after this one */
    uint64_t kept_at;         /* monotonic ms it was kept */
    int nops;
    struct strv keys, args;   /* KEYS, and ARGV from the first operation on */
    struct batch_op ops[BATCH_OPS];
};

TAILQ_HEAD(batches, batch);

/* The batches being gathered, one per combination of flags and slot (one
 * slot but with Redis Cluster), the event that sends them, and those kept
 * while the gate is closed. */
struct batcher {
    struct event *flush;
    int slots;                /* redis_slots */
    struct batch **open;      /* [flags * slots + slot]: the one gathered for them, or NULL */
    struct batches opened[4]; /* the same, per flags in the order they were opened: sent at the end of the turn */
    struct event *gate;       /* opens it */
    uint64_t gate_until;      /* monotonic ms; 0 once that time is over */
    int gate_held;            /* closed until batch_gate_hold(d, 0), however long gate_until */
    struct batch *kept, **kept_tail; /* behind the gate or the window, in order */
    int sending;              /* calls of gated batches not answered yet (BATCH_WINDOW) */
    struct deadline expire;   /* the oldest kept batch's gate-wait is over */
};

static void strv_add(struct strv *v, const char *s, size_t len)
{
    if (v->len + REDIS_RESP_BULK_MAX(len) > v->cap) {
        v->cap = (v->len + REDIS_RESP_BULK_MAX(len)) * 2;
        v->buf = must(realloc(v->buf, v->cap));
    }
    v->len = (size_t)(redis_resp_bulk(v->buf + v->len, s, len) - v->buf);
    v->n++;
}

static void batch_free(struct batch *b)
{
    free(b->keys.buf);
    free(b->args.buf);
    free(b);
}

/* Tells every operation that no answer came, and that none will. */
static void drop_all(struct batch *b)
{
    for (int i = 0; i < b->nops; i++) {
        b->ops[i].cb(b->d, NULL, b->ops[i].arg);
        if (b->ops[i].late)
            b->ops[i].late(b->d, NULL, b->ops[i].arg);
    }
}

static void send_kept(struct batcher *bt, struct dlockd *d);

/* --- replies */

/* The Redis time after which a batch sent now must not start: a quarter
 * short of backend-timeout, so its answer is in before dlockd gives up on
 * it. 0 (none) until a reply has shown Redis's clock. */
static long long deadline_now(const struct dlockd *d)
{
    if (d->redis_offset_at == 0)
        return 0;
    return (long long)now_ms() + d->redis_offset + d->cfg.backend_timeout - d->cfg.backend_timeout / 4;
}

/* Redis read its time before dlockd received the reply: the difference is a
 * lower bound of the offset between the clocks. The best one is kept, but
 * after trouble on the link (maybe another Redis) the latest replaces it. */
static void learn_clock(struct dlockd *d, const struct contract_batch *head)
{
    uint64_t now = now_ms();
    int64_t lower = (int64_t)head->now - (int64_t)now;

    if (head->now <= 0)
        return;
    if (d->redis_offset_at == 0 || redis_trouble_since(d->redis, d->redis_offset_at) || lower > d->redis_offset)
        d->redis_offset = lower;
    d->redis_offset_at = now;
}

/* An operation that answers nobody: its grants are handed out with the batch's. */
static void on_background(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    (void)d;
    (void)rep;
    (void)arg;
}

/* A batch stops handing a name on after a bounded number of grants: the
 * daemon that ran it goes on, one poke at a time, until nothing more fits. */
static void go_on(struct dlockd *d, const struct contract_batch *head)
{
    char *names = must(strdup(head->more)), *save;

    for (char *name = strtok_r(names, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
        const char *one = name;
        if (batch_op(d, OP_POKE, 0, 1, &one, NULL, on_background, NULL, NULL))
            log_warnx("backend down: '%s' is handed on by the next script on it", name);
    }
    free(names);
}

/* Hands out the grants, then each operation its reply (late ones only to those that wait for one). */
static void deliver(struct batch *b, struct contract_batch *head, int late)
{
    struct dlockd *d = b->d;
    struct contract_reply r;

    if (d->batch_listener)
        d->batch_listener->granted(d, head);
    for (int i = 0; i < b->nops; i++) {
        struct batch_op *op = &b->ops[i];
        if (late && op->late)
            op->late(d, contract_op_reply(head, i, op->op, &r), op->arg);
        else if (!late)
            op->cb(d, contract_op_reply(head, i, op->op, &r), op->arg);
    }
    go_on(d, head);
}

/* The first answer. A LATE reply changed nothing: the operations hear no
 * answer and, if they wait for a late one, that none comes. Without an
 * answer, on_late follows. */
static void on_answer(struct dlockd *d, redisReply *rep, void *arg)
{
    struct batch *b = arg;
    struct contract_batch head;

    if (!(b->flags & BATCH_UNGATED) && d->batcher) { /* gone at shutdown: batch_close, then redis_close */
        d->batcher->sending--;
        send_kept(d->batcher, d);
    }
    if (rep == NULL) {
        for (int i = 0; i < b->nops; i++)
            b->ops[i].cb(d, NULL, b->ops[i].arg);
        return;
    }
    contract_batch(&head, rep);
    learn_clock(d, &head);
    if (head.status == CONTRACT_LATE) {
        log_info("backend: a batch of %d started after its deadline and changed nothing", b->nops);
        drop_all(b);
    } else {
        deliver(b, &head, 0);
    }
    batch_free(b);
}

/* The reply after the call timed out, or NULL when none will come. Its
 * grants are handed out even when no operation waits for it. */
static void on_late(struct dlockd *d, redisReply *rep, void *arg)
{
    struct batch *b = arg;
    struct contract_batch head;

    if (rep) {
        contract_batch(&head, rep);
        learn_clock(d, &head);
    }
    if (rep && head.status != CONTRACT_LATE) {
        deliver(b, &head, 1);
    } else {
        for (int i = 0; i < b->nops; i++)
            if (b->ops[i].late)
                b->ops[i].late(d, NULL, b->ops[i].arg);
    }
    batch_free(b);
}

/* --- sending */

/* The calls of gated batches that may be in flight at once. */
static int window(const struct dlockd *d)
{
    return BATCH_WINDOW * redis_nodes(d->redis);
}

static void strv_cat(struct strv *v, const struct strv *w)
{
    if (w->len == 0)
        return;
    if (v->len + w->len > v->cap) {
        v->cap = (v->len + w->len) * 2;
        v->buf = must(realloc(v->buf, v->cap));
    }
    memcpy(v->buf + v->len, w->buf, w->len);
    v->len += w->len;
    v->n += w->n;
}

/* Adds b's operations to the last kept batch when they fit, go the same way
 * and it was kept in the same millisecond (its gate-wait is theirs): the
 * turns' batches kept while the calls ahead are at Redis become one call. */
static int merge_kept(struct batcher *bt, struct batch *b, uint64_t now)
{
    struct batch *t = bt->kept ? container_of(bt->kept_tail, struct batch, next) : NULL;

    if (t == NULL || t->kept_at != now || t->flags != b->flags || t->slot != b->slot || t->nops + b->nops > BATCH_OPS ||
        t->keys.len + t->args.len + b->keys.len + b->args.len > BATCH_BYTES)
        return 0;
    memcpy(t->ops + t->nops, b->ops, (size_t)b->nops * sizeof(b->ops[0]));
    t->nops += b->nops;
    strv_cat(&t->keys, &b->keys);
    strv_cat(&t->args, &b->args);
    batch_free(b);
    return 1;
}

/* Keeps b, in order, until the gate opens and the window has room, or its gate-wait is over. */
static void keep(struct batcher *bt, struct batch *b)
{
    uint64_t now = now_ms();

    if (merge_kept(bt, b, now))
        return;
    b->kept_at = now;
    *bt->kept_tail = b;
    bt->kept_tail = &b->next;
    if (!deadline_armed(&bt->expire))
        deadline_arm(b->d->deadlines, &bt->expire, b->kept_at + (uint64_t)b->d->cfg.gate_wait);
}

static void send_now(struct batch *b)
{
    struct dlockd *d = b->d;
    const char *head[CONTRACT_HEAD];
    char deadline[24], nops[16];
    struct strv h = { 0 };
    struct redis_resp parts[3];
    int rc;

    str_ll(deadline, sizeof(deadline), (b->flags & BATCH_BOUNDED) ? deadline_now(d) : 0);
    str_ll(nops, sizeof(nops), b->nops);
    contract_batch_head(head, d->cfg.key_prefix, d->id, deadline, nops);
    for (int i = 0; i < CONTRACT_HEAD; i++)
        strv_add(&h, head[i], strlen(head[i]));
    parts[0] = (struct redis_resp){ b->keys.buf, b->keys.len };
    parts[1] = (struct redis_resp){ h.buf, h.len };
    parts[2] = (struct redis_resp){ b->args.buf, b->args.len };
    if (d->batch_listener)
        d->batch_listener->sending(d);
    rc = redis_script_resp(d->redis, SCRIPT_BATCH, b->slot, b->keys.n, b->keys.n + CONTRACT_HEAD + b->args.n, parts,
                           3, on_answer, on_late, b);
    free(h.buf);
    if (rc) {
        drop_all(b);
        batch_free(b);
    } else if (!(b->flags & BATCH_UNGATED)) {
        d->batcher->sending++;
    }
}

/* Sends the kept batches, in order, while the gate is open and the window has room. */
static void send_kept(struct batcher *bt, struct dlockd *d)
{
    struct batch *b;

    while ((b = bt->kept) != NULL && !batch_gated(d) && bt->sending < window(d)) {
        if ((bt->kept = b->next) == NULL)
            bt->kept_tail = &bt->kept;
        b->next = NULL;
        send_now(b);
    }
    if (bt->kept == NULL)
        deadline_cancel(d->deadlines, &bt->expire);
}

/* A batch that would pass the gate, the window or those kept before it is kept; the
 * others (the write-back after a failover) go at once, ahead of everything kept. */
static void send_batch(struct batch *b)
{
    struct batcher *bt = b->d->batcher;

    if (!(b->flags & BATCH_UNGATED) && (batch_gated(b->d) || bt->kept || bt->sending >= window(b->d)))
        keep(bt, b);
    else
        send_now(b);
}

/* Takes b out of the batches being gathered: the next operation for its flags and slot opens another. */
static void unopen(struct batcher *bt, struct batch *b)
{
    bt->open[b->flags * bt->slots + b->slot] = NULL;
    TAILQ_REMOVE(&bt->opened[b->flags], b, opened);
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct batcher *bt = ((struct dlockd *)arg)->batcher;
    struct batch *b;

    (void)fd;
    (void)what;
    for (int i = 0; i < 4; i++) {
        while ((b = TAILQ_FIRST(&bt->opened[i])) != NULL) {
            unopen(bt, b);
            send_batch(b);
        }
    }
}

/* Sends the batches kept while the gate was closed, in order, a window at a time. */
static void gate_open(struct batcher *bt, struct dlockd *d)
{
    log_notice("backend: failover-delay is over, granting again");
    send_kept(bt, d);
}

/* Why a kept batch's operations are not answered: the gate, or the calls ahead of it. */
static void silence_text(struct dlockd *d, char *buf, size_t len)
{
    char until[40];

    if (batch_gated(d))
        snprintf(buf, len, "waited %lldms behind the failover gate (gated until %s); nothing was done",
                 (long long)d->cfg.gate_wait, batch_gated_until(d, until, sizeof(until)));
    else
        snprintf(buf, len, "waited %lldms for Redis to take it; nothing was done", (long long)d->cfg.gate_wait);
}

/* Answers the kept batches whose gate-wait is over as if Redis had not answered. */
static void on_expire(struct deadline *dl)
{
    struct batcher *bt = container_of(dl, struct batcher, expire);
    struct batch *b;
    struct dlockd *d;
    uint64_t now = now_ms();
    char why[200];
    int n = 0;

    if (bt->kept == NULL)
        return;
    d = bt->kept->d;
    silence_text(d, why, sizeof(why));
    d->silence = why;
    while ((b = bt->kept) != NULL && b->kept_at + (uint64_t)d->cfg.gate_wait <= now) {
        if ((bt->kept = b->next) == NULL)
            bt->kept_tail = &bt->kept;
        n += b->nops;
        drop_all(b);
        batch_free(b);
    }
    d->silence = NULL;
    if (n > 0)
        log_warnx("backend: %d operations %s", n, why);
    if ((b = bt->kept) != NULL)
        deadline_arm(d->deadlines, &bt->expire, b->kept_at + (uint64_t)d->cfg.gate_wait);
}

static void on_gate(evutil_socket_t fd, short what, void *arg)
{
    struct batcher *bt = ((struct dlockd *)arg)->batcher;

    (void)fd;
    (void)what;
    bt->gate_until = 0;
    if (!bt->gate_held)
        gate_open(bt, arg);
}

static struct batcher *batcher(struct dlockd *d)
{
    struct batcher *bt = d->batcher;

    if (bt == NULL) {
        bt = d->batcher = must(calloc(1, sizeof(*bt)));
        bt->open = must(calloc(4 * (size_t)(bt->slots = redis_slots(d->redis)), sizeof(*bt->open)));
        bt->flush = must(event_new(d->base, -1, 0, on_flush, d));
        bt->gate = must(evtimer_new(d->base, on_gate, d));
        bt->kept_tail = &bt->kept;
        deadline_init(&bt->expire, on_expire);
        for (int i = 0; i < 4; i++)
            TAILQ_INIT(&bt->opened[i]);
    }
    return bt;
}

/* The batch being gathered for flags and slot, opened (and its sending planned) when there is none. */
static struct batch *open_batch(struct dlockd *d, int flags, int slot)
{
    struct batcher *bt = batcher(d);
    struct batch **at = &bt->open[flags * bt->slots + slot];

    if (*at != NULL)
        return *at;
    /* Only the head is cleared: ops[] is filled as it grows (BATCH_OPS of them are kilobytes). */
    *at = must(malloc(sizeof(**at)));
    memset(*at, 0, offsetof(struct batch, ops));
    (*at)->d = d;
    (*at)->flags = flags;
    (*at)->slot = slot;
    TAILQ_INSERT_TAIL(&bt->opened[flags], *at, opened);
    event_active(bt->flush, EV_TIMEOUT, 0);
    return *at;
}

static void add_keys(struct dlockd *d, struct strv *keys, const char *name)
{
    char key[CONTRACT_KEY_MAX];
    size_t len = contract_key(key, sizeof(key), d->cfg.key_prefix, name, CONTRACT_SUFFIXES[0]);

    for (int j = 0; j < CONTRACT_NAME_KEYS; j++) {
        key[len - 1] = CONTRACT_SUFFIXES[j];
        strv_add(keys, key, len);
    }
}

int batch_slot(const struct dlockd *d, const char *name)
{
    char key[CONTRACT_KEY_MAX];

    if (redis_slots(d->redis) == 1)
        return 0;
    contract_key(key, sizeof(key), d->cfg.key_prefix, name, CONTRACT_SUFFIXES[0]);
    return redis_slot(d->redis, key);
}

int batch_spans(const struct dlockd *d, int nnames, const char *const *names)
{
    for (int i = 1; i < nnames; i++)
        if (batch_slot(d, names[i]) != batch_slot(d, names[0]))
            return 1;
    return 0;
}

int batch_op(struct dlockd *d, enum op_id op, int flags, int nnames, const char *const *names,
             const struct contract_args *args, contract_cb *cb, contract_cb *late, void *arg)
{
    struct contract_frame f;
    struct batch *b;

    if (!redis_accepts(d->redis))
        return -1;
    flags &= BATCH_BOUNDED | BATCH_UNGATED;
    b = open_batch(d, flags, nnames > 0 ? batch_slot(d, names[0]) : 0);
    b->ops[b->nops++] = (struct batch_op){ op, cb, late, arg };
    for (int i = 0; i < nnames; i++)
        add_keys(d, &b->keys, names[i]);
    if (args && args->record)
        strv_add(&b->keys, args->record, strlen(args->record));
    contract_op_frame(&f, op, nnames, names, args);
    for (int i = 0; i < f.n; i++)
        strv_add(&b->args, f.v[i], strlen(f.v[i]));
    if (b->nops == BATCH_OPS || b->keys.len + b->args.len >= BATCH_BYTES) {
        unopen(d->batcher, b);
        send_batch(b);
    }
    return 0;
}

void batch_gate(struct dlockd *d, int64_t ms)
{
    struct batcher *bt = batcher(d);
    uint64_t until = now_ms() + (uint64_t)(ms > 0 ? ms : 0);
    struct timeval tv;

    if (ms <= 0 || until <= bt->gate_until)
        return;
    bt->gate_until = until;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    evtimer_add(bt->gate, &tv);
}

void batch_gate_hold(struct dlockd *d, int on)
{
    struct batcher *bt = batcher(d);

    if (bt->gate_held == on)
        return;
    bt->gate_held = on;
    if (!on && bt->gate_until == 0)
        gate_open(bt, d);
}

int batch_gated(const struct dlockd *d)
{
    return d->batcher && (d->batcher->gate_until != 0 || d->batcher->gate_held);
}

const char *batch_gated_until(const struct dlockd *d, char *buf, size_t len)
{
    const struct batcher *bt = d->batcher;
    struct timespec wall;
    struct tm tm;
    time_t at;

    if (!batch_gated(d))
        return "";
    if (bt->gate_until == 0)
        return "this daemon's holds are written back";
    clock_gettime(CLOCK_REALTIME, &wall);
    at = wall.tv_sec + (time_t)((bt->gate_until - now_ms() + 999) / 1000);
    gmtime_r(&at, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

void batch_listen(struct dlockd *d, const struct batch_listener *l)
{
    d->batch_listener = l;
}

void batch_close(struct dlockd *d)
{
    struct batcher *bt = d->batcher;
    struct batch *b;

    if (bt == NULL)
        return;
    for (int i = 0; i < 4; i++) {
        while ((b = TAILQ_FIRST(&bt->opened[i])) != NULL) {
            unopen(bt, b);
            drop_all(b);
            batch_free(b);
        }
    }
    while ((b = bt->kept) != NULL) {
        bt->kept = b->next;
        drop_all(b);
        batch_free(b);
    }
    deadline_cancel(d->deadlines, &bt->expire);
    event_free(bt->gate);
    event_free(bt->flush);
    free(bt->open);
    free(bt);
    d->batcher = NULL;
}
