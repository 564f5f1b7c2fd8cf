/* reqid.c - a request with id= that is repeated on its session (its reply was
 * lost with a connection) gets the first reply again instead of acting twice. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "dict.h"
#include "hold.h"
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
    if (rec->body) {
        TAILQ_REMOVE(&s->idlist, rec, link);
        TAILQ_REMOVE(&s->d->ids, rec, dlink);
        s->nids--;
        s->d->nids--;
    }
    dict_del(s->ids, rec->id); /* last: it frees the key that rec->id points to */
    free(rec->body);
    free(rec);
}

/* Forgets the replies older than REQID_KEEP_MS, of every session. */
static void expire(struct dlockd *d)
{
    uint64_t now = now_ms();
    struct idrec *rec;

    while ((rec = TAILQ_FIRST(&d->ids)) != NULL && now - rec->at > REQID_KEEP_MS)
        rec_free(rec);
}

/* The next token of a "1,2,3" list at *p into *v; 0, or -1 when there is none. */
static int next_token(const char **p, unsigned long long *v)
{
    char *end;

    if (**p < '0' || **p > '9')
        return -1;
    *v = strtoull(*p, &end, 10);
    *p = *end == ',' ? end + 1 : end;
    return 0;
}

/* 1 while the session has every hold a remembered grant made, with the token it gave. */
static int still_held(const struct idrec *rec)
{
    const char *t = strstr(rec->body, " token="), *name = rec->names;
    unsigned long long token;

    if (t == NULL && (t = strstr(rec->body, " tokens=")) == NULL)
        return 0;
    t = strchr(t, '=') + 1;
    for (int i = 0; i < rec->nnames; i++, name += strlen(name) + 1) {
        struct hold *h = hold_find(rec->s->d, name, rec->hid);

        if (next_token(&t, &token) < 0 || h == NULL || h->token != token)
            return 0;
    }
    return 1;
}

static void retry_gone(struct req *r)
{
    struct idrec *rec = r->ctx;

    /* After EOF what was sent is still answered: a repeat of a request on the same
     * connection gets its reply, or is dropped with it (reqid_dropped). */
    if (r->c && r->c->eof && r->c->state != CONN_CLOSING && rec->owner && rec->owner->c == r->c)
        return;
    TAILQ_REMOVE(&rec->retries, r, idlink);
    req_drop(r);
}

int reqid_begin(struct req *r, struct session *s)
{
    struct idrec *rec;

    if (TAILQ_EMPTY(&s->d->ids))
        TAILQ_INIT(&s->d->ids); /* struct dlockd starts zeroed */
    expire(s->d);
    if (s->ids == NULL)
        s->ids = dict_new();
    if ((rec = dict_get(s->ids, r->pr.id)) != NULL && rec->hid && !still_held(rec)) {
        /* Replaying its token would hand out a hold that is gone, maybe someone else's now. */
        log_debug("s%s: id '%s': the hold it granted has ended, it runs again", s->id, rec->id);
        rec_free(rec);
        rec = NULL;
    }
    if (rec != NULL) {
        if (rec->body) {
            req_send(r, rec->body);
        } else {
            TAILQ_INSERT_TAIL(&rec->retries, r, idlink);
            r->gone = retry_gone;
            r->ctx = rec;
        }
        return 1;
    }
    rec = must(calloc(1, sizeof(*rec)));
    rec->s = s;
    rec->id = dict_set(s->ids, r->pr.id, rec);
    TAILQ_INIT(&rec->retries);
    r->idrec = rec;
    rec->owner = r;
    return 0;
}

/*
 * Keeps body and, for a grant, the hold and names it is checked by (see
 * still_held), in one allocation. The hold id is made as wait_new makes it.
 */
static void keep_reply(struct idrec *rec, const struct req *r, const char *body)
{
    const struct proto_req *pr = &r->pr;
    int grant = (pr->verb == VERB_LOCK || pr->verb == VERB_ACQUIRE) && strncmp(body, "OK ", 3) == 0;
    char hid[HID_MAX + 1], *p;
    size_t size = strlen(body) + 1;

    if (grant) {
        snprintf(hid, sizeof(hid), "%c%s:%s",
                 pr->verb == VERB_ACQUIRE ? 'p' : (pr->flags & PROTO_F_SHARED) ? 's' : 'x', rec->s->id, pr->owner);
        size += strlen(hid) + 1;
        for (int i = 0; i < pr->nnames; i++)
            size += strlen(pr->names[i]) + 1;
    }
    rec->body = must(malloc(size));
    p = stpcpy(rec->body, body) + 1;
    if (!grant)
        return;
    rec->hid = p;
    p = stpcpy(p, hid) + 1;
    rec->names = p;
    rec->nnames = pr->nnames;
    for (int i = 0; i < pr->nnames; i++)
        p = stpcpy(p, pr->names[i]) + 1;
}

/* Forgets the oldest replies beyond max-ids of s and max-ids-total. */
static void forget_over(struct session *s)
{
    struct dlockd *d = s->d;

    while (s->nids > d->cfg.max_ids)
        rec_free(TAILQ_FIRST(&s->idlist));
    while (d->nids > d->cfg.max_ids_total)
        rec_free(TAILQ_FIRST(&d->ids));
}

void reqid_answered(struct req *r, const char *body)
{
    struct idrec *rec = r->idrec;
    struct session *s = rec->s;
    struct req *retry;

    r->idrec = NULL;
    rec->owner = NULL;
    keep_reply(rec, r, body);
    rec->at = now_ms();
    TAILQ_INSERT_TAIL(&s->idlist, rec, link);
    TAILQ_INSERT_TAIL(&s->d->ids, rec, dlink);
    s->nids++;
    s->d->nids++;
    while ((retry = TAILQ_FIRST(&rec->retries)) != NULL) {
        TAILQ_REMOVE(&rec->retries, retry, idlink);
        retry->gone = NULL;
        req_send(retry, body);
    }
    forget_over(s);
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

static int free_one(const char *key, void *val, void *arg)
{
    (void)key;
    (void)arg;
    rec_free(val);
    return 0;
}

void reqid_free_session(struct session *s)
{
    if (s->ids == NULL)
        return;
    dict_each(s->ids, free_one, NULL);
    dict_free(s->ids);
    s->ids = NULL;
}
