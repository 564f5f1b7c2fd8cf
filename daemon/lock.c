/* lock.c - LOCK, UNLOCK and STATUS. Redis decides every grant in one script;
 * this file keeps the local view of the holds and waits of this daemon's
 * sessions, answers waiters from script results and pub/sub, and undoes a
 * grant that arrives for a request nobody waits for any more. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "conn.h"
#include "dict.h"
#include "dlockd.h"
#include "lock.h"
#include "log.h"
#include "redis.h"
#include "session.h"

/* The arguments of a script call that outlive the request. */
struct op {
    struct req *req;                /* NULL once answered or abandoned */
    char sid[DLOCKD_ID_LEN + 1];
    char name[PROTO_NAME_MAX + 1];
    char hid[HID_MAX + 1];
    char wid[64];                   /* set when the call is about a wait */
    int64_t lease;                  /* lease= in ms, 0 for none */
};

static void wait_cancel(struct wait *w);
static void wait_submit(struct wait *w);

void lock_keys(struct dlockd *d, const char *name, char keys[5][KEY_MAX])
{
    static const char suffix[] = "hxqwt";

    for (int i = 0; i < 5; i++)
        snprintf(keys[i], KEY_MAX, "%s{%s}:%c", d->cfg.key_prefix, name, suffix[i]);
}

/* Runs a script on one name: KEYS are its five keys, ARGV prefix, daemon, args. */
static int name_script(struct dlockd *d, enum script_id id, const char *name, int nargs, const char **args,
                       redis_cb *cb, redis_cb *late, void *arg)
{
    char keys[5][KEY_MAX];
    const char *argv[7 + 16];

    lock_keys(d, name, keys);
    for (int i = 0; i < 5; i++)
        argv[i] = keys[i];
    argv[5] = d->cfg.key_prefix;
    argv[6] = d->id;
    for (int i = 0; i < nargs; i++)
        argv[7 + i] = args[i];
    return redis_script(d->redis, id, 5, 7 + nargs, argv, cb, late, arg);
}

static struct op *op_new(struct req *r, const char *sid, const char *name, const char *hid)
{
    struct op *op = calloc(1, sizeof(*op));

    if (op == NULL)
        fatalx("lock: out of memory");
    op->req = r;
    snprintf(op->sid, sizeof(op->sid), "%s", sid);
    snprintf(op->name, sizeof(op->name), "%s", name);
    snprintf(op->hid, sizeof(op->hid), "%s", hid);
    return op;
}

/* --- the local view of holds */

static void hold_key(char *key, size_t len, const char *name, const char *hid)
{
    snprintf(key, len, "%s\n%s", name, hid);
}

static void hold_remove(struct dlockd *d, struct hold *h)
{
    dict_del(d->holds, h->key);
    TAILQ_REMOVE(&h->s->holds, h, in_session);
    h->s->nholds--;
    deadline_cancel(d->deadlines, &h->lease_dl);
    free(h);
}

static void release(struct dlockd *d, const char *name, const char *hid, const char *token);

static void on_lease_end(struct deadline *dl)
{
    struct hold *h = container_of(dl, struct hold, lease_dl);
    struct dlockd *d = h->s->d;
    char name[PROTO_NAME_MAX + 1], hid[HID_MAX + 1], token[24];

    conn_event(h->s->conn, "LOST %s token=%s reason=lease", h->name, h->token);
    log_debug("s%s: lease of '%s' ended", h->s->id, h->name);
    memcpy(name, h->name, sizeof(name));
    memcpy(hid, h->hid, sizeof(hid));
    memcpy(token, h->token, sizeof(token));
    hold_remove(d, h);
    release(d, name, hid, token);
}

