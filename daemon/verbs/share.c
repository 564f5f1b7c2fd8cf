/* share.c - the verbs that read Redis without changing it (STATUS, LIST,
 * SESSIONS) take turns: at most max-reads run at once on the daemon and
 * max-reads-client on one connection (one client session); the others wait
 * in their connection's FIFO, and the connections with reads waiting are
 * served round robin. A flood of STATUS then puts no more than max-reads
 * operations before a renewal at Redis, and another client's STATUS waits
 * one round at most. */
#include <stdlib.h>

#include <event2/event.h>

#include "conn.h"
#include "hooks.h"
#include "log.h"
#include "share.h"

struct share {
    struct conn_list round; /* connections with a read waiting and room to run one */
    int64_t running;        /* reads admitted and not ended */
    struct event *serve;    /* starts waiting reads, on a later turn of the loop */
};

static void on_serve(evutil_socket_t fd, short what, void *arg);

static struct share *sharer(struct dlockd *d)
{
    struct share *sh = d->share;

    if (sh == NULL) {
        sh = d->share = must(calloc(1, sizeof(*sh)));
        sh->serve = must(event_new(d->base, -1, 0, on_serve, d));
        TAILQ_INIT(&sh->round);
    }
    return sh;
}

/* Puts c at the end of the round when it has a read waiting and room to run it. */
static void enlist(struct conn *c)
{
    struct share *sh = c->d->share;

    if (c->sharing || TAILQ_EMPTY(&c->reads) || c->nreads >= c->d->cfg.max_reads_client)
        return;
    c->sharing = 1;
    TAILQ_INSERT_TAIL(&sh->round, c, share_link);
    event_active(sh->serve, EV_TIMEOUT, 0);
}

static void delist(struct conn *c)
{
    if (!c->sharing)
        return;
    c->sharing = 0;
    TAILQ_REMOVE(&c->d->share->round, c, share_link);
}

static void count_in(struct req *r)
{
    r->share = SHARE_RUNNING;
    r->c->nreads++;
    r->d->share->running++;
}

/* A waiting read's connection closes; after EOF it still runs in its turn, as what was sent before EOF does. */
static void waiting_gone(struct req *r)
{
    struct conn *c = r->c;

    if (c->eof && c->state != CONN_CLOSING)
        return;
    TAILQ_REMOVE(&c->reads, r, share_link);
    r->share = SHARE_NONE;
    if (TAILQ_EMPTY(&c->reads))
        delist(c);
    req_drop(r);
}

/* At QUIT a waiting read keeps its turn: it ends in time, and QUIT waits for it. */
static void waiting_quit(struct req *r)
{
    (void)r;
}

/* Starts the first waiting read of each connection in the round, while max-reads allows. */
static void on_serve(evutil_socket_t fd, short what, void *arg)
{
    struct dlockd *d = arg;
    struct share *sh = d->share;
    struct conn *c;
    struct req *r;

    (void)fd;
    (void)what;
    while (sh->running < d->cfg.max_reads && (c = TAILQ_FIRST(&sh->round)) != NULL) {
        delist(c);
        r = TAILQ_FIRST(&c->reads);
        TAILQ_REMOVE(&c->reads, r, share_link);
        r->gone = NULL;
        r->quit = NULL;
        count_in(r);
        d->hooks->run(r); /* frees no connection: conn_free runs from socket events and reaping only */
        enlist(c);
    }
}

int share_admit(struct req *r)
{
    struct conn *c = r->c;
    struct share *sh = sharer(r->d);

    if (r->share == SHARE_RUNNING || c == NULL)
        return 1;
    if (sh->running < r->d->cfg.max_reads && c->nreads < r->d->cfg.max_reads_client && TAILQ_EMPTY(&c->reads) &&
        TAILQ_EMPTY(&sh->round)) {
        count_in(r);
        return 1;
    }
    r->share = SHARE_WAITING;
    r->gone = waiting_gone;
    r->quit = waiting_quit;
    TAILQ_INSERT_TAIL(&c->reads, r, share_link);
    enlist(c);
    return 0;
}

void share_end(struct req *r)
{
    struct share *sh = r->d->share;

    if (r->share != SHARE_RUNNING || sh == NULL)
        return;
    r->share = SHARE_NONE;
    sh->running--;
    if (r->c) {
        r->c->nreads--;
        enlist(r->c);
    }
    if (!TAILQ_EMPTY(&sh->round))
        event_active(sh->serve, EV_TIMEOUT, 0);
}

void share_close(struct dlockd *d)
{
    if (d->share == NULL)
        return;
    event_free(d->share->serve);
    free(d->share);
    d->share = NULL;
}
