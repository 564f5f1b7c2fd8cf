/* session.c - sessions live while requests keep arriving within their ttl;
 * one deadline per session, moved only when it fires. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "dict.h"
#include "hold.h"
#include "wait.h"
#include "log.h"
#include "reqid.h"
#include "session.h"

static void on_expiry(struct deadline *dl)
{
    struct session *s = container_of(dl, struct session, expiry);
    uint64_t due = s->last_seen + (uint64_t)s->ttl;

    /* Requests only move last_seen; the deadline catches up here. */
    if (due > now_ms()) {
        deadline_arm(s->d->deadlines, &s->expiry, due);
        return;
    }
    session_end(s, SESSION_EXPIRED);
}

int64_t session_clamp_ttl(struct dlockd *d, int64_t ttl)
{
    if (ttl < d->cfg.session_ttl_min)
        return d->cfg.session_ttl_min;
    if (ttl > d->cfg.session_ttl_max)
        return d->cfg.session_ttl_max;
    return ttl;
}

struct session *session_new(struct dlockd *d, const char *name, int64_t ttl)
{
    struct session *s = calloc(1, sizeof(*s));

    if (s == NULL)
        fatalx("session: out of memory");
    s->d = d;
    do
        dlockd_random_id(s->id);
    while (dict_get(d->sessions, s->id));
    session_set_name(s, name);
    s->ttl = session_clamp_ttl(d, ttl);
    s->last_seen = now_ms();
    TAILQ_INIT(&s->holds);
    TAILQ_INIT(&s->waits);
    TAILQ_INIT(&s->idlist);
    deadline_init(&s->expiry, on_expiry);
    deadline_arm(d->deadlines, &s->expiry, s->last_seen + (uint64_t)s->ttl);
    dict_set(d->sessions, s->id, s);
    return s;
}

void session_set_name(struct session *s, const char *name)
{
    free(s->name);
    if ((s->name = strndup(name, PROTO_STR_MAX)) == NULL)
        fatalx("session: out of memory");
}

struct session *session_find(struct dlockd *d, const char *id)
{
    return id[0] ? dict_get(d->sessions, id) : NULL;
}

void session_touch(struct session *s)
{
    s->last_seen = now_ms();
}

void session_set_ttl(struct session *s, int64_t ttl)
{
    s->ttl = session_clamp_ttl(s->d, ttl);
    /* A longer ttl is caught up by on_expiry; a shorter one needs the deadline moved. */
    deadline_arm(s->d->deadlines, &s->expiry, s->last_seen + (uint64_t)s->ttl);
}

void session_attach(struct session *s, struct conn *c)
{
    if (s->conn && s->conn != c)
        s->conn->session = NULL;
    if (c->session && c->session != s)
        c->session->conn = NULL;
    s->conn = c;
    c->session = s;
}

static int forget(const char *key, void *val, void *arg)
{
    struct session *s = val;
    struct hold *h;

    (void)key;
    (void)arg;
    reqid_free_session(s);
    wait_abandon_session(s);
    while ((h = TAILQ_FIRST(&s->holds)) != NULL)
        hold_remove(s->d, h);
    deadline_cancel(s->d->deadlines, &s->expiry);
    dict_del(s->d->sessions, s->id);
    free(s->name);
    free(s);
    return 0;
}

void session_free_all(struct dlockd *d)
{
    dict_each(d->sessions, forget, NULL);
}

void session_end(struct session *s, enum session_end why)
{
    struct dlockd *d = s->d;
    struct conn *c = s->conn;

    if (why == SESSION_EXPIRED) {
        d->stats.expired_sessions++;
        if (s->hello || !TAILQ_EMPTY(&s->holds) || !TAILQ_EMPTY(&s->waits))
            log_info("s%s: session '%s' expired with %d holds", s->id, s->name, s->nholds);
    }
    reqid_free_session(s); /* first: no repeat may start on a session that is ending */
    wait_abandon_session(s);
    hold_release_session(s, why == SESSION_EXPIRED);
    deadline_cancel(d->deadlines, &s->expiry);
    dict_del(d->sessions, s->id);
    if (c) {
        c->session = NULL;
        if (why == SESSION_EXPIRED) {
            conn_event(c, "BYE reason=expired");
            conn_close_soon(c, "session expired");
        }
    }
    free(s->name);
    free(s);
}