/* Records a grant in the local view (a new hold, or a new count). */
static void hold_set(struct session *s, const char *name, const char *hid, const char *token, long long count,
                     int64_t lease)
{
    struct dlockd *d = s->d;
    char key[sizeof(((struct hold *)0)->key)];
    struct hold *h;

    hold_key(key, sizeof(key), name, hid);
    if ((h = dict_get(d->holds, key)) == NULL) {
        if ((h = calloc(1, sizeof(*h))) == NULL)
            fatalx("lock: out of memory");
        h->s = s;
        memcpy(h->key, key, sizeof(key));
        snprintf(h->name, sizeof(h->name), "%s", name);
        snprintf(h->hid, sizeof(h->hid), "%s", hid);
        h->since = now_ms();
        deadline_init(&h->lease_dl, on_lease_end);
        if (lease > 0) {
            h->lease_end = h->since + (uint64_t)lease;
            deadline_arm(d->deadlines, &h->lease_dl, h->lease_end);
        }
        dict_set(d->holds, key, h);
        TAILQ_INSERT_TAIL(&s->holds, h, in_session);
        s->nholds++;
    }
    snprintf(h->token, sizeof(h->token), "%s", token);
    h->count = count;
}

static struct hold *hold_find(struct dlockd *d, const char *name, const char *hid)
{
    char key[sizeof(((struct hold *)0)->key)];

    hold_key(key, sizeof(key), name, hid);
    return dict_get(d->holds, key);
}

void lock_hold_lost(struct dlockd *d, const char *key, const char *reason)
{
    struct hold *h = dict_get(d->holds, key);

    if (h == NULL)
        return;
    d->stats.lost++;
    log_info("s%s: lost '%s' token=%s (%s)", h->s->id, h->name, h->token, reason);
    conn_event(h->s->conn, "LOST %s token=%s reason=%s", h->name, h->token, reason);
    hold_remove(d, h);
}

/* --- grants from script results and pub/sub */

static void wait_free(struct wait *w)
{
    struct dlockd *d = w->d;

    dict_del(d->waits, w->wid);
    if (w->s)
        TAILQ_REMOVE(&w->s->waits, w, in_session);
    if (w->req)
        w->req->wait = NULL;
    deadline_cancel(d->deadlines, &w->timeout);
    deadline_cancel(d->deadlines, &w->retry);
    free(w);
}

/* Gives a grant to the request that asked for it, or undoes it when that
 * request (or its session) is gone. */
static void deliver(struct dlockd *d, struct req *r, const char *name, const char *hid, int64_t lease,
                    const char *token, long long count)
{
    struct session *s = r ? req_session(r) : NULL;

    if (r == NULL || r->c == NULL || s == NULL) {
        log_debug("grant of '%s' token=%s came for a request that is gone: undone", name, token);
        if (r)
            req_drop(r);
        release(d, name, hid, count > 1 ? "" : token);
        return;
    }
    hold_set(s, name, hid, token, count, lease);
    d->stats.grants++;
    req_reply(r, "OK", "token=%s count=%lld", token, count);
}

static void wait_granted(struct wait *w, const char *token, long long count)
{
    struct req *r = w->req;

    w->req = NULL;
    if (r)
        r->wait = NULL;
    deliver(w->d, r, w->name, w->hid, w->lease, token, count);
    wait_free(w);
}

/* Hands out the grants at the head of a script reply; returns the index of the script's own fields. */
static size_t apply_grants(struct dlockd *d, const redisReply *rep)
{
    long long n = redis_elem_int(rep, 1);
    char buf[32], wid[64], token[32];

    for (long long i = 0; i < n; i++) {
        struct wait *w;
        snprintf(wid, sizeof(wid), "%s", redis_elem(rep, (size_t)(2 + 3 * i), buf, sizeof(buf)));
        snprintf(token, sizeof(token), "%s", redis_elem(rep, (size_t)(3 + 3 * i), buf, sizeof(buf)));
        if ((w = dict_get(d->waits, wid)) != NULL)
            wait_granted(w, token, redis_elem_int(rep, (size_t)(4 + 3 * i)));
    }
    return (size_t)(2 + 3 * (n > 0 ? n : 0));
}

void lock_on_message(struct dlockd *d, const char *msg)
{
    char wid[64], token[32];
    long long count;
    struct wait *w;

    if (sscanf(msg, "%63s %31s %lld", wid, token, &count) != 3)
        return;
    if ((w = dict_get(d->waits, wid)) != NULL)
        wait_granted(w, token, count);
}

/* --- releases that nobody answers: lease ends, session ends, undos */

static void on_release(struct dlockd *d, redisReply *rep, void *arg)
{
    (void)arg;
    if (rep)
        apply_grants(d, rep);
}

