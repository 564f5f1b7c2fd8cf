/* hold.c - the holds of this daemon's sessions as Redis last confirmed them:
 * what renewal extends, what a session's end releases, what lease= ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "conn.h"
#include "dict.h"
#include "dlockd.h"
#include "hold.h"
#include "hooks.h"
#include "log.h"
#include "mem.h"
#include "session.h"
#include "strbuf.h"

int hold_script(struct dlockd *d, enum op_id op, int nnames, const char *const *names,
                const struct contract_args *args, contract_cb *cb, contract_cb *late, void *arg)
{
    return batch_op(d, op, 1, nnames, names, args, cb, late, arg);
}

struct lname *hold_name(struct dlockd *d, const char *name)
{
    return dict_get(d->names, name);
}

/* A name has few holds here (one per session and owner that holds it), so a walk finds one. */
struct hold *hold_find(struct dlockd *d, const char *name, const char *hid)
{
    struct lname *ln = dict_get(d->names, name);
    struct hold *h;

    if (ln == NULL)
        return NULL;
    TAILQ_FOREACH(h, &ln->holds, in_name)
        if (strcmp(h->hid, hid) == 0)
            return h;
    return NULL;
}

static void on_lease_end(struct deadline *dl);

/* Gives h a lease= of ms from now, in place of the one it had (none for 0). */
static void set_lease(struct dlockd *d, struct hold *h, int64_t ms)
{
    if (h->lease) {
        deadline_cancel(d->deadlines, &h->lease->dl);
        free(h->lease);
        h->lease = NULL;
    }
    if (ms > 0) {
        h->lease = must(malloc(sizeof(*h->lease)));
        h->lease->h = h;
        deadline_init(&h->lease->dl, on_lease_end);
        deadline_arm(d->deadlines, &h->lease->dl, now_ms() + (uint64_t)ms);
    }
}

void hold_remove(struct dlockd *d, struct hold *h)
{
    TAILQ_REMOVE(&h->s->holds, h, in_session);
    h->s->nholds--;
    d->nholds--;
    histo_add_in(&d->stats.held, histo_long_bounds_us, (now_ms() - h->since) * 1000);
    TAILQ_REMOVE(&h->ln->holds, h, in_name);
    if (TAILQ_EMPTY(&h->ln->holds)) {
        dict_del(d->names, h->ln->name);
        mem_free(h->ln, sizeof(*h->ln));
    }
    set_lease(d, h, 0);
    mem_free(h, sizeof(*h) + strlen(h->hid) + 1);
}

/* Forgets h here and releases it in Redis. */
static void drop(struct dlockd *d, struct hold *h, int64_t delay)
{
    char name[PROTO_NAME_MAX + 1], hid[HID_MAX + 1], token[TOKEN_MAX];

    str_copy(name, sizeof(name), h->ln->name);
    str_copy(hid, sizeof(hid), h->hid);
    str_ll(token, sizeof(token), (long long)h->token);
    hold_remove(d, h);
    hold_release(d, name, hid, token, 1, 0, delay);
}

/* Forgets h here, then lets the session's record forget it (unindexed: Redis did with its release). */
static void forget(struct dlockd *d, struct hold *h, int unindexed)
{
    struct session *s = h->s;
    char name[PROTO_NAME_MAX + 1], hid[HID_MAX + 1], token[TOKEN_MAX];

    str_copy(name, sizeof(name), h->ln->name);
    str_copy(hid, sizeof(hid), h->hid);
    str_ll(token, sizeof(token), (long long)h->token);
    hold_remove(d, h);
    d->hooks->hold_ended(s, hid, name, unindexed ? token : NULL);
}

static void on_lease_end(struct deadline *dl)
{
    struct hold *h = container_of(dl, struct hold_lease, dl)->h;
    struct session *s = h->s;
    char name[PROTO_NAME_MAX + 1], hid[HID_MAX + 1];

    conn_session_event(s, "LOST %s token=%llu reason=lease", h->ln->name, h->token);
    log_info("audit: lost name=%s session=%s client=%s token=%llu reason=lease", h->ln->name, s->id, s->name,
             h->token);
    str_copy(name, sizeof(name), h->ln->name);
    str_copy(hid, sizeof(hid), h->hid);
    drop(s->d, h, 0);
    s->d->hooks->hold_ended(s, hid, name, NULL);
}

