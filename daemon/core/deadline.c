/* deadline.c - session expiry, wait timeouts, leases and Redis call timeouts share
 * one binary min-heap, and one libevent timer is armed at its earliest entry. */
#include <stdlib.h>
#include <time.h>

#include <event2/event.h>

#include "deadline.h"
#include "log.h"

struct deadlines {
    struct deadline **heap; /* min-heap on when */
    size_t n;               /* entries in heap */
    size_t cap;             /* allocated entries */
    struct event *timer;    /* armed at heap[0]->when */
    uint64_t armed_at;      /* when the timer is armed for; 0 when not */
};

uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void heap_set(struct deadlines *dls, size_t i, struct deadline *dl)
{
    dls->heap[i] = dl;
    dl->slot = i;
}

static void sift_up(struct deadlines *dls, size_t i)
{
    struct deadline *dl = dls->heap[i];

    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (dls->heap[parent]->when <= dl->when)
            break;
        heap_set(dls, i, dls->heap[parent]);
        i = parent;
    }
    heap_set(dls, i, dl);
}

static void sift_down(struct deadlines *dls, size_t i)
{
    struct deadline *dl = dls->heap[i];

    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= dls->n)
            break;
        if (child + 1 < dls->n && dls->heap[child + 1]->when < dls->heap[child]->when)
            child++;
        if (dl->when <= dls->heap[child]->when)
            break;
        heap_set(dls, i, dls->heap[child]);
        i = child;
    }
    heap_set(dls, i, dl);
}

static void rearm(struct deadlines *dls)
{
    uint64_t when, now;
    struct timeval tv;

    if (dls->n == 0) {
        if (dls->armed_at)
            evtimer_del(dls->timer);
        dls->armed_at = 0;
        return;
    }
    when = dls->heap[0]->when;
    if (dls->armed_at == when)
        return;
    now = now_ms();
    when = when > now ? when - now : 0;
    tv.tv_sec = (time_t)(when / 1000);
    tv.tv_usec = (suseconds_t)(when % 1000) * 1000;
    evtimer_add(dls->timer, &tv);
    dls->armed_at = dls->heap[0]->when;
}

static void remove_at(struct deadlines *dls, size_t i)
{
    struct deadline *last = dls->heap[--dls->n];

    dls->heap[i]->slot = DEADLINE_IDLE;
    if (i == dls->n)
        return;
    heap_set(dls, i, last);
    sift_down(dls, i);
    sift_up(dls, last->slot);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct deadlines *dls = arg;
    uint64_t now = now_ms();

    (void)fd;
    (void)what;
    dls->armed_at = 0;
    while (dls->n > 0 && dls->heap[0]->when <= now) {
        struct deadline *dl = dls->heap[0];
        remove_at(dls, 0);
        dl->fire(dl);
    }
    rearm(dls);
}

uint64_t now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

struct deadlines *deadlines_new(struct event_base *base)
{
    struct deadlines *dls = must(calloc(1, sizeof(*dls)));

    dls->timer = must(evtimer_new(base, on_timer, dls));
    return dls;
}

void deadlines_free(struct deadlines *dls)
{
    event_free(dls->timer);
    free(dls->heap);
    free(dls);
}

void deadline_init(struct deadline *dl, deadline_fn *fire)
{
    dl->when = 0;
    dl->slot = DEADLINE_IDLE;
    dl->fire = fire;
}

void deadline_arm(struct deadlines *dls, struct deadline *dl, uint64_t when)
{
    if (dl->slot != DEADLINE_IDLE)
        remove_at(dls, dl->slot);
    if (dls->n == dls->cap) {
        dls->cap = dls->cap ? dls->cap * 2 : 64;
        dls->heap = must(realloc(dls->heap, dls->cap * sizeof(*dls->heap)));
    }
    dl->when = when;
    heap_set(dls, dls->n++, dl);
    sift_up(dls, dl->slot);
    rearm(dls);
}

void deadline_cancel(struct deadlines *dls, struct deadline *dl)
{
    if (dl->slot == DEADLINE_IDLE)
        return;
    remove_at(dls, dl->slot);
    rearm(dls);
}

int deadline_armed(const struct deadline *dl)
{
    return dl->slot != DEADLINE_IDLE;
}

size_t deadlines_count(const struct deadlines *dls)
{
    return dls->n;
}