/* Drops a whole hold (one count when token is ""), then hands the name on. */
static void release(struct dlockd *d, const char *name, const char *hid, const char *token)
{
    char who[HID_MAX + 1], mode[2] = { hid[0], '\0' };
    const char *args[] = { who, mode, token[0] ? "1" : "0", token };

    snprintf(who, sizeof(who), "%s", hid + 1);
    if (name_script(d, SCRIPT_UNLOCK, name, 4, args, on_release, NULL, NULL))
        log_warnx("backend down: '%s' is left to its lease in Redis", name);
}

/* --- LOCK */

static void make_hid(char *hid, char mode, const char *sid, const char *owner)
{
    snprintf(hid, HID_MAX + 1, "%c%s:%s", mode, sid, owner);
}

static void wait_on_timeout(struct deadline *dl)
{
    struct wait *w = container_of(dl, struct wait, timeout);

    w->timed_out = 1;
    wait_cancel(w);
}

static void on_poke(struct dlockd *d, redisReply *rep, void *arg)
{
    char *wid = arg;
    struct wait *w;

    if (rep) {
        size_t f = apply_grants(d, rep);
        long long retry = redis_elem_int(rep, f);
        if ((w = dict_get(d->waits, wid)) != NULL && retry >= 0)
            deadline_arm(d->deadlines, &w->retry, now_ms() + (uint64_t)retry + 1);
    }
    free(wid);
}

/* Another daemon's lease in the way of w has run out: purge and hand on. */
static void wait_on_retry(struct deadline *dl)
{
    struct wait *w = container_of(dl, struct wait, retry);
    char *wid = strdup(w->wid);

    if (wid == NULL || name_script(w->d, SCRIPT_POKE, w->name, 0, NULL, on_poke, NULL, wid))
        free(wid);
}

static void arm_retry(struct wait *w, long long retry)
{
    if (retry >= 0)
        deadline_arm(w->d->deadlines, &w->retry, now_ms() + (uint64_t)retry + 1);
}

static void finish_lock(struct dlockd *d, struct op *op, const redisReply *rep, size_t f)
{
    char buf[32], st[16], a[256], b[32];

    snprintf(st, sizeof(st), "%s", redis_elem(rep, 0, buf, sizeof(buf)));
    snprintf(a, sizeof(a), "%s", redis_elem(rep, f, buf, sizeof(buf)));
    snprintf(b, sizeof(b), "%s", redis_elem(rep, f + 1, buf, sizeof(buf)));
    if (strcmp(st, "OK") == 0) {
        struct wait *w = op->wid[0] ? dict_get(d->waits, op->wid) : NULL;
        if (w)
            wait_granted(w, a, atoll(b));
        else if (!op->wid[0])
            deliver(d, op->req, op->name, op->hid, op->lease, a, atoll(b));
    } else if (strcmp(st, "BUSY") == 0) {
        d->stats.busy++;
        if (op->req)
            req_reply(op->req, "BUSY", "holder=%s ttl=%s", a, b);
    } else if (strcmp(st, "WAIT") == 0) {
        struct wait *w = dict_get(d->waits, op->wid);
        if (w) {
            w->queued = 1;
            if (w->req == NULL || w->timed_out)
                wait_cancel(w);
            else
                arm_retry(w, atoll(a));
        }
    }
}

static void on_lock_late(struct dlockd *d, redisReply *rep, void *arg)
{
    struct op *op = arg;

    if (rep)
        finish_lock(d, op, rep, apply_grants(d, rep));
    free(op);
}

static void on_lock(struct dlockd *d, redisReply *rep, void *arg)
{
    struct op *op = arg;
    struct wait *w = op->wid[0] ? dict_get(d->waits, op->wid) : NULL;

    if (rep == NULL) {
        /* The script may still run: on_lock_late undoes what it did. */
        struct req *r = w ? w->req : op->req;
        if (w) {
            w->req = NULL;
            if (r)
                r->wait = NULL;
        }
        op->req = NULL;
        if (r)
            req_err(r, PROTO_EBACKEND, "Redis did not answer in time");
        return;
    }
    finish_lock(d, op, rep, apply_grants(d, rep));
    free(op);
}

