/* req.c - libdlock requests: queue, send, wait, and turn replies into results and hold-table updates.
 *
 * Every request is tagged, and LOCK, UNLOCK, ACQUIRE and RELEASE also carry
 * id=<tag>. A request that was on its way when the connection broke is sent
 * again, with the same id, once the session is resumed: the server answers a
 * repeated id with the first reply instead of acting twice. A grant whose
 * caller gave up waiting is given back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct dl_req *req_new(enum dl_kind kind, const char *body, long long wait_ms)
{
    struct dl_req *r = calloc(1, sizeof(*r));

    if (r == NULL)
        return NULL;
    if ((r->body = strdup(body)) == NULL || dl_cond_init(&r->cv) < 0) {
        free(r->body);
        free(r);
        return NULL;
    }
    r->kind = kind;
    r->wait_ms = wait_ms;
    r->free_permits = -1;
    return r;
}

void req_free(struct dl_req *r)
{
    if (r == NULL)
        return;
    for (int i = 0; i < r->nnames; i++)
        free(r->names[i]);
    free(r->body);
    free(r->json);
    pthread_cond_destroy(&r->cv);
    free(r);
}

int req_set_subject(struct dl_req *r, const char *const *names, int n, const char *owner)
{
    for (int i = 0; i < n; i++) {
        if ((r->names[i] = strdup(names[i])) == NULL)
            return -1;
        r->nnames = i + 1;
    }
    snprintf(r->owner, sizeof(r->owner), "%s", owner ? owner : "");
    return 0;
}

static void req_link(struct dlock *h, struct dl_req *r)
{
    r->prev = NULL;
    r->next = h->reqs;
    if (h->reqs)
        h->reqs->prev = r;
    h->reqs = r;
}

static void req_unlink(struct dlock *h, struct dl_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else if (h->reqs == r)
        h->reqs = r->next;
    else
        return; /* not linked */
    if (r->next)
        r->next->prev = r->prev;
    r->next = r->prev = NULL;
}

struct dl_req *req_find(struct dlock *h, const char *tag)
{
    for (struct dl_req *r = h->reqs; r; r = r->next)
        if (strcmp(r->tag, tag) == 0)
            return r;
    return NULL;
}

/* Verbs whose repeats the server recognises by id=. */
static int has_id(enum dl_kind kind)
{
    return kind == K_LOCK || kind == K_UNLOCK || kind == K_ACQUIRE || kind == K_RELEASE;
}

void req_send(struct dlock *h, struct dl_req *r)
{
    char line[DL_LINE_MAX + 96], id[40] = "";
    int n;

    r->sent_wait = r->wait_ms;
    if (r->wait_ms > 0) {
        int64_t left = r->wait_ms - (dl_now() - r->started);
        r->sent_wait = left > 0 ? left : 0;
    }
    if (has_id(r->kind))
        snprintf(id, sizeof(id), " id=%s", r->tag);
    if (r->wait_ms == DL_NO_WAIT)
        n = snprintf(line, sizeof(line), "#%s %s%s\n", r->tag, r->body, id);
    else if (r->wait_ms == DLOCK_WAIT_INF)
        n = snprintf(line, sizeof(line), "#%s %s%s wait=inf\n", r->tag, r->body, id);
    else
        n = snprintf(line, sizeof(line), "#%s %s%s wait=%lld\n", r->tag, r->body, id, r->sent_wait);
    if (n < 0 || (size_t)n >= sizeof(line) || io_queue(h, line, (size_t)n) < 0) {
        req_finish(h, r, n < 0 || (size_t)n >= sizeof(line) ? DLOCK_ERR_TOOBIG : DLOCK_ERR_NOMEM);
        return;
    }
    r->gen = h->gen;
    io_wake(h);
}

void req_submit(struct dlock *h, struct dl_req *r)
{
    snprintf(r->tag, sizeof(r->tag), "c%llu", (unsigned long long)++h->seq);
    r->started = dl_now();
    if (r->deadline == 0)
        r->deadline = r->wait_ms == DLOCK_WAIT_INF ? DL_INF
                                                   : r->started + (r->wait_ms > 0 ? r->wait_ms : 0) + h->opt.request_ms;
    req_link(h, r);
    if (h->up)
        req_send(h, r);
}

int req_wait(struct dlock *h, struct dl_req *r)
{
    struct timespec ts;

    while (!r->done) {
        if (r->deadline == DL_INF) {
            pthread_cond_wait(&r->cv, &h->mu);
            continue;
        }
        dl_deadline_ts(r->deadline, &ts);
        if (pthread_cond_timedwait(&r->cv, &h->mu, &ts) == ETIMEDOUT && !r->done) {
            if (r->gen != 0)
                r->abandoned = 1; /* the I/O thread takes it over, and undoes a late grant */
            else
                req_unlink(h, r);
            return DLOCK_ERR_CONN;
        }
    }
    return r->rc;
}

