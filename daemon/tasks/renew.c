/* renew.c - every lock-lease/3 one task extends the Redis lease of every hold
 * and queue entry of this daemon, many per script call; what it finds gone is
 * reported lost (holds) or checked again (waits). After a failover it writes
 * the holds back instead, one batch operation each, once the records of its
 * sessions showed none moved to another daemon meanwhile. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "batch.h"
#include "contract.h"
#include "dict.h"
#include "dlockd.h"
#include "hold.h"
#include "hooks.h"
#include "wait.h"
#include "log.h"
#include "record.h"
#include "redis.h"
#include "renew.h"
#include "session.h"

#define RENEW_BATCH 200 /* leases per script call */
#define RENEW_WINDOW 4  /* calls in flight at once: what a cycle holds in memory is bounded */
#define RENEW_WINDOW_SLOTS 256 /* the same with Redis Cluster, where a call has the names of one slot */
#define REASSERT_WINDOW (RENEW_BATCH * RENEW_WINDOW) /* holds written back at once */

/* One lease to extend: offsets in its batch's text of the script's
 * arguments, and of what identifies the hold if Redis lost it. */
struct item {
    size_t keys;               /* the first of its name's keys (CONTRACT_RENEW_SUFFIXES), shared by a run of items */
    size_t member, lease;      /* hid or "@" wid, ms */
    size_t name, token;        /* of a hold; token "" for a wait */
};

struct batch {
    int n, room;
    int slot;           /* of every item's keys (redis_slot) */
    struct item *items; /* room for that many, RENEW_BATCH at most */
    char *text; /* the items' strings, each NUL-terminated */
    size_t len, cap;
};

/* A renewal cycle walks d->names, then d->waits, a few slots at a time. */
struct cycle {
    struct dlockd *d;
    int running;
    int again;          /* asked for while running: another cycle follows */
    struct dict *table; /* being walked; NULL when the walk is over */
    size_t cursor;      /* the next slot of table */
    struct batch *b;    /* being filled */
    char lease[24];     /* lock-lease, in ms */
    int inflight;       /* calls not yet answered */
    int sent;           /* calls sent */
    int failed;         /* a call could not be sent, failed or timed out */
    int reassert;       /* write holds back (after a failover) rather than renew them */
    int stale;          /* sent before a failover: what it finds gone proves nothing */
    char **lapsed;      /* of a re-assert cycle: the waits whose queue places are gone */
    size_t nlapsed, caplapsed;
};

/* A hold being written back. */
struct back {
    char *name;
    char hid[HID_MAX + 1];
    char token[TOKEN_MAX];
};

static int reasserting; /* cycles write holds back until one succeeds whole */
static int checking;    /* session records being read before holds are written back */
static int unchecked;   /* one of those reads had no answer: they are made again first */

static struct cycle cycle;

static void fill(struct cycle *cy);

static void batch_free(struct batch *b)
{
    free(b->items);
    free(b->text);
    free(b);
}

/* A wait whose queue place is gone is checked again at once; after a failover, once the cycle
 * is over, in the order the daemon received them, so that they queue again in that order. */
static void lapsed(struct cycle *cy, const char *wid)
{
    if (!cy->reassert) {
        wait_lapsed(cy->d, wid);
        return;
    }
    if (cy->nlapsed == cy->caplapsed) {
        cy->caplapsed = cy->caplapsed ? cy->caplapsed * 2 : 64;
        cy->lapsed = must(realloc(cy->lapsed, cy->caplapsed * sizeof(*cy->lapsed)));
    }
    cy->lapsed[cy->nlapsed++] = must(strdup(wid));
}

/* The sequence number of a wid: "daemon.sequence". */
static unsigned long long wid_seq(const char *wid)
{
    const char *dot = strrchr(wid, '.');

    return dot ? strtoull(dot + 1, NULL, 10) : 0;
}

static int by_arrival(const void *a, const void *b)
{
    unsigned long long x = wid_seq(*(char *const *)a), y = wid_seq(*(char *const *)b);

    return x < y ? -1 : x > y;
}

