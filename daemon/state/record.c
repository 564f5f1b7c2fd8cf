/* record.c - a session's record in Redis (scripts/session.lua): written at
 * HELLO, claimed by the daemon the session resumes on, indexed with the names
 * it may hold, kept alive by the renewal, deleted when the session ends. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "dict.h"
#include "conn.h"
#include "hold.h"
#include "hooks.h"
#include "log.h"
#include "record.h"
#include "redis.h"
#include "session.h"
#include "strbuf.h"

#define RECORD_MARGIN_MS 1000 /* a record outlives the holds it lists by this much */
#define RECORD_TOMBSTONE_MS "10000" /* what is left of an ended record names its daemon this long */
#define TOUCH_BATCH 200       /* records per renewal call */

/* Index changes not sent yet: key, field, key, field, ... */
static struct {
    struct dlockd *d;
    struct event *flush;
    char **v;
    int n, cap;
} pend;

static void on_done(struct dlockd *d, redisReply *rep, void *arg)
{
    (void)d;
    (void)arg;
    if (rep == NULL)
        log_debug("record: a change of session records not confirmed");
}

static void session_key(char *buf, size_t len, const struct session *s)
{
    contract_session_key(buf, len, s->d->cfg.key_prefix, s->id);
}

/* How long s's record lives unrenewed: as long as its holds, and its ttl at least. */
static long long expiry_ms(const struct session *s)
{
    return session_redis_lease(s->d, s) + RECORD_MARGIN_MS;
}

/* A put in flight: the session it is for, and who waits for it. */
struct put {
    char sid[DLOCKD_ID_LEN + 1];
    int takeover;
    record_put_cb *done;
    void *arg;
};

static void on_put(struct dlockd *d, redisReply *rep, void *arg)
{
    struct put *p = arg;
    struct session *s = session_find(d, p->sid);
    int result = rep == NULL || rep->type == REDIS_REPLY_ERROR ? RECORD_UNKNOWN
                 : rep->type == REDIS_REPLY_INTEGER        ? RECORD_REFUSED
                                                           : RECORD_WRITTEN;
    struct contract_record back;

    if (s && result == RECORD_UNKNOWN && !p->takeover)
        s->record_dirty = 1; /* the next renewal writes it whole */
    else if (s && result == RECORD_REFUSED && !p->takeover)
        d->hooks->check_moved(d, p->sid, NULL, NULL); /* another daemon has it, or ended it */
    if (p->done)
        p->done(d, result, result == RECORD_WRITTEN && contract_record(rep, &back) == 0 ? &back : NULL, p->arg);
    free(p);
}

/* Appends "i<hid> <name>" and its token ("0" for a wait's name) to argv's strings in buf. */
struct putv {
    const char **argv;
    int argc, cap;
    char *buf;
    size_t len, bufcap;
};

static void putv_add(struct putv *v, const char *str)
{
    size_t len = strlen(str) + 1;

    if (v->argc == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 32;
        v->argv = must(realloc(v->argv, (size_t)v->cap * sizeof(*v->argv)));
    }
    if (v->len + len > v->bufcap) {
        /* offsets, not pointers, until the end: buf may move */
        v->bufcap = (v->len + len) * 2;
        v->buf = must(realloc(v->buf, v->bufcap));
    }
    memcpy(v->buf + v->len, str, len);
    v->argv[v->argc++] = (const char *)(uintptr_t)v->len;
    v->len += len;
}

static void put_entry(const char *hid, const char *name, const char *token, void *arg)
{
    char field[CONTRACT_KEY_MAX + HID_MAX + 32];

    contract_record_change(field, sizeof(field), 1, NULL, hid, name);
    putv_add(arg, field + 1);
    putv_add(arg, token);
}

int record_put(struct session *s, const char *from, record_put_cb *done, void *arg)
{
    struct dlockd *d = s->d;
    char key[CONTRACT_KEY_MAX], ms[24], ttl[24], hash[2 * SESSION_HASH_LEN + 1];
    const char *head[] = { "put", d->cfg.key_prefix, s->id, ms, from ? from : "", CONTRACT_REC_DAEMON, d->id,
                           CONTRACT_REC_CLIENT,
                           s->name, CONTRACT_REC_TTL, ttl, CONTRACT_REC_HASH, hash, CONTRACT_REC_PEER,
                           s->conn ? s->conn->peer : "" };
    struct putv v = { 0 };
    struct put *p;
    int rc = 0;

    if (!s->has_secret)
        return -1;
    session_key(key, sizeof(key), s);
    snprintf(ms, sizeof(ms), "%lld", expiry_ms(s));
    snprintf(ttl, sizeof(ttl), "%lld", (long long)s->ttl);
    for (int i = 0; i < SESSION_HASH_LEN; i++)
        snprintf(hash + 2 * i, 3, "%02x", s->secret_hash[i]);
    putv_add(&v, key);
    for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
        putv_add(&v, head[i]);
    if (s->killed) {
        putv_add(&v, CONTRACT_REC_KILLED);
        putv_add(&v, "1");
    }
    /* The whole index: what the session holds, and may be granted. */
    d->hooks->each_index(s, put_entry, &v);
    for (int i = 0; i < v.argc; i++)
        v.argv[i] = v.buf + (uintptr_t)v.argv[i];
    p = must(calloc(1, sizeof(*p)));
    memcpy(p->sid, s->id, sizeof(p->sid));
    p->takeover = from != NULL;
    p->done = done;
    p->arg = arg;
    s->record_dirty = 0;
    if (redis_script(d->redis, SCRIPT_SESSION, 1, v.argc, v.argv, on_put, NULL, p)) {
        s->record_dirty = from == NULL;
        free(p);
        rc = -1;
    }
    free(v.argv);
    free(v.buf);
    return rc;
}

