/* reqid.c - a request with id= that is repeated on its session (its reply was
 * lost with a connection) gets the first reply again instead of acting twice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "dict.h"
#include "log.h"
#include "reqid.h"
#include "session.h"

static void rec_free(struct idrec *rec)
{
    struct session *s = rec->s;
    struct req *r;

    if (rec->owner)
        rec->owner->idrec = NULL;
    while ((r = TAILQ_FIRST(&rec->retries)) != NULL) {
        TAILQ_REMOVE(&rec->retries, r, idlink);
        r->gone = NULL;
        req_err(r, PROTO_ENOSESSION, "session ended");
    }
    dict_del(s->ids, rec->id);
    TAILQ_REMOVE(&s->idlist, rec, link);
    s->nids--;
    free(rec->body);
    free(rec);
}

/* Forgets answered ids past the age or count limit, oldest first. */
static void expire(struct session *s)
{
    uint64_t now = now_ms();
    struct idrec *rec, *next;

    for (rec = TAILQ_FIRST(&s->idlist); rec != NULL; rec = next) {
        next = TAILQ_NEXT(rec, link);
        if (rec->body && (s->nids > REQID_KEEP || now - rec->at > REQID_KEEP_MS))
            rec_free(rec);
        else if (rec->body)
            break;
    }
}

static void retry_gone(struct req *r)
{
    struct idrec *rec = r->ctx;

    TAILQ_REMOVE(&rec->retries, r, idlink);
    req_drop(r);
}

int reqid_begin(struct req *r, struct session *s)
{
    struct idrec *rec;

    expire(s);
    if (s->ids == NULL)
        s->ids = dict_new();
    if ((rec = dict_get(s->ids, r->pr.id)) != NULL) {
        if (rec->body) {
            req_send(r, rec->body);
        } else {
            TAILQ_INSERT_TAIL(&rec->retries, r, idlink);
            r->gone = retry_gone;
            r->ctx = rec;
        }
        return 1;
    }
    if ((rec = calloc(1, sizeof(*rec))) == NULL)
        fatalx("reqid: out of memory");
    rec->s = s;
    snprintf(rec->id, sizeof(rec->id), "%s", r->pr.id);
    TAILQ_INIT(&rec->retries);
    TAILQ_INSERT_TAIL(&s->idlist, rec, link);
    dict_set(s->ids, rec->id, rec);
    s->nids++;
    r->idrec = rec;
    rec->owner = r;
    return 0;
}

void reqid_answered(struct req *r, const char *body)
{
    struct idrec *rec = r->idrec;
    struct req *retry;

    r->idrec = NULL;
    rec->owner = NULL;
    if ((rec->body = strdup(body)) == NULL)
        fatalx("reqid: out of memory");
    rec->at = now_ms();
    while ((retry = TAILQ_FIRST(&rec->retries)) != NULL) {
        TAILQ_REMOVE(&rec->retries, retry, idlink);
        retry->gone = NULL;
        req_send(retry, body);
    }
}

void reqid_dropped(struct req *r)
{
    struct idrec *rec = r->idrec;
    struct req *retry;

    r->idrec = NULL;
    rec->owner = NULL;
    while ((retry = TAILQ_FIRST(&rec->retries)) != NULL) {
        TAILQ_REMOVE(&rec->retries, retry, idlink);
        retry->gone = NULL;
        /* The first repeat that can start takes over the id; the others wait for it. */
        if (req_start_soon(retry) == 0) {
            retry->idrec = rec;
            rec->owner = retry;
            return;
        }
        req_drop(retry); /* its connection is going: nothing starts there */
    }
    rec_free(rec);
}

void reqid_free_session(struct session *s)
{
    struct idrec *rec;

    while ((rec = TAILQ_FIRST(&s->idlist)) != NULL)
        rec_free(rec);
    if (s->ids)
        dict_free(s->ids);
    s->ids = NULL;
}