static void lock_args(struct dlockd *d, const char *hid, const char *client, const char *wid, int wait, int64_t lease,
                      char nums[4][24], const char *args[8])
{
    int64_t ttl = lease > 0 && lease < d->cfg.lock_lease ? lease : d->cfg.lock_lease;

    snprintf(nums[0], 24, "%" PRId64, ttl);
    snprintf(nums[1], 24, "%" PRId64, lease > 0 ? lease : d->cfg.lock_lease);
    snprintf(nums[2], 24, "%" PRId64, d->cfg.lock_lease * 2 / 3);
    args[0] = hid;
    args[1] = client;
    args[2] = wid;
    args[3] = wait ? "1" : "0";
    args[4] = nums[0];
    args[5] = nums[1];
    args[6] = lease > 0 ? "1" : "0";
    args[7] = nums[2];
}

/* Sends lock.lua for a wait (first time, or again after its entry lapsed). */
static void wait_submit(struct wait *w)
{
    struct dlockd *d = w->d;
    struct op *op = op_new(w->req, w->req ? w->req->sid : "", w->name, w->hid);
    char nums[4][24];
    const char *args[8];

    snprintf(op->wid, sizeof(op->wid), "%s", w->wid);
    op->lease = w->lease;
    w->queued = 0;
    lock_args(d, w->hid, w->client, w->wid, 1, w->lease, nums, args);
    if (name_script(d, SCRIPT_LOCK, w->name, 8, args, on_lock, on_lock_late, op)) {
        free(op);
        if (w->req)
            req_err(w->req, PROTO_EBACKEND, "Redis is not reachable");
        w->req = NULL;
        wait_free(w);
    }
}

static struct wait *wait_new(struct req *r, struct session *s, const char *name, const char *hid)
{
    struct dlockd *d = r->d;
    struct wait *w = calloc(1, sizeof(*w));

    if (w == NULL)
        fatalx("lock: out of memory");
    w->d = d;
    snprintf(w->wid, sizeof(w->wid), "%s.%" PRIx64, d->id, ++d->next_wait);
    w->req = r;
    w->s = s;
    snprintf(w->name, sizeof(w->name), "%s", name);
    snprintf(w->hid, sizeof(w->hid), "%s", hid);
    snprintf(w->client, sizeof(w->client), "%s", s->name);
    w->lease = r->pr.lease_ms;
    deadline_init(&w->timeout, wait_on_timeout);
    deadline_init(&w->retry, wait_on_retry);
    if (r->pr.wait_ms != PROTO_WAIT_INF)
        deadline_arm(d->deadlines, &w->timeout, r->arrived + (uint64_t)r->pr.wait_ms);
    dict_set(d->waits, w->wid, w);
    TAILQ_INSERT_TAIL(&s->waits, w, in_session);
    r->wait = w;
    return w;
}

void lock_lock(struct req *r)
{
    struct dlockd *d = r->d;
    struct session *s = req_session(r);
    const char *name = r->pr.names[0];
    char hid[HID_MAX + 1], wid[64], nums[4][24];
    const char *args[8];
    struct op *op;

    if (r->pr.nnames > 1) {
        req_err(r, PROTO_ESYNTAX, "several names in one LOCK are not supported yet");
        return;
    }
    make_hid(hid, (r->pr.flags & PROTO_F_SHARED) ? 's' : 'x', s->id, r->pr.owner);
    if (s->nholds >= d->cfg.max_holds && hold_find(d, name, hid) == NULL) {
        req_err(r, PROTO_ELIMIT, "session holds %d locks, the most max-holds allows", s->nholds);
        return;
    }
    if (r->pr.wait_ms != 0) {
        if ((int64_t)dict_size(d->waits) >= d->cfg.max_waiters) {
            req_err(r, PROTO_ELIMIT, "max-waiters reached");
            return;
        }
        if (!redis_up(d->redis)) {
            req_err(r, PROTO_EBACKEND, "Redis is not reachable");
            return;
        }
        wait_submit(wait_new(r, s, name, hid));
        return;
    }
    snprintf(wid, sizeof(wid), "%s.%" PRIx64, d->id, ++d->next_wait);
    op = op_new(r, s->id, name, hid);
    op->lease = r->pr.lease_ms;
    lock_args(d, hid, s->name, wid, 0, op->lease, nums, args);
    if (name_script(d, SCRIPT_LOCK, name, 8, args, on_lock, on_lock_late, op)) {
        free(op);
        req_err(r, PROTO_EBACKEND, "Redis is not reachable");
    }
}