struct fetch {
    record_cb *cb;
    void *arg;
};

static void on_fetched(struct dlockd *d, redisReply *rep, void *arg)
{
    struct fetch f = *(struct fetch *)arg;
    struct contract_record rec;

    free(arg);
    if (rep == NULL)
        f.cb(d, NULL, 0, f.arg);
    else
        f.cb(d, contract_record(rep, &rec) == 0 ? &rec : NULL, 1, f.arg);
}

int record_fetch(struct dlockd *d, const char *sid, record_cb *cb, void *arg)
{
    char key[CONTRACT_KEY_MAX];
    const char *argv[] = { key, "get" };
    struct fetch *f = must(malloc(sizeof(*f)));

    *f = (struct fetch){ cb, arg };
    contract_session_key(key, sizeof(key), d->cfg.key_prefix, sid);
    if (redis_script(d->redis, SCRIPT_SESSION, 1, 2, argv, on_fetched, NULL, f)) {
        free(f);
        return -1;
    }
    return 0;
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    record_flush(arg);
}

static void change(struct session *s, int add, const char *token, const char *hid, const char *name)
{
    char key[CONTRACT_KEY_MAX], field[CONTRACT_KEY_MAX + HID_MAX + 32];

    if (!s->has_secret)
        return;
    if (pend.flush == NULL) {
        pend.d = s->d;
        pend.flush = must(event_new(s->d->base, -1, 0, on_flush, s->d));
    }
    if (pend.n + 2 > pend.cap) {
        pend.cap = pend.cap ? 2 * pend.cap : 64;
        pend.v = must(realloc(pend.v, (size_t)pend.cap * sizeof(*pend.v)));
    }
    session_key(key, sizeof(key), s);
    contract_record_change(field, sizeof(field), add, token, hid, name);
    pend.v[pend.n] = must(strdup(key));
    pend.v[pend.n + 1] = must(strdup(field));
    pend.n += 2;
    event_active(pend.flush, EV_TIMEOUT, 0);
}

void record_index(struct session *s, const char *hid, const char *name, int add)
{
    change(s, add, NULL, hid, name);
}

void record_granted(struct session *s, const char *hid, const char *name, const char *token)
{
    change(s, 1, token, hid, name);
}

void record_waiting(struct session *s, const char *hid, const char *name, const char *wid)
{
    char value[80];

    value[0] = 'w';
    str_copy(value + 1, sizeof(value) - 1, wid);
    change(s, 1, value, hid, name);
}

const char *record_carried(const struct session *s, char *buf, size_t len)
{
    if (!s->has_secret || redis_slots(s->d->redis) != 1)
        return NULL;
    session_key(buf, len, s);
    return buf;
}

static void drop_pending(void)
{
    for (int i = 0; i < pend.n; i++)
        free(pend.v[i]);
    pend.n = 0;
}

/* The changes of the records in the slot of change first (and in no
 * later-numbered change yet; slots[i] is -1 once sent): KEYS one record per
 * change; ARGV "index", this daemon, the key prefix, then "1" and the change,
 * for each. */
static void flush_slot(struct dlockd *d, int first, int *slots, const char **keys, const char **argv)
{
    int nkeys = 0, slot = slots[first];

    for (int i = first; i < pend.n / 2; i++)
        if (slots[i] == slot)
            keys[nkeys++] = pend.v[2 * i];
    memcpy(argv, keys, (size_t)nkeys * sizeof(*argv));
    argv[nkeys] = "index";
    argv[nkeys + 1] = d->id;
    argv[nkeys + 2] = d->cfg.key_prefix;
    for (int i = first, j = 0; i < pend.n / 2; i++) {
        if (slots[i] != slot)
            continue;
        argv[nkeys + 3 + 2 * j] = "1";
        argv[nkeys + 4 + 2 * j++] = pend.v[2 * i + 1];
        slots[i] = -1;
    }
    if (redis_script(d->redis, SCRIPT_SESSION, nkeys, 3 * nkeys + 3, argv, on_done, NULL, NULL))
        log_debug("record: %d index changes not sent: no link", nkeys);
}