static void recheck_lapsed(struct cycle *cy)
{
    if (cy->nlapsed == 0)
        return;
    qsort(cy->lapsed, cy->nlapsed, sizeof(*cy->lapsed), by_arrival);
    for (size_t i = 0; i < cy->nlapsed; i++) {
        wait_lapsed(cy->d, cy->lapsed[i]);
        free(cy->lapsed[i]);
    }
    free(cy->lapsed);
    cy->lapsed = NULL;
    cy->nlapsed = cy->caplapsed = 0;
}

static void on_renewed(struct dlockd *d, redisReply *rep, void *arg)
{
    struct batch *b = arg;
    struct cycle *cy = &cycle;

    cy->inflight--;
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY) {
        cy->failed = 1;
    } else if (!cy->stale) {
        long long k;
        d->stats.renewed += (uint64_t)b->n;
        for (size_t j = 0; contract_renew_gone(rep, j, &k) == 0; j++) {
            struct item *it;
            if (k < 0 || k >= b->n)
                continue;
            it = &b->items[k];
            if (b->text[it->token] == '\0')
                lapsed(cy, b->text + it->member + 1);
            else
                hold_lost(d, b->text + it->name, b->text + it->member, b->text + it->token, "backend");
        }
    }
    batch_free(b);
    fill(cy);
}

/* KEYS: the keys of each run of items on one name; ARGV: for each run its
 * length, then the member and lease of each item. */
static void flush(struct cycle *cy)
{
    struct batch *b = cy->b;
    const char **argv;
    char *runs;
    int argc = 0, nkeys;

    if (b == NULL)
        return;
    cy->b = NULL;
    argv = must(malloc((size_t)b->n * (CONTRACT_RENEW_KEYS + 3) * sizeof(*argv)));
    runs = must(malloc((size_t)b->n * 12));
    for (int i = 0; i < b->n; i++) {
        size_t k = b->items[i].keys;
        if (i > 0 && k == b->items[i - 1].keys)
            continue;
        for (int j = 0; j < CONTRACT_RENEW_KEYS; j++, k += strlen(b->text + k) + 1)
            argv[argc++] = b->text + k;
    }
    nkeys = argc;
    for (int i = 0, run; i < b->n; i += run) {
        for (run = 1; i + run < b->n && b->items[i + run].keys == b->items[i].keys; run++)
            ;
        snprintf(runs + 12 * i, 12, "%d", run);
        argv[argc++] = runs + 12 * i;
        for (int j = i; j < i + run; j++) {
            argv[argc++] = b->text + b->items[j].member;
            argv[argc++] = b->text + b->items[j].lease;
        }
    }
    cy->d->stats.renewals++;
    if (redis_script(cy->d->redis, SCRIPT_RENEW, nkeys, argc, argv, on_renewed, NULL, b)) {
        cy->failed = 1;
        cy->table = NULL; /* the link is down: the next cycle renews them */
        batch_free(b);
    } else {
        cy->inflight++;
        cy->sent++;
    }
    free(runs);
    free(argv);
}

/* Appends the concatenation of the strings up to NULL to b's text; returns its offset. */
static size_t put(struct batch *b, ...)
{
    size_t at = b->len;
    const char *str;
    va_list ap;

    va_start(ap, b);
    while ((str = va_arg(ap, const char *)) != NULL) {
        size_t len = strlen(str);
        if (b->len + len + 1 > b->cap) {
            b->cap = (b->len + len + 1) * 2;
            b->text = must(realloc(b->text, b->cap));
        }
        memcpy(b->text + b->len, str, len);
        b->len += len;
    }
    va_end(ap);
    b->text[b->len++] = '\0';
    return at;
}

/* Appends the keys of name to b's text, one after the other; returns the offset of the first. */
static size_t put_keys(struct batch *b, const char *prefix, const char *name)
{
    size_t at = b->len;
    char key[CONTRACT_KEY_MAX];

    for (int j = 0; j < CONTRACT_RENEW_KEYS; j++) {
        contract_key(key, sizeof(key), prefix, name, CONTRACT_RENEW_SUFFIXES[j]);
        put(b, key, (char *)NULL);
    }
    return at;
}

