/* session.c - sessions live while requests keep arriving within their ttl;
 * one deadline per session, moved only when it fires. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nettle/memops.h>
#include <nettle/sha2.h>

#include "dict.h"
#include "hooks.h"
#include "log.h"
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

static void hash_secret(const char *secret, unsigned char out[SESSION_HASH_LEN])
{
    struct sha256_ctx ctx;

    _Static_assert(SESSION_HASH_LEN == SHA256_DIGEST_SIZE, "a session keeps a SHA-256");
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(secret), (const uint8_t *)secret);
    sha256_digest(&ctx, SESSION_HASH_LEN, out);
}

struct session *session_check(struct dlockd *d, const char *id, const char *secret)
{
    unsigned char h[SESSION_HASH_LEN];
    struct session *s = session_find(d, id);

    hash_secret(secret, h);
    if (s == NULL || !s->has_secret || !memeql_sec(h, s->secret_hash, sizeof(h)))
        return NULL;
    return s;
}

void session_new_secret(struct session *s, char out[SESSION_SECRET_LEN + 1])
{
    _Static_assert(SESSION_SECRET_LEN == 2 * DLOCKD_ID_LEN, "a secret is two random ids");
    /* dlockd_random_id draws from getrandom(2) (main.c). */
    dlockd_random_id(out);
    dlockd_random_id(out + DLOCKD_ID_LEN);
    hash_secret(out, s->secret_hash);
    s->has_secret = 1;
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

static int forget(const char *key, void *val, void *arg)
{
    struct session *s = val;

    (void)key;
    (void)arg;
    s->d->hooks->session_forget(s);
    deadline_cancel(s->d->deadlines, &s->expiry);
    dict_del(s->d->sessions, s->id);
    free(s->missed);
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
            log_info("audit: expired session=%s client=%s holds=%d waits=%d", s->id, s->name, s->nholds, s->nwaits);
    }
    d->hooks->session_ending(s, why == SESSION_EXPIRED);
    deadline_cancel(d->deadlines, &s->expiry);
    dict_del(d->sessions, s->id);
    if (c)
        d->hooks->session_left(c, why == SESSION_EXPIRED);
    free(s->missed);
    free(s->name);
    free(s);
}