void record_flush(struct dlockd *d)
{
    const char **keys, **argv;
    int *slots;

    if (pend.n == 0)
        return;
    keys = must(malloc((size_t)pend.n * sizeof(*keys)));
    argv = must(malloc((size_t)(pend.n * 2 + 3) * sizeof(*argv)));
    slots = must(malloc((size_t)pend.n * sizeof(*slots)));
    for (int i = 0; i < pend.n / 2; i++)
        slots[i] = redis_slot(d->redis, pend.v[2 * i]);
    for (int i = 0; i < pend.n / 2; i++)
        if (slots[i] >= 0)
            flush_slot(d, i, slots, keys, argv);
    free(slots);
    free(keys);
    free(argv);
    drop_pending();
}

void record_told(struct session *s)
{
    char *buf = s->untold, *line = buf, *end = buf + s->untold_len;

    s->untold = NULL;
    s->untold_len = 0;
    while (line && line < end) {
        char *nl = memchr(line, '\n', (size_t)(end - line)), *sp = memchr(line, ' ', (size_t)(nl - line));
        *nl = *sp = '\0';
        if (hold_find(s->d, sp + 1, line) == NULL) /* not granted again since */
            s->d->hooks->hold_ended(s, line, sp + 1, NULL);
        line = nl + 1;
    }
    free(buf);
}

void record_delete(struct session *s)
{
    char key[CONTRACT_KEY_MAX];
    const char *argv[] = { key, "del", s->d->id, RECORD_TOMBSTONE_MS, s->killed ? CONTRACT_REC_KILLED : "" };

    if (!s->has_secret)
        return;
    session_key(key, sizeof(key), s);
    if (redis_script(s->d->redis, SCRIPT_SESSION, 1, 5, argv, on_done, NULL, NULL))
        log_debug("record: s%s left to expire: no link", s->id);
}

/* A record to renew. */
struct touched {
    char key[CONTRACT_KEY_MAX];
    char ms[24];
    char sid[DLOCKD_ID_LEN + 1];
};

/* A renewal call being filled: keys, then "touch", then their expiries. */
struct touch {
    int n, cap;           /* TOUCH_BATCH; 1 with Redis Cluster, where each record is in a slot of its own */
    struct touched e[];   /* cap of them */
};

static struct touch *touch_new(struct dlockd *d)
{
    int cap = redis_slots(d->redis) > 1 ? 1 : TOUCH_BATCH;
    struct touch *t = must(calloc(1, sizeof(*t) + (size_t)cap * sizeof(t->e[0])));

    t->cap = cap;
    return t;
}

/* The records Redis no longer has (it lost them, or never got them) are written again whole. */
static void on_touched(struct dlockd *d, redisReply *rep, void *arg)
{
    struct touch *t = arg;

    for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++) {
        long long at = redis_elem_int(rep, i) - 1;
        struct session *s = at >= 0 && at < t->n ? session_find(d, t->e[at].sid) : NULL;
        if (s)
            record_put(s, NULL, NULL, NULL);
    }
    free(t);
}

/* Sends *tp when it has records; a new one is filled next. */
static void touch_send(struct dlockd *d, struct touch **tp)
{
    struct touch *t = *tp;
    const char *argv[2 * TOUCH_BATCH + 1];

    if (t->n == 0)
        return;
    for (int i = 0; i < t->n; i++) {
        argv[i] = t->e[i].key;
        argv[t->n + 1 + i] = t->e[i].ms;
    }
    argv[t->n] = "touch";
    if (redis_script(d->redis, SCRIPT_SESSION, t->n, 2 * t->n + 1, argv, on_touched, NULL, t)) {
        log_debug("record: %d records not renewed: no link", t->n);
        t->n = 0;
        return;
    }
    *tp = touch_new(d);
}

static int touch_one(const char *key, void *val, void *arg)
{
    struct session *s = val;
    struct touch **tp = arg, *t = *tp;

    (void)key;
    if (!s->has_secret || s->claiming)
        return 0;
    if (s->record_dirty) {
        record_put(s, NULL, NULL, NULL);
        return 0;
    }
    session_key(t->e[t->n].key, sizeof(t->e[t->n].key), s);
    snprintf(t->e[t->n].ms, sizeof(t->e[t->n].ms), "%lld", expiry_ms(s));
    memcpy(t->e[t->n].sid, s->id, sizeof(t->e[t->n].sid));
    if (++t->n == t->cap)
        touch_send(s->d, tp);
    return 0;
}

void record_renew(struct dlockd *d)
{
    struct touch *t = touch_new(d);

    dict_each(d->sessions, touch_one, &t);
    touch_send(d, &t);
    free(t);
}

void record_free_all(struct dlockd *d)
{
    (void)d;
    drop_pending();
    free(pend.v);
    if (pend.flush)
        event_free(pend.flush);
    memset(&pend, 0, sizeof(pend));
}
