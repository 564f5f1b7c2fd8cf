/* oper.c - the operator verbs: LIST and SESSIONS answer from census.c, KILL ends a session, FORCE frees a name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "census.h"
#include "batch.h"
#include "conn.h"
#include "dlockd.h"
#include "hold.h"
#include "hooks.h"
#include "log.h"
#include "oper.h"
#include "redis.h"
#include "resume.h"
#include "session.h"

/* limit= of r, or the default. Returns 0, or -1 after answering ERR SYNTAX. */
static int limit_of(struct req *r, long long *limit)
{
    *limit = (r->pr.has & PROTO_O_LIMIT) ? r->pr.limit : CENSUS_LIMIT_DEFAULT;
    if (*limit > CENSUS_LIMIT_MAX) {
        req_err(r, PROTO_ESYNTAX, "limit is at most %d", CENSUS_LIMIT_MAX);
        return -1;
    }
    return 0;
}

/* Answers the request arg with a census document. */
static void answer(struct dlockd *d, json_t *doc, const char *err, void *arg)
{
    struct req *r = arg;
    char *text;

    (void)d;
    if (doc == NULL) {
        req_err(r, PROTO_EBACKEND, "%s", err);
        return;
    }
    text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    req_reply(r, "OK", "%s", text);
    free(text);
    json_decref(doc);
}

void oper_list(struct req *r)
{
    long long limit;
    int rc;

    if (limit_of(r, &limit))
        return;
    if ((rc = census_names(r->d, r->pr.nnames ? r->pr.names[0] : NULL, limit, answer, r)) == CENSUS_BUSY)
        req_err(r, PROTO_ELIMIT, CENSUS_BUSY_TEXT);
    else if (rc)
        req_err(r, PROTO_EBACKEND, "%s", redis_unavailable(r->d->redis));
}

void oper_sessions(struct req *r)
{
    long long limit;

    if (limit_of(r, &limit) == 0)
        census_sessions(r->d, limit, answer, r);
}

/* The operator's connection, for the audit lines. */
static const char *who(const struct req *r)
{
    return r->c ? r->c->peer : "-";
}

/* Tells h's session it lost h to the operator and forgets h here (Redis is not told). */
static void lose(struct dlockd *d, struct hold *h)
{
    struct session *s = h->s;
    char name[PROTO_NAME_MAX + 1], hid[HID_MAX + 1];

    log_info("audit: lost name=%s session=%s client=%s token=%llu reason=admin", h->ln->name, s->id, s->name,
             h->token);
    conn_session_event(s, "LOST %s token=%llu reason=admin", h->ln->name, h->token);
    snprintf(name, sizeof(name), "%s", h->ln->name);
    snprintf(hid, sizeof(hid), "%s", h->hid);
    hold_remove(d, h);
    d->hooks->hold_ended(s, hid, name, NULL);
}

/* Ends s as if it expired, but its holders hear reason=admin and no lock-delay keeps the names. */
static void kill_session(struct session *s)
{
    struct dlockd *d = s->d;
    struct hold *h;

    while ((h = TAILQ_FIRST(&s->holds)) != NULL) {
        char name[PROTO_NAME_MAX + 1], hid[HID_MAX + 1], token[TOKEN_MAX];

        snprintf(name, sizeof(name), "%s", h->ln->name);
        snprintf(hid, sizeof(hid), "%s", h->hid);
        snprintf(token, sizeof(token), "%llu", h->token);
        lose(d, h);
        hold_release(d, name, hid, token, 1, 0, 0);
    }
    session_end(s, SESSION_EXPIRED);
}

void oper_killed_elsewhere(struct session *s)
{
    log_info("audit: admin KILL session=%s client=%s holds=%d on another daemon", s->id, s->name, s->nholds);
    kill_session(s);
}

static void kill_here(struct req *r, struct session *s)
{
    log_info("audit: admin KILL session=%s client=%s holds=%d by %s", s->id, s->name, s->nholds, who(r));
    /* Answered first: the operator may have named its own session. */
    req_reply(r, "OK", NULL);
    kill_session(s);
}