/* --- cancelling waits */

static void on_cancel(struct dlockd *d, redisReply *rep, void *arg)
{
    char *wid = arg, buf[32], st[16], token[32];
    struct wait *w;
    size_t f;

    if (rep == NULL) {
        if ((w = dict_get(d->waits, wid)) != NULL) {
            if (w->req)
                req_err(w->req, PROTO_EBACKEND, "Redis did not answer in time");
            w->req = NULL;
            wait_free(w);
        }
        free(wid);
        return;
    }
    f = apply_grants(d, rep);
    if ((w = dict_get(d->waits, wid)) != NULL) {
        snprintf(st, sizeof(st), "%s", redis_elem(rep, 0, buf, sizeof(buf)));
        snprintf(token, sizeof(token), "%s", redis_elem(rep, f, buf, sizeof(buf)));
        if (strcmp(st, "GRANTED") == 0) {
            wait_granted(w, token, redis_elem_int(rep, f + 1));
        } else if (w->resubmit && w->req && !w->timed_out) {
            w->cancelling = w->resubmit = 0;
            wait_submit(w);
        } else {
            if (w->req) {
                d->stats.timeouts++;
                req_reply(w->req, "TIMEOUT", NULL);
            }
            w->req = NULL;
            wait_free(w);
        }
    }
    free(wid);
}

/* Takes w out of its queue; the reply says whether it was granted first. */
static void wait_cancel(struct wait *w)
{
    const char *args[] = { w->wid, w->hid };
    char *wid;

    if (w->cancelling || !w->queued)
        return; /* the cancel or the submit in flight decides */
    w->cancelling = 1;
    deadline_cancel(w->d->deadlines, &w->retry);
    if ((wid = strdup(w->wid)) == NULL)
        fatalx("lock: out of memory");
    if (name_script(w->d, SCRIPT_CANCEL, w->name, 2, args, on_cancel, NULL, wid)) {
        free(wid);
        if (w->req)
            req_err(w->req, PROTO_EBACKEND, "Redis is not reachable");
        w->req = NULL;
        wait_free(w);
    }
}

void lock_wait_lapsed(struct dlockd *d, const char *wid)
{
    struct wait *w = dict_get(d->waits, wid);

    if (w == NULL || w->cancelling)
        return;
    log_debug("wait %s: queue entry lapsed, checking", wid);
    w->resubmit = 1;
    wait_cancel(w);
}

/* Forgets the request of w; the wait is cancelled in Redis. */
static void wait_abandon(struct wait *w)
{
    struct req *r = w->req;

    if (w->s) {
        TAILQ_REMOVE(&w->s->waits, w, in_session);
        w->s = NULL;
    }
    w->req = NULL;
    if (r) {
        r->wait = NULL;
        req_drop(r);
    }
    w->timed_out = 1;
    wait_cancel(w);
}

void lock_conn_closed(struct conn *c)
{
    struct req *r, *next;

    for (r = TAILQ_FIRST(&c->running); r != NULL; r = next) {
        next = TAILQ_NEXT(r, link);
        if (r->wait)
            wait_abandon(r->wait);
    }
}

void lock_session_end(struct session *s, const char *lost_reason)
{
    struct dlockd *d = s->d;
    struct wait *w;
    struct hold *h;

    while ((w = TAILQ_FIRST(&s->waits)) != NULL)
        wait_abandon(w);
    while ((h = TAILQ_FIRST(&s->holds)) != NULL) {
        char name[PROTO_NAME_MAX + 1], hid[HID_MAX + 1], token[24];
        if (lost_reason)
            conn_event(s->conn, "LOST %s token=%s reason=%s", h->name, h->token, lost_reason);
        memcpy(name, h->name, sizeof(name));
        memcpy(hid, h->hid, sizeof(hid));
        memcpy(token, h->token, sizeof(token));
        hold_remove(d, h);
        release(d, name, hid, token);
    }
}

/* --- UNLOCK */