void req_finish(struct dlock *h, struct dl_req *r, int rc)
{
    req_unlink(h, r);
    r->rc = rc;
    r->done = 1;
    r->gen = 0;
    if (r->abandoned || r->internal)
        req_free(r);
    else
        pthread_cond_signal(&r->cv);
}

/* Status of a reply as a result code. */
static int reply_rc(const struct proto_reply *rp)
{
    if (strcmp(rp->status, "OK") == 0)
        return 0;
    if (strcmp(rp->status, "BUSY") == 0)
        return DLOCK_ERR_BUSY;
    if (strcmp(rp->status, "TIMEOUT") == 0)
        return DLOCK_ERR_TIMEOUT;
    return dl_err_from_proto(rp->err);
}

/* A comma-separated list of n numbers (or ints when ints != NULL). 0 or -1. */
static int parse_list(const char *s, int n, unsigned long long *ulls, int *ints)
{
    char buf[PROTO_MAX_NAMES * 24], *tok, *save = NULL;
    int i = 0;

    if (s == NULL || strlen(s) >= sizeof(buf))
        return -1;
    strcpy(buf, s);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), i++) {
        if (i >= n || (ulls ? dl_parse_ull(tok, &ulls[i]) : dl_parse_int(tok, &ints[i])) < 0)
            return -1;
    }
    return i == n ? 0 : -1;
}

/* count=/counts= of a reply into r->counts. */
static int parse_counts(struct dl_req *r, const struct proto_reply *rp, const char *one, const char *many)
{
    if (r->nnames <= 1 && proto_reply_get(rp, one))
        return dl_parse_int(proto_reply_get(rp, one), &r->counts[0]);
    return parse_list(proto_reply_get(rp, many), r->nnames, NULL, r->counts);
}

static int parse_tokens(struct dl_req *r, const struct proto_reply *rp)
{
    if (r->nnames <= 1 && proto_reply_get(rp, "token"))
        return dl_parse_ull(proto_reply_get(rp, "token"), &r->tokens[0]);
    return parse_list(proto_reply_get(rp, "tokens"), r->nnames, r->tokens, NULL);
}

/* Sends a request of the library's own that gives back what r got (or took once too often). */
static void undo(struct dlock *h, struct dl_req *r, enum dl_kind kind, int permits)
{
    static const char *verbs[] = {[K_LOCK] = "LOCK", [K_UNLOCK] = "UNLOCK", [K_RELEASE] = "RELEASE"};
    char *body = NULL;
    size_t len = 0, cap = 0;
    struct dl_req *u;
    int bad = dl_appendf(&body, &len, &cap, "%s", verbs[kind]);

    for (int i = 0; i < r->nnames && !bad; i++)
        bad = dl_appendf(&body, &len, &cap, " %s", r->names[i]);
    if (!bad && r->mode == M_SHARED)
        bad = dl_appendf(&body, &len, &cap, " shared");
    if (!bad && kind == K_RELEASE)
        bad = dl_appendf(&body, &len, &cap, " permits=%d", permits);
    if (!bad && r->owner[0])
        bad = dl_appendf(&body, &len, &cap, " owner=%s", r->owner);
    if (!bad && (u = req_new(kind, body, kind == K_LOCK ? 0 : DL_NO_WAIT)) != NULL) {
        u->internal = 1;
        u->deadline = DL_INF;
        req_submit(h, u);
    }
    free(body);
}

/* The mode an UNLOCK without `shared` acts on: exclusive when held so, else shared. */
static enum dl_mode unlock_mode(struct dlock *h, const struct dl_req *r, const char *name)
{
    if (r->flags & DLOCK_SHARED)
        return M_SHARED;
    if (holds_find(&h->holds, name, r->owner, M_EXCL) == NULL && holds_find(&h->holds, name, r->owner, M_SHARED))
        return M_SHARED;
    return M_EXCL;
}

static void on_lock(struct dlock *h, struct dl_req *r, const struct proto_reply *rp, int rc)
{
    if (rc == DLOCK_ERR_BUSY && r->wait_ms != 0)
        rc = DLOCK_ERR_TIMEOUT; /* sent again with no wait left */
    if (rc == 0 && (parse_tokens(r, rp) < 0 || parse_counts(r, rp, "count", "counts") < 0))
        rc = DLOCK_ERR_PROTO;
    if (rc == 0 && r->abandoned)
        undo(h, r, K_UNLOCK, 0); /* nobody waits for this grant any more */
    for (int i = 0; i < r->nnames && rc == 0 && !r->abandoned; i++)
        if (holds_set(&h->holds, r->names[i], r->owner, r->mode, r->counts[i], r->tokens[i]) < 0)
            rc = DLOCK_ERR_NOMEM;
    req_finish(h, r, rc);
}