static void kill_local(struct req *r)
{
    struct session *s = session_find(r->d, r->pr.names[0]);

    if (resume_taking(r->pr.names[0]))
        req_err(r, PROTO_EBACKEND, "the session is being resumed here; nothing changed, try again");
    else if (s == NULL)
        req_err(r, PROTO_ENOSESSION, "no live session with that id");
    else
        kill_here(r, s);
}

/* Its record names this daemon now, with the KILL in it: the daemon that had it ends its copy,
 * and a grant it made meanwhile (resume.c claims it so). */
static void kill_resumed(struct req *r, struct session *s)
{
    log_info("audit: admin KILL session=%s client=%s holds=%d by %s", s->id, s->name, s->nholds, who(r));
    req_reply(r, "OK", NULL);
    kill_session(s);
}

static void kill_failed(struct req *r)
{
    req_err(r, PROTO_EBACKEND, NO_ANSWER);
}

static void kill_refused(struct req *r)
{
    req_err(r, PROTO_ENOSESSION, "no live session with that id");
}

static void kill_attach(struct req *r, struct session *s)
{
    (void)r;
    (void)s;
}

/* A session another daemon has, or had before it died, is taken over as a resume would take
 * it (without its secret), then ended here. */
static const struct resume_answers kill_answers = {
    .kill = 1,
    .attach = kill_attach,
    .resumed = kill_resumed,
    .failed = kill_failed,
    .refused = kill_refused,
    .local = kill_local,
};

void oper_kill(struct req *r)
{
    resume_from_record(r, r->pr.names[0], &kill_answers);
}

/* A FORCE in flight. */
struct force {
    struct req *req;
    char name[PROTO_NAME_MAX + 1];
};

static void on_force(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct force *f = arg;

    if (rep == NULL || rep->status != CONTRACT_OK) {
        req_err(f->req, PROTO_EBACKEND, "%s; '%s' may have been freed", dlockd_silence(d), f->name);
        free(f);
        return;
    }
    for (long long i = 0; i < rep->force.count; i++) {
        const char *hid, *token;
        struct hold *h;

        contract_forced(rep, i, &hid, &token);
        if ((h = hold_find(d, f->name, hid)) != NULL && h->token == strtoull(token, NULL, 10))
            lose(d, h);
    }
    log_info("audit: admin FORCE name=%s freed=%lld by %s", f->name, rep->force.count, who(f->req));
    req_reply(f->req, "OK", "count=%lld", rep->force.count);
    free(f);
}

void oper_force(struct req *r)
{
    struct force *f = must(calloc(1, sizeof(*f)));
    const char *name = r->pr.names[0];

    f->req = r;
    snprintf(f->name, sizeof(f->name), "%s", name);
    if (batch_op(r->d, OP_FORCE, 1, 1, &name, NULL, on_force, NULL, f)) {
        req_err(r, PROTO_EBACKEND, "%s", redis_unavailable(r->d->redis));
        free(f);
    }
}

/* The holds of a name here that Redis no longer has, as STATUS shows it. */
static void on_checked(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    char *name = arg;
    struct lname *ln = hold_name(d, name);
    struct hold *h, *next;

    /* No answer, or holders not listed: the renewal finds what went. */
    if (ln == NULL || rep == NULL || rep->status != CONTRACT_OK || rep->state.more > 0) {
        free(name);
        return;
    }
    for (h = TAILQ_FIRST(&ln->holds); h != NULL; h = next) {
        int kept = 0;

        next = TAILQ_NEXT(h, in_name);
        for (int i = 0; i < rep->state.nholders && !kept; i++) {
            struct contract_holder ch = contract_holder(rep, i);
            kept = strcmp(ch.hid, h->hid) == 0 && (unsigned long long)ch.token == h->token;
        }
        if (!kept)
            lose(d, h); /* frees ln with the last hold: only next is used after */
    }
    free(name);
}

void oper_on_message(struct dlockd *d, const char *msg)
{
    char name[PROTO_NAME_MAX + 1], *copy;
    const char *names[1] = { name };

    /* Anyone may PUBLISH: nothing is dropped before Redis says it is gone. */
    if (sscanf(msg, "F %200s", name) != 1 || hold_name(d, name) == NULL)
        return;
    copy = must(strdup(name));
    if (batch_op(d, OP_STATUS, 1, 1, names, NULL, on_checked, NULL, copy))
        free(copy);
}