static struct lname *name_get(struct dlockd *d, const char *name)
{
    struct lname *ln = dict_get(d->names, name);

    if (ln == NULL) {
        ln = mem_alloc(sizeof(*ln));
        TAILQ_INIT(&ln->holds);
        ln->name = dict_set(d->names, name, ln);
    }
    return ln;
}

void hold_set(struct session *s, const char *name, const char *hid, const char *token, long long count,
              int64_t lease)
{
    struct dlockd *d = s->d;
    struct hold *h = hold_find(d, name, hid);
    size_t hlen = strlen(hid);

    if (h == NULL) {
        h = mem_alloc(sizeof(*h) + hlen + 1);
        h->s = s;
        h->since = now_ms();
        memcpy(h->hid, hid, hlen + 1);
        set_lease(d, h, lease);
        h->ln = name_get(d, name);
        TAILQ_INSERT_TAIL(&s->holds, h, in_session);
        TAILQ_INSERT_TAIL(&h->ln->holds, h, in_name);
        s->nholds++;
        d->nholds++;
    } else if (h->token != strtoull(token, NULL, 10)) {
        /* another hold in Redis, not a reentry: its lease= is its own */
        h->since = now_ms();
        set_lease(d, h, lease);
    }
    h->token = strtoull(token, NULL, 10);
    h->count = count;
}

void hold_count(struct dlockd *d, const char *name, const char *hid, long long count, int unindexed)
{
    struct hold *h = hold_find(d, name, hid);

    if (h == NULL)
        return;
    if (count > 0)
        h->count = count;
    else
        forget(d, h, unindexed);
}

void hold_lost(struct dlockd *d, const char *name, const char *hid, const char *token, const char *reason)
{
    struct hold *h = hold_find(d, name, hid);

    if (h == NULL || h->token != strtoull(token, NULL, 10))
        return;
    d->stats.lost++;
    log_info("audit: lost name=%s session=%s client=%s token=%llu reason=%s", name, h->s->id, h->s->name, h->token,
             reason);
    conn_session_event(h->s, "LOST %s token=%llu reason=%s", name, h->token, reason);
    forget(d, h, 0);
}

/* A release answers nobody: what it hands on goes out with its batch's grants. */
static void on_release(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    (void)d;
    (void)rep;
    (void)arg;
}

static int release(struct dlockd *d, const char *name, const char *hid, const char *token, int all, long long k,
                   int64_t delay, contract_cb *cb, void *arg)
{
    struct contract_args args;

    contract_unlock_args(&args, hid + 1, hid[0], all, token, k, (long long)delay, "1", NULL);
    /* No deadline: it checks the token, so it may run whenever Redis gets to it. */
    if (batch_op(d, OP_UNLOCK, 0, 1, &name, &args, cb, NULL, arg) == 0)
        return 0;
    log_warnx("backend down: '%s' is left to its lease in Redis", name);
    return -1;
}

void hold_release(struct dlockd *d, const char *name, const char *hid, const char *token, int all, long long k,
                  int64_t delay)
{
    release(d, name, hid, token, all, k, delay, on_release, NULL);
}

int hold_has(struct dlockd *d, const char *name, const char *hid, const char *token)
{
    const struct hold *h = hold_find(d, name, hid);

    return h != NULL && h->token == strtoull(token, NULL, 10);
}

int hold_undo(struct dlockd *d, const char *name, const char *hid, const char *token, long long k, contract_cb *cb,
              void *arg)
{
    if (hold_has(d, name, hid, token))
        hold_count(d, name, hid, hold_find(d, name, hid)->count - k, 0);
    return release(d, name, hid, token, 0, k, 0, cb ? cb : on_release, arg);
}

void hold_release_session(struct session *s, int expired)
{
    struct hold *h;

    while ((h = TAILQ_FIRST(&s->holds)) != NULL) {
        if (expired) {
            conn_event(s->conn, "LOST %s token=%llu reason=expired", h->ln->name, h->token);
            log_info("audit: lost name=%s session=%s client=%s token=%llu reason=expired", h->ln->name, s->id, s->name,
                     h->token);
        }
        drop(s->d, h, expired ? s->d->cfg.lock_delay : 0);
    }
}