/* Adds a lease to the call being filled; with Redis Cluster a call has the names of one slot. */
static void add(struct cycle *cy, const char *name, const char *pre, const char *member, const char *lease,
                const char *token)
{
    int slot = batch_slot(cy->d, name);
    struct batch *b;
    struct item *it;

    if (cy->b && cy->b->slot != slot)
        flush(cy);
    if (cy->b == NULL)
        cy->b = must(calloc(1, sizeof(*cy->b)));
    b = cy->b;
    b->slot = slot;
    if (b->n == b->room) {
        b->room = b->room ? 2 * b->room : 8;
        b->items = must(realloc(b->items, (size_t)b->room * sizeof(*b->items)));
    }
    it = &b->items[b->n];
    if (b->n > 0 && strcmp(b->text + it[-1].name, name) == 0)
        it->keys = it[-1].keys;
    else
        it->keys = put_keys(b, cy->d->cfg.key_prefix, name);
    it->member = put(b, pre, member, (char *)NULL);
    it->lease = put(b, lease, (char *)NULL);
    it->name = put(b, name, (char *)NULL);
    it->token = put(b, token, (char *)NULL);
    if (++b->n == RENEW_BATCH)
        flush(cy);
}

static void on_reasserted(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct back *bk = arg;
    struct cycle *cy = &cycle;

    cy->inflight--;
    if (rep == NULL || rep->status != CONTRACT_OK)
        cy->failed = 1;
    else if (strcmp(rep->reassert.outcome, "lost") == 0)
        hold_lost(d, bk->name, bk->hid, bk->token, "backend");
    else if (strcmp(rep->reassert.outcome, "restored") == 0)
        log_info("backend: hold of %s written back to the new master (token %s)", bk->name, bk->token);
    free(bk->name);
    free(bk);
    fill(cy);
}

/* Writes h back with a batch operation: one per hold, as rare as failovers. */
static void reassert(struct cycle *cy, const char *name, const struct hold *h, long long ttl)
{
    struct contract_args args;
    struct back *bk = must(calloc(1, sizeof(*bk)));
    long long lease = h->lease ? ttl : cy->d->cfg.lock_lease;

    bk->name = must(strdup(name));
    snprintf(bk->hid, sizeof(bk->hid), "%s", h->hid);
    snprintf(bk->token, sizeof(bk->token), "%llu", h->token);
    contract_reassert_args(&args, bk->hid, bk->token, h->count, ttl, lease, h->lease != NULL, h->s->name);
    if (batch_op(cy->d, OP_REASSERT, BATCH_BOUNDED | BATCH_UNGATED, 1, &name, &args, on_reasserted, NULL, bk)) {
        cy->failed = 1;
        cy->table = NULL;
        free(bk->name);
        free(bk);
        return;
    }
    cy->inflight++;
}

static int add_name(const char *name, void *val, void *arg)
{
    struct cycle *cy = arg;
    struct lname *ln = val;
    struct hold *h;
    uint64_t now = now_ms();

    TAILQ_FOREACH(h, &ln->holds, in_name) {
        char lease[24], token[TOKEN_MAX];
        long long left = session_redis_lease(cy->d, h->s);

        /* A hold with lease= is extended to its end, not beyond. */
        if (h->lease && (long long)(h->lease->dl.when - now) < left) {
            if (h->lease->dl.when <= now)
                continue;
            left = (long long)(h->lease->dl.when - now);
        }
        if (cy->reassert) {
            reassert(cy, name, h, left);
            continue;
        }
        snprintf(token, sizeof(token), "%llu", h->token);
        snprintf(lease, sizeof(lease), "%lld", left);
        add(cy, name, "", h->hid, lease, token);
    }
    return 0;
}

static int add_wait(const char *key, void *val, void *arg)
{
    struct cycle *cy = arg;
    struct wait *w = val;
    long long ends = wait_redis_ends(w);
    char lease[64];

    (void)key;
    if (w->phase != WAIT_QUEUED || w->cancel_until)
        return 0;
    snprintf(lease, sizeof(lease), ends ? "%s/%lld" : "%s", cy->lease, ends);
    for (int i = 0; i < w->nnames; i++)
        add(cy, w->names[i], "@", w->wid, lease, "");
    return 0;
}

/* Only a cycle in which every call succeeded may end jeopardy: a hold in a
 * batch that failed may be gone without anyone knowing. */