static void on_unlock(struct dlockd *d, redisReply *rep, void *arg)
{
    struct op *op = arg;
    char buf[32], st[16], mode[2], hid[HID_MAX + 2];
    long long left;
    struct hold *h;
    size_t f;

    if (rep == NULL) {
        if (op->req)
            req_err(op->req, PROTO_EBACKEND, "Redis did not answer in time");
        free(op);
        return;
    }
    f = apply_grants(d, rep);
    snprintf(st, sizeof(st), "%s", redis_elem(rep, 0, buf, sizeof(buf)));
    if (strcmp(st, "OK") != 0) {
        if (op->req)
            req_err(op->req, PROTO_ENOTHELD, "'%s' is not held by this session and owner", op->name);
        free(op);
        return;
    }
    left = redis_elem_int(rep, f);
    snprintf(mode, sizeof(mode), "%s", redis_elem(rep, f + 1, buf, sizeof(buf)));
    snprintf(hid, sizeof(hid), "%s%s", mode, op->hid);
    if ((h = hold_find(d, op->name, hid)) != NULL) {
        if (left > 0)
            h->count = left;
        else
            hold_remove(d, h);
    }
    if (op->req)
        req_reply(op->req, "OK", "count=%lld", left);
    free(op);
}

void lock_unlock(struct req *r)
{
    struct dlockd *d = r->d;
    struct session *s = req_session(r);
    const char *name = r->pr.names[0];
    char who[HID_MAX + 1];
    const char *args[4];
    struct op *op;

    if (r->pr.nnames > 1) {
        req_err(r, PROTO_ESYNTAX, "several names in one UNLOCK are not supported yet");
        return;
    }
    snprintf(who, sizeof(who), "%s:%s", s->id, r->pr.owner);
    op = op_new(r, s->id, name, who); /* op->hid holds session:owner here */
    args[0] = who;
    args[1] = (r->pr.flags & PROTO_F_SHARED) ? "s" : "";
    args[2] = (r->pr.flags & PROTO_F_ALL) ? "1" : "0";
    args[3] = "";
    if (name_script(d, SCRIPT_UNLOCK, name, 4, args, on_unlock, NULL, op)) {
        free(op);
        req_err(r, PROTO_EBACKEND, "Redis is not reachable");
    }
}

/* --- STATUS */

static json_t *holder_json(const redisReply *rep, size_t i)
{
    char buf[32], hid[HID_MAX + 1], sid[DLOCKD_ID_LEN + 1];

    snprintf(hid, sizeof(hid), "%s", redis_elem(rep, i, buf, sizeof(buf)));
    snprintf(sid, sizeof(sid), "%.*s", DLOCKD_ID_LEN, hid + 1);
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I}", "session", sid, "client",
                     redis_elem(rep, i + 1, buf, sizeof(buf)), "owner",
                     strlen(hid) > DLOCKD_ID_LEN + 2 ? hid + DLOCKD_ID_LEN + 2 : "", "mode",
                     hid[0] == 'x' ? "exclusive" : "shared", "count", (json_int_t)redis_elem_int(rep, i + 2),
                     "token", (json_int_t)redis_elem_int(rep, i + 3), "held_ms",
                     (json_int_t)redis_elem_int(rep, i + 4));
}

static void on_status(struct dlockd *d, redisReply *rep, void *arg)
{
    struct op *op = arg;
    json_t *doc, *holders;
    long long waiters;
    char *text;
    size_t f;

    if (rep == NULL) {
        if (op->req)
            req_err(op->req, PROTO_EBACKEND, "Redis did not answer in time");
        free(op);
        return;
    }
    f = apply_grants(d, rep);
    waiters = redis_elem_int(rep, f);
    holders = json_array();
    for (size_t i = f + 1; i + 4 < rep->elements; i += 5)
        json_array_append_new(holders, holder_json(rep, i));
    doc = json_pack("{s:s, s:o, s:o, s:I}", "name", op->name, "type",
                    json_array_size(holders) || waiters ? json_string("lock") : json_null(), "holders", holders,
                    "waiters", (json_int_t)waiters);
    text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (op->req)
        req_reply(op->req, "OK", "%s", text);
    free(text);
    json_decref(doc);
    free(op);
}

void lock_status(struct req *r)
{
    struct op *op = op_new(r, r->sid, r->pr.names[0], "");

    if (name_script(r->d, SCRIPT_STATUS, op->name, 0, NULL, on_status, NULL, op)) {
        free(op);
        req_err(r, PROTO_EBACKEND, "Redis is not reachable");
    }
}