static void on_unlock(struct dlock *h, struct dl_req *r, const struct proto_reply *rp, int rc)
{
    if (rc == 0 && parse_counts(r, rp, "count", "counts") < 0)
        rc = DLOCK_ERR_PROTO;
    for (int i = 0; i < r->nnames && (rc == 0 || rc == DLOCK_ERR_NOTHELD); i++) {
        enum dl_mode m = unlock_mode(h, r, r->names[i]);
        struct dl_hold *hd = holds_find(&h->holds, r->names[i], r->owner, m);

        if (rc == DLOCK_ERR_NOTHELD && hd && r->nnames == 1)
            holds_remove(&h->holds, hd); /* the server does not have it: neither do we */
        else if (rc == 0)
            holds_set(&h->holds, r->names[i], r->owner, m, r->counts[i], 0);
    }
    req_finish(h, r, rc);
}

static void on_acquire(struct dlock *h, struct dl_req *r, const struct proto_reply *rp, int rc)
{
    const char *fr = proto_reply_get(rp, "free");

    if (rc == DLOCK_ERR_BUSY && r->wait_ms != 0)
        rc = DLOCK_ERR_TIMEOUT;
    if (fr)
        dl_parse_int(fr, &r->free_permits);
    if (rc == 0 && (dl_parse_ull(proto_reply_get(rp, "token"), &r->tokens[0]) < 0 ||
                    dl_parse_int(proto_reply_get(rp, "held"), &r->counts[0]) < 0))
        rc = DLOCK_ERR_PROTO;
    if (rc == 0 && r->abandoned)
        undo(h, r, K_RELEASE, r->permits);
    else if (rc == 0 && holds_set(&h->holds, r->names[0], r->owner, M_SEM, r->counts[0], r->tokens[0]) < 0)
        rc = DLOCK_ERR_NOMEM;
    req_finish(h, r, rc);
}

static void on_release(struct dlock *h, struct dl_req *r, const struct proto_reply *rp, int rc)
{
    const char *fr = proto_reply_get(rp, "free");

    if (fr)
        dl_parse_int(fr, &r->free_permits);
    if (rc == 0 && dl_parse_int(proto_reply_get(rp, "held"), &r->counts[0]) < 0)
        rc = DLOCK_ERR_PROTO;
    if (rc == 0)
        holds_set(&h->holds, r->names[0], r->owner, M_SEM, r->counts[0], 0);
    req_finish(h, r, rc);
}

void req_on_reply(struct dlock *h, struct dl_req *r, const struct proto_reply *rp)
{
    int rc = reply_rc(rp);

    if (r->internal) {
        req_finish(h, r, rc);
        return;
    }
    switch (r->kind) {
    case K_LOCK: on_lock(h, r, rp, rc); return;
    case K_UNLOCK: on_unlock(h, r, rp, rc); return;
    case K_ACQUIRE: on_acquire(h, r, rp, rc); return;
    case K_RELEASE: on_release(h, r, rp, rc); return;
    case K_LATCH:
    case K_COUNTDOWN:
        if (rc == 0 && dl_parse_int(proto_reply_get(rp, "count"), &r->counts[0]) < 0)
            rc = DLOCK_ERR_PROTO;
        break;
    case K_AWAIT:
        if (rc == DLOCK_ERR_BUSY)
            rc = DLOCK_ERR_TIMEOUT;
        break;
    case K_STATUS:
    case K_INFO:
        if (rc == 0 && rp->text == NULL)
            rc = DLOCK_ERR_PROTO;
        else if (rc == 0 && (r->json = strdup(rp->text)) == NULL)
            rc = DLOCK_ERR_NOMEM;
        break;
    case K_PING:
    case K_QUIT:
        break;
    }
    req_finish(h, r, rc);
}

void req_on_drop(struct dlock *h, struct dl_req *r)
{
    r->gen = 0;
    if (r->kind == K_QUIT) {
        req_finish(h, r, 0); /* the server closes the connection after QUIT */
    } else if (r->kind == K_COUNTDOWN || (!has_id(r->kind) && (r->internal || r->abandoned))) {
        /* carried out or not: nobody can tell, and doing it twice would be wrong */
        req_finish(h, r, DLOCK_ERR_CONN);
    } else {
        r->dropped = 1;
    }
}

void req_on_reconnect(struct dlock *h, struct dl_req *r, int resumed)
{
    if (r->dropped && !resumed) {
        /* A new session: the old one's grants and releases are moot. */
        if (r->internal || r->abandoned) {
            req_finish(h, r, DLOCK_ERR_CONN);
            return;
        }
        if (r->kind == K_UNLOCK || r->kind == K_RELEASE) {
            req_finish(h, r, DLOCK_ERR_LOST);
            return;
        }
    }
    r->dropped = 0;
    req_send(h, r);
}