static void end(struct cycle *cy)
{
    cy->running = 0;
    log_debug("renew: %d calls%s", cy->sent, cy->failed ? ", some failed" : "");
    recheck_lapsed(cy);
    if (cy->reassert && !cy->failed) {
        reasserting = 0;
        log_notice("backend: every hold of this daemon is on the new master");
        batch_gate_hold(cy->d, 0);
    }
    if (!cy->failed)
        redis_renewed(cy->d->redis);
    if (cy->again)
        renew_now(cy->d);
}

/* Walks on while fewer than RENEW_WINDOW calls are in flight; the cycle ends when all are answered. */
static void fill(struct cycle *cy)
{
    struct dlockd *d = cy->d;
    int window = cy->reassert ? REASSERT_WINDOW : redis_slots(d->redis) > 1 ? RENEW_WINDOW_SLOTS : RENEW_WINDOW;

    while (cy->table && cy->inflight < window) {
        cy->cursor = dict_scan(cy->table, cy->cursor, cy->table == d->names ? add_name : add_wait, cy);
        if (cy->cursor == 0)
            cy->table = cy->table == d->names ? d->waits : NULL;
    }
    if (cy->table == NULL)
        flush(cy);
    if (cy->table == NULL && cy->inflight == 0 && cy->running)
        end(cy);
}

static void on_checked(struct dlockd *d, int answered, void *arg)
{
    (void)arg;
    unchecked |= !answered;
    /* Else the next tick or reconnect reads them again (renew_now). */
    if (--checking == 0 && !unchecked)
        renew_now(d);
}

/* A session that moved to another daemon while this one was cut off from
 * Redis (its M message lost) is still here: its record says so, and it goes
 * before its holds are written back for it, taking them from the other. Only
 * a session with a secret has a record. */
static int check_session(const char *sid, void *val, void *arg)
{
    struct dlockd *d = arg;
    const struct session *s = val;

    if (TAILQ_EMPTY(&s->holds) || !s->has_secret)
        return 0;
    if (d->hooks->check_moved(d, sid, on_checked, NULL) == 0)
        checking++;
    else
        unchecked = 1;
    return 0;
}

/* Reads the records of the sessions with holds; the write-back follows. */
static void check_sessions(struct dlockd *d)
{
    unchecked = 0;
    checking++;
    dict_each(d->sessions, check_session, d);
    on_checked(d, 1, NULL);
}

void renew_now(struct dlockd *d)
{
    struct cycle *cy = &cycle;

    if (cy->running) {
        cy->again = 1;
        return;
    }
    if (!redis_up(d->redis) || checking)
        return;
    if (reasserting && unchecked) { /* after a link that failed meanwhile: the checks again, first */
        check_sessions(d);
        return;
    }
    *cy = (struct cycle){ .d = d, .running = 1, .table = d->names, .reassert = reasserting };
    snprintf(cy->lease, sizeof(cy->lease), "%lld", (long long)d->cfg.lock_lease);
    redis_renewing(d->redis);
    record_renew(d);
    fill(cy);
}

void renew_failover(struct dlockd *d)
{
    struct cycle *cy = &cycle;
    int64_t delay = d->cfg.failover_delay;

    /* By default one lock-lease, and not shorter than another daemon, down meanwhile, may take
     * to reconnect, notice and write its holds back. */
    if (delay == 0)
        delay = d->cfg.lock_lease > redis_notice_ms(d->redis) ? d->cfg.lock_lease : redis_notice_ms(d->redis);

    log_warnx("backend: Redis is another server now (a failover, or a restart): writing holds back, no grants"
              " for %lldms", (long long)delay);
    reasserting = 1;
    batch_gate(d, delay);
    batch_gate_hold(d, 1);
    if (cy->running && !cy->reassert) {
        cy->stale = 1;
        cy->failed = 1;
        cy->table = NULL;
        if (cy->b)
            batch_free(cy->b);
        cy->b = NULL;
    }
    check_sessions(d);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    renew_now(arg);
}

void renew_start(struct dlockd *d)
{
    struct timeval tv;
    int64_t every = d->cfg.lock_lease / 3;

    d->renew_timer = must(event_new(d->base, -1, EV_PERSIST, on_tick, d));
    tv.tv_sec = every / 1000;
    tv.tv_usec = (every % 1000) * 1000;
    evtimer_add(d->renew_timer, &tv);
}
