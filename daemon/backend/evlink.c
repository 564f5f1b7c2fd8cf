/* evlink.c - hiredis's async context on libevent. The adapter hiredis 0.14
 * ships re-adds a one-shot read event after every reply and waits for
 * EPOLLOUT before every command it writes: two or three epoll_ctl per
 * command. Here the read event persists, and commands queued while the loop
 * runs are written at the end of its turn, at once, in one write. */
#include <stdlib.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "evlink.h"
#include "log.h"

struct evlink {
    redisAsyncContext *ac;
    struct event *rev;   /* persistent: added until hiredis deletes it */
    struct event *wev;   /* until connected, and when the socket is full */
    struct event *flush; /* writes what the turn queued, at its end */
    int flushing;        /* writing: one that does not finish waits for wev */
};

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    redisAsyncHandleRead(((struct evlink *)arg)->ac);
}

/* Writes what hiredis has queued (or finishes connecting): a write the
 * socket does not take whole goes on when it is writable again. */
static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct evlink *l = arg;

    (void)fd;
    (void)what;
    l->flushing = 1;
    redisAsyncHandleWrite(l->ac); /* may free l: nothing after it */
}

static void add_read(void *arg)
{
    struct evlink *l = arg;

    if (!event_pending(l->rev, EV_READ, NULL))
        event_add(l->rev, NULL);
}

static void del_read(void *arg)
{
    event_del(((struct evlink *)arg)->rev);
}

static void add_write(void *arg)
{
    struct evlink *l = arg;

    /* Before the connection is up only writability tells that it is; after
     * a write the socket did not take whole, only writability says when to go on. */
    if (!(l->ac->c.flags & REDIS_CONNECTED) || l->flushing) {
        l->flushing = 0;
        event_add(l->wev, NULL);
    } else if (!event_pending(l->wev, EV_WRITE, NULL)) {
        event_active(l->flush, EV_TIMEOUT, 0);
    }
}

static void del_write(void *arg)
{
    struct evlink *l = arg;

    l->flushing = 0;
    event_del(l->wev);
    event_del(l->flush);
}

static void cleanup(void *arg)
{
    struct evlink *l = arg;

    event_free(l->rev);
    event_free(l->wev);
    event_free(l->flush);
    free(l);
}

int evlink_attach(redisAsyncContext *ac, struct event_base *base)
{
    struct evlink *l;
    int fd = ac->c.fd;

    if (ac->ev.data != NULL)
        return -1;
    l = must(calloc(1, sizeof(*l)));
    l->rev = must(event_new(base, fd, EV_READ | EV_PERSIST, on_read, l));
    l->wev = must(event_new(base, fd, EV_WRITE, on_write, l));
    l->flush = must(event_new(base, -1, 0, on_write, l));
    l->ac = ac;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    ac->ev.data = l;
    event_add(l->rev, NULL);
    event_add(l->wev, NULL); /* the connect's end */
    return 0;
}
