/* session.c - sessions live while requests keep arriving within their ttl;
 * one deadline per session, moved only when it fires. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nettle/memops.h>
#include <nettle/sha2.h>

#include "dict.h"
#include "hooks.h"
#include "id.h"
#include "log.h"
#include "session.h"

static void on_expiry(struct deadline *dl)
{
    struct session *s = container_of(dl, struct session, expiry);
    uint64_t due = s->last_seen + (uint64_t)s->ttl;

    /* Requests only move last_seen; the deadline catches up here. A session being claimed
     * is the daemon's it came from until the claim ends (resume.c ends it otherwise). */
    if (s->claiming)
        due = now_ms() + (uint64_t)s->ttl;
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

long long session_redis_lease(const struct dlockd *d, const struct session *s)
{
    long long left;

    if (s == NULL || !s->has_secret)
        return d->cfg.lock_lease;
    left = (long long)(s->last_seen + (uint64_t)s->ttl) - (long long)now_ms();
    return left > d->cfg.lock_lease ? left : d->cfg.lock_lease;
}

/* A session with no id yet, not in d->sessions. */
static struct session *session_alloc(struct dlockd *d, const char *name, int64_t ttl)
{
    struct session *s = must(calloc(1, sizeof(*s)));

    s->d = d;
    session_set_name(s, name);
    s->ttl = session_clamp_ttl(d, ttl);
    s->last_seen = now_ms();
    TAILQ_INIT(&s->holds);
    TAILQ_INIT(&s->waits);
    TAILQ_INIT(&s->idlist);
    deadline_init(&s->expiry, on_expiry);
    return s;
}

static void session_add(struct session *s)
{
    deadline_arm(s->d->deadlines, &s->expiry, s->last_seen + (uint64_t)s->ttl);
    dict_set(s->d->sessions, s->id, s);
}

struct session *session_new(struct dlockd *d, const char *name, int64_t ttl)
{
    struct session *s = session_alloc(d, name, ttl);

    do
        dlockd_random_id(s->id);
    while (dict_get(d->sessions, s->id));
    session_add(s);
    return s;
}

static void hash_secret(const char *secret, unsigned char out[SESSION_HASH_LEN]);

static int unhex(const char *hex, unsigned char *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (unsigned char)v;
    }
    return hex[2 * n] == '\0' ? 0 : -1;
}

int session_secret_matches(const char *secret, const char *hash)
{
    unsigned char want[SESSION_HASH_LEN], got[SESSION_HASH_LEN];

    hash_secret(secret, got);
    return strlen(hash) == 2 * SESSION_HASH_LEN && unhex(hash, want, SESSION_HASH_LEN) == 0 &&
           memeql_sec(want, got, sizeof(want));
}

struct session *session_resume(struct dlockd *d, const char *id, const char *name, int64_t ttl, const char *hash)
{
    struct session *s;

    if (strlen(id) != DLOCKD_ID_LEN || dict_get(d->sessions, id) || strlen(hash) != 2 * SESSION_HASH_LEN)
        return NULL;
    s = session_alloc(d, name, ttl);
    if (unhex(hash, s->secret_hash, SESSION_HASH_LEN)) {
        free(s->name);
        free(s);
        return NULL;
    }
    memcpy(s->id, id, DLOCKD_ID_LEN + 1);
    s->has_secret = 1;
    s->hello = 1;
    session_add(s);
    return s;
}

void session_set_name(struct session *s, const char *name)
{
    free(s->name);
    s->name = must(strndup(name, PROTO_STR_MAX));
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
    /* dlockd_random_id draws from getrandom(2) (id.c). */
    dlockd_random_id(out);
    dlockd_random_id(out + DLOCKD_ID_LEN);
    hash_secret(out, s->secret_hash);
    s->has_secret = 1;
}

void session_untold(struct session *s, const char *hid, const char *name)
{
    size_t len = strlen(hid) + 1 + strlen(name) + 1;

    /* One line per hold: at most max-holds of them, as the events they stand for. */
    if (s->nmissed > s->d->cfg.max_holds)
        return;
    s->untold = must(realloc(s->untold, s->untold_len + len + 1));
    s->untold_len += (size_t)sprintf(s->untold + s->untold_len, "%s %s\n", hid, name);
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

static void told_key(char *key, size_t len, const char *name, unsigned long long token)
{
    snprintf(key, len, "%s %llu", name, token);
}

void session_remember_lost(struct session *s, const char *name, unsigned long long token)
{
    char key[PROTO_NAME_MAX + 24];

    told_key(key, sizeof(key), name, token);
    if (s->told == NULL)
        s->told = dict_new();
    dict_set(s->told, key, s);
}

int session_lost_told(const struct session *s, const char *name, unsigned long long token)
{
    char key[PROTO_NAME_MAX + 24];

    told_key(key, sizeof(key), name, token);
    return s->told && dict_get(s->told, key);
}

static void session_free(struct session *s)
{
    if (s->told)
        dict_free(s->told);
    free(s->missed);
    free(s->untold);
    free(s->name);
    free(s);
}

static int forget(const char *key, void *val, void *arg)
{
    struct session *s = val;

    (void)key;
    (void)arg;
    s->d->hooks->session_ending(s, SESSION_FORGOTTEN);
    deadline_cancel(s->d->deadlines, &s->expiry);
    dict_del(s->d->sessions, s->id);
    session_free(s);
    return 0;
}

void session_drop(struct session *s)
{
    forget(s->id, s, NULL);
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
    d->hooks->session_ending(s, why);
    deadline_cancel(d->deadlines, &s->expiry);
    dict_del(d->sessions, s->id);
    if (c)
        d->hooks->session_left(c, why == SESSION_EXPIRED);
    session_free(s);
}
