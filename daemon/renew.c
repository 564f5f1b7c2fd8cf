/* renew.c - every lock-lease/3 one task extends the Redis lease of every hold
 * and queue entry of this daemon, many per script call; what it finds gone is
 * reported lost (holds) or checked again (waits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "dict.h"
#include "dlockd.h"
#include "hold.h"
#include "wait.h"
#include "log.h"
#include "redis.h"
#include "renew.h"
#include "session.h"

#define RENEW_BATCH 200 /* leases per script call */

struct item {
    char ref[PROTO_NAME_MAX + HID_MAX + 2]; /* hold key, or wid */
    char token[24];                          /* of a hold; "" for a wait */
};

struct batch {
    struct dlockd *d;
    int n;
    char keys[RENEW_BATCH][KEY_MAX];
    char members[RENEW_BATCH][HID_MAX + 2];
    char leases[RENEW_BATCH][24];
    struct item items[RENEW_BATCH];
};

struct cycle {
    struct dlockd *d;
    struct batch *b; /* being filled */
    int sent;        /* calls sent */
    int failed;      /* a call could not be sent */
};

static int inflight; /* renew calls not yet answered */

static void on_renewed(struct dlockd *d, redisReply *rep, void *arg)
{
    struct batch *b = arg;

    inflight--;
    if (rep) {
        d->stats.renewed += (uint64_t)b->n;
        for (size_t i = 0; i + 1 < rep->elements; i += 2) {
            long long k = redis_elem_int(rep, i) - 1;
            struct item *it = &b->items[k];
            struct hold *h;
            if (k < 0 || k >= b->n)
                continue;
            if (it->token[0] == '\0')
                wait_lapsed(d, it->ref);
            else if ((h = dict_get(d->holds, it->ref)) != NULL && strcmp(h->token, it->token) == 0)
                hold_lost(d, it->ref, "backend");
        }
        if (inflight == 0)
            redis_renewed(d->redis);
    }
    free(b);
}

static void flush(struct cycle *cy)
{
    struct batch *b = cy->b;
    const char *argv[RENEW_BATCH * 4];
    char one[] = "1";
    int argc = 0;

    if (b == NULL || b->n == 0)
        return;
    cy->b = NULL;
    for (int i = 0; i < b->n; i++)
        argv[argc++] = b->keys[i];
    for (int i = 0; i < b->n; i++) {
        argv[argc++] = one;
        argv[argc++] = b->members[i];
        argv[argc++] = b->leases[i];
    }
    cy->d->stats.renewals++;
    if (redis_script(cy->d->redis, SCRIPT_RENEW, b->n, argc, argv, on_renewed, NULL, b)) {
        cy->failed = 1;
        free(b);
        return;
    }
    inflight++;
    cy->sent++;
}

static void add(struct cycle *cy, const char *name, const char *member, int64_t lease, const char *ref,
                const char *token)
{
    char keys[NAME_KEYS][KEY_MAX];
    struct batch *b;
    int i;

    if (cy->b == NULL && (cy->b = calloc(1, sizeof(*cy->b))) == NULL)
        fatalx("renew: out of memory");
    b = cy->b;
    i = b->n++;
    hold_keys(cy->d, name, keys);
    memcpy(b->keys[i], keys[1], KEY_MAX);
    snprintf(b->members[i], sizeof(b->members[i]), "%s", member);
    snprintf(b->leases[i], sizeof(b->leases[i]), "%lld", (long long)lease);
    snprintf(b->items[i].ref, sizeof(b->items[i].ref), "%s", ref);
    snprintf(b->items[i].token, sizeof(b->items[i].token), "%s", token);
    if (b->n == RENEW_BATCH)
        flush(cy);
}

static int add_hold(const char *key, void *val, void *arg)
{
    struct cycle *cy = arg;
    struct hold *h = val;
    int64_t lease = cy->d->cfg.lock_lease;

    if (h->lease_end) {
        uint64_t now = now_ms();
        if (h->lease_end <= now)
            return 0;
        if ((int64_t)(h->lease_end - now) < lease)
            lease = (int64_t)(h->lease_end - now);
    }
    add(cy, h->name, h->hid, lease, key, h->token);
    return 0;
}

static int add_wait(const char *key, void *val, void *arg)
{
    struct cycle *cy = arg;
    struct wait *w = val;
    char member[HID_MAX + 2];

    if (!w->queued || w->cancelling)
        return 0;
    snprintf(member, sizeof(member), "@%s", w->wid);
    for (int i = 0; i < w->nnames; i++)
        add(cy, w->names[i], member, cy->d->cfg.lock_lease, key, "");
    return 0;
}

void renew_now(struct dlockd *d)
{
    struct cycle cy = { d, NULL, 0, 0 };

    if (!redis_up(d->redis) || inflight > 0)
        return;
    dict_each(d->holds, add_hold, &cy);
    dict_each(d->waits, add_wait, &cy);
    flush(&cy);
    if (cy.sent == 0 && !cy.failed)
        redis_renewed(d->redis);
    log_debug("renew: %d calls", cy.sent);
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

    d->renew_timer = event_new(d->base, -1, EV_PERSIST, on_tick, d);
    if (d->renew_timer == NULL)
        fatalx("renew: out of memory");
    tv.tv_sec = every / 1000;
    tv.tv_usec = (every % 1000) * 1000;
    evtimer_add(d->renew_timer, &tv);
}
