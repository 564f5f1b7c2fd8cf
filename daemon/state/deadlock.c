/* deadlock.c - finds a cycle in the wait-for graph before a request waits:
 * an edge runs from a waiting owner to every local owner holding a name it
 * waits for in a conflicting mode. */
#include <stdlib.h>
#include <string.h>

#include "deadlock.h"
#include "dict.h"
#include "dlockd.h"
#include "hold.h"
#include "log.h"

/* An owner with LOCK waits: a node of the graph with edges out. */
struct waiter {
    const char *who;       /* session:owner, the index's copy */
    struct waiter *next;   /* the search queue */
    uint64_t visit;        /* the search that last reached it */
    int n, cap;            /* waits in waits, slots */
    const struct deadlock_edges **waits; /* its LOCK waits */
};

struct deadlock {
    struct dict *waiters;  /* session:owner -> struct waiter */
    uint64_t visit;        /* numbers the searches */
};

/* One search: a breadth-first walk from the requester. */
struct search {
    struct dlockd *d;
    const char *target;    /* the requester, session:owner */
    struct waiter *head, *tail; /* owners reached whose edges are still to follow */
    int left;              /* names and holds it may still look at */
};

struct deadlock *deadlock_new(void)
{
    struct deadlock *g = must(calloc(1, sizeof(*g)));

    g->waiters = dict_new();
    return g;
}

static int free_waiter(const char *key, void *val, void *arg)
{
    struct waiter *o = val;

    (void)key;
    (void)arg;
    free(o->waits);
    free(o);
    return 0;
}

void deadlock_free(struct deadlock *g)
{
    if (g == NULL)
        return;
    dict_each(g->waiters, free_waiter, NULL);
    dict_free(g->waiters);
    free(g);
}

void deadlock_add(struct dlockd *d, const struct deadlock_edges *w)
{
    struct waiter *o;

    if ((o = dict_get(d->deadlock->waiters, w->hid + 1)) == NULL) {
        o = must(calloc(1, sizeof(*o)));
        o->who = dict_set(d->deadlock->waiters, w->hid + 1, o);
    }
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 1;
        o->waits = must(realloc(o->waits, (size_t)o->cap * sizeof(*o->waits)));
    }
    o->waits[o->n++] = w;
}

void deadlock_remove(struct dlockd *d, const struct deadlock_edges *w)
{
    struct waiter *o;
    int i;

    if ((o = dict_get(d->deadlock->waiters, w->hid + 1)) == NULL)
        return;
    for (i = 0; i < o->n && o->waits[i] != w; i++)
        ;
    if (i == o->n)
        return;
    o->waits[i] = o->waits[--o->n];
    if (o->n == 0) {
        dict_del(d->deadlock->waiters, w->hid + 1);
        free_waiter(NULL, o, NULL);
    }
}

/* 1 when hold h keeps who from holding its name in mode. */
static int blocks(const struct hold *h, const char *who, char mode)
{
    if (h->hid[0] == 'p' || strcmp(h->hid + 1, who) == 0)
        return 0;
    return mode == 'x' || h->hid[0] == 'x';
}

/* Queues o, reached for the first time in this search. */
static void enqueue(struct search *sr, struct waiter *o)
{
    o->visit = sr->d->deadlock->visit;
    o->next = NULL;
    if (sr->tail)
        sr->tail->next = o;
    else
        sr->head = o;
    sr->tail = o;
}

/* Follows the edges of who waiting for names in mode: 1 when one reaches
 * the target, -1 when the budget ran out, else 0 (owners reached for the
 * first time are queued). */
static int follow(struct search *sr, const char *who, char mode, int nnames, const char *const *names)
{
    struct deadlock *g = sr->d->deadlock;

    for (int i = 0; i < nnames; i++) {
        struct lname *ln = hold_name(sr->d, names[i]);
        struct hold *h;

        if (--sr->left < 0)
            return -1;
        if (ln == NULL)
            continue;
        TAILQ_FOREACH(h, &ln->holds, in_name) {
            struct waiter *o;

            if (--sr->left < 0)
                return -1;
            if (!blocks(h, who, mode))
                continue;
            if (strcmp(h->hid + 1, sr->target) == 0)
                return 1;
            if ((o = dict_get(g->waiters, h->hid + 1)) != NULL && o->visit != g->visit)
                enqueue(sr, o);
        }
    }
    return 0;
}

/* Follows the edges of the next queued owner. Returns as follow() does. */
static int step(struct search *sr)
{
    struct waiter *o = sr->head;
    int found = 0;

    if ((sr->head = o->next) == NULL)
        sr->tail = NULL;
    for (int i = 0; i < o->n && found == 0; i++) {
        const struct deadlock_edges *w = o->waits[i];
        found = follow(sr, o->who, w->hid[0], w->nnames, w->names);
    }
    return found;
}

int deadlock_check(struct dlockd *d, const char *who, char mode, int nnames, const char *const *names)
{
    struct search sr = { d, who, NULL, NULL, DEADLOCK_BUDGET };
    int found;

    d->deadlock->visit++;
    found = follow(&sr, who, mode, nnames, names);
    while (found == 0 && sr.head)
        found = step(&sr);
    if (found < 0)
        log_debug("deadlock: %s: search stopped after %d steps; waiting unchecked", who, DEADLOCK_BUDGET);
    return found > 0;
}
