/* latch.c - count-down latches. The count lives in Redis; an AWAIT registers
 * here before it reads the count, and the script that counts down to 0
 * announces it to every daemon, so no awaiter polls or misses the moment. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "conn.h"
#include "dict.h"
#include "dlockd.h"
#include "hold.h"
#include "latch.h"
#include "log.h"
#include "session.h"
#include "wait.h"

#define LATCH_TTL_DEFAULT (24LL * 3600 * 1000)

struct awaiter {
    struct dlockd *d;
    struct req *req;           /* NULL once answered */
    struct awaiters *list;     /* NULL once out of it */
    int reading;               /* the read script is in flight */
    int counted;               /* it counts as a wait of its session and of this daemon */
    char sid[DLOCKD_ID_LEN + 1]; /* its session */
    struct deadline timeout;
    TAILQ_ENTRY(awaiter) link;
};

/* The awaiters of one latch on this daemon. */
struct awaiters {
    struct dlockd *d;
    TAILQ_HEAD(, awaiter) head;
    struct deadline lapse;     /* when the latch's ttl runs out: read it again */
    char name[PROTO_NAME_MAX + 1];
};

static void watch_lapse(struct awaiters *list, long long ttl);

static void on_count(struct dlockd *d, redisReply *rep, void *arg)
{
    struct req *r = arg;
    char buf[32];
    size_t f;

    if (rep == NULL) {
        req_err(r, PROTO_EBACKEND, "Redis did not answer in time");
        return;
    }
    f = wait_apply_grants(d, rep);
    if (strcmp(redis_elem(rep, 0, buf, sizeof(buf)), "WRONGTYPE") == 0)
        req_err(r, PROTO_EWRONGTYPE, "'%s' is in use as another type", r->pr.names[0]);
    else
        req_reply(r, "OK", "count=%lld", redis_elem_int(rep, f));
}

static void latch_op(struct req *r, const char *op, long long n, long long ttl, redis_cb *cb, void *arg)
{
    char nbuf[24], tbuf[24];
    const char *args[] = { op, nbuf, tbuf };

    snprintf(nbuf, sizeof(nbuf), "%lld", n);
    snprintf(tbuf, sizeof(tbuf), "%lld", ttl);
    if (hold_script(r->d, SCRIPT_LATCH, 1, r->pr.names, 3, args, cb, NULL, arg))
        req_err(r, PROTO_EBACKEND, "Redis is not reachable");
}

void latch_create(struct req *r)
{
    latch_op(r, "create", (long long)r->pr.count, (r->pr.has & PROTO_O_TTL) ? (long long)r->pr.ttl_ms : LATCH_TTL_DEFAULT,
             on_count, r);
}

void latch_countdown(struct req *r)
{
    latch_op(r, "countdown", (long long)r->pr.n, 0, on_count, r);
}

/* --- AWAIT */

static void leave_list(struct awaiter *a)
{
    struct awaiters *list = a->list;

    if (list == NULL)
        return;
    TAILQ_REMOVE(&list->head, a, link);
    a->list = NULL;
    if (TAILQ_EMPTY(&list->head)) {
        deadline_cancel(a->d->deadlines, &list->lapse);
        dict_del(a->d->latches, list->name);
        free(list);
    }
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
    finish(r->ctx, NULL);
}

static void on_read(struct dlockd *d, redisReply *rep, void *arg)
{
    struct awaiter *a = arg;
    char buf[32];
    size_t f;

    a->reading = 0;
    if (a->req == NULL) {
        free(a);
        return;
    }
    if (rep == NULL) {
        struct req *r = a->req;
        a->req = NULL;
        r->gone = NULL;
        req_err(r, PROTO_EBACKEND, "Redis did not answer in time");
        finish(a, NULL);
        return;
    }
    f = wait_apply_grants(d, rep);
    if (strcmp(redis_elem(rep, 0, buf, sizeof(buf)), "WRONGTYPE") == 0) {
        struct req *r = a->req;
        a->req = NULL;
        r->gone = NULL;
        req_err(r, PROTO_EWRONGTYPE, "'%s' is in use as another type", r->pr.names[0]);
        finish(a, NULL);
    } else if (redis_elem_int(rep, f) == 0) {
        finish(a, "OK");
    } else if (a->req->pr.wait_ms == 0) {
        finish(a, "TIMEOUT");
    } else {
        watch_lapse(a->list, redis_elem_int(rep, f + 1));
    }
}

static void on_reread(struct dlockd *d, redisReply *rep, void *arg)
{
    char *name = arg;
    struct awaiters *list = dict_get(d->latches, name);

    if (rep && list) {
        size_t f = wait_apply_grants(d, rep);
        if (redis_elem_int(rep, f) == 0)
            latch_on_message(d, name);
        else
            watch_lapse(list, redis_elem_int(rep, f + 1));
    }
    free(name);
}

/* The latch's ttl ran out while awaiters wait here: a latch that is gone releases them. */
static void on_lapse(struct deadline *dl)
{
    struct awaiters *list = container_of(dl, struct awaiters, lapse);
    const char *names[] = { list->name };
    char *name = strdup(list->name);

    if (name == NULL)
        fatalx("latch: out of memory");
    if (hold_script(list->d, SCRIPT_LATCH, 1, names, 3, (const char *[]){ "read", "0", "0" }, on_reread, NULL, name))
        free(name);
}

static void watch_lapse(struct awaiters *list, long long ttl)
{
    if (list && ttl >= 0)
        deadline_arm(list->d->deadlines, &list->lapse, now_ms() + (uint64_t)ttl + 1);
}

void latch_await(struct req *r)
{
    struct dlockd *d = r->d;
    const char *name = r->pr.names[0];
    struct awaiters *list = dict_get(d->latches, name);
    struct awaiter *a;

    if (wait_within_limits(r, req_session(r)))
        return;
    if ((a = calloc(1, sizeof(*a))) == NULL)
        fatalx("latch: out of memory");
    if (list == NULL) {
        if ((list = calloc(1, sizeof(*list))) == NULL)
            fatalx("latch: out of memory");
        list->d = d;
        TAILQ_INIT(&list->head);
        deadline_init(&list->lapse, on_lapse);
        snprintf(list->name, sizeof(list->name), "%s", name);
        dict_set(d->latches, name, list);
    }
    a->d = d;
    a->req = r;
    a->list = list;
    a->reading = 1;
    memcpy(a->sid, r->sid, sizeof(a->sid));
    if (r->pr.wait_ms != 0)
        count_wait(a, 1);
    TAILQ_INSERT_TAIL(&list->head, a, link);
    deadline_init(&a->timeout, on_timeout);
    if (r->pr.wait_ms > 0)
        deadline_arm(d->deadlines, &a->timeout, r->arrived + (uint64_t)r->pr.wait_ms);
    r->gone = on_gone;
    r->ctx = a;
    /* Registered first: a count that reaches 0 after the read is announced to us. */
    if (hold_script(d, SCRIPT_LATCH, 1, r->pr.names, 3, (const char *[]){ "read", "0", "0" }, on_read, NULL, a)) {
        a->reading = 0;
        r->gone = NULL;
        a->req = NULL;
        req_err(r, PROTO_EBACKEND, "Redis is not reachable");
        finish(a, NULL);
    }
}

void latch_on_message(struct dlockd *d, const char *name)
{
    struct awaiters *list = dict_get(d->latches, name);
    struct awaiter *a;

    while (list && (a = TAILQ_FIRST(&list->head)) != NULL) {
        int last = TAILQ_NEXT(a, link) == NULL;
        finish(a, "OK");
        if (last)
            break; /* the list is freed with its last awaiter */
    }
}
