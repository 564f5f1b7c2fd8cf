/* hold.c - the holds of this daemon's sessions as Redis last confirmed them:
 * what renewal extends, what a session's end releases, what lease= ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "dict.h"
#include "dlockd.h"
#include "hold.h"
#include "log.h"
#include "mem.h"
#include "session.h"
#include "wait.h"

static const char suffixes[NAME_KEYS] = "hxqwtml"; /* one Redis key per letter, see scripts/common.lua */

void hold_key(struct dlockd *d, char *buf, size_t len, const char *name, char suffix)
{
    snprintf(buf, len, "%s{%s}:%c", d->cfg.key_prefix, name, suffix);
}

/* A script call in flight: the caller's callbacks. */
struct call {
    enum script_id id;
    redis_cb *cb, *late;
    void *arg;
};

static int run(struct dlockd *d, enum script_id id, int nnames, const char *const *names, int nargs,
               const char **args, int bounded, redis_cb *cb, redis_cb *late, void *arg);

/* The Redis time after which a script sent now must not start: a quarter
 * short of backend-timeout, so its answer is in before dlockd gives up on
 * it. 0 (none) until a reply has shown Redis's clock. */
static long long deadline_now(const struct dlockd *d)
{
    if (d->redis_offset_at == 0)
        return 0;
    return (long long)now_ms() + d->redis_offset + d->cfg.backend_timeout - d->cfg.backend_timeout / 4;
}

/* Redis read its time before dlockd received the reply: the difference is a
 * lower bound of the offset between the clocks. The best one is kept, but
 * after trouble on the link (maybe another Redis) the latest replaces it. */
static void learn_clock(struct dlockd *d, const redisReply *rep)
{
    long long redis_now = redis_elem_int(rep, REPLY_NOW);
    uint64_t now = now_ms();
    int64_t lower = (int64_t)redis_now - (int64_t)now;

    if (redis_now <= 0)
        return;
    if (d->redis_offset_at == 0 || redis_trouble_since(d->redis, d->redis_offset_at) || lower > d->redis_offset)
        d->redis_offset = lower;
    d->redis_offset_at = now;
}

static int is_late(const redisReply *rep)
{
    char buf[32];

    return strcmp(redis_elem(rep, REPLY_STATUS, buf, sizeof(buf)), "LATE") == 0;
}

/* A script that answers nobody: its grants are handed out. */
static void on_background(struct dlockd *d, redisReply *rep, void *arg)
{
    (void)arg;
    if (rep)
        wait_apply_grants(d, rep);
}

/* A script stops handing a name on after a bounded number of grants: the
 * daemon that ran it goes on, one poke at a time, until nothing more fits. */
static void go_on(struct dlockd *d, const redisReply *rep)
{
    char buf[32], *names = strdup(redis_elem(rep, REPLY_MORE, buf, sizeof(buf))), *save;

    if (names == NULL)
        fatalx("hold: out of memory");
    for (char *name = strtok_r(names, " ", &save); name; name = strtok_r(NULL, " ", &save)) {
        const char *one = name;
        if (run(d, SCRIPT_POKE, 1, &one, 0, NULL, 0, on_background, NULL, NULL))
            log_warnx("backend down: '%s' is handed on by the next script on it", name);
    }
    free(names);
}

/* The first answer. A LATE reply changed nothing: the caller hears no answer
 * and, if it waits for a late one, that none comes. */
static void on_answer(struct dlockd *d, redisReply *rep, void *arg)
{
    struct call *c = arg;

    if (rep == NULL) {
        c->cb(d, NULL, c->arg); /* on_late follows */
        return;
    }
    learn_clock(d, rep);
    if (is_late(rep)) {
        log_info("backend: %s started after its deadline and changed nothing", scripts[c->id].name);
        c->cb(d, NULL, c->arg);
        if (c->late)
            c->late(d, NULL, c->arg);
    } else {
        c->cb(d, rep, c->arg);
        go_on(d, rep);
    }
    free(c);
}

/* The reply after the call timed out, or NULL when none will come. Grants
 * in it reach wait_apply_grants even when the caller does not look. */
static void on_late(struct dlockd *d, redisReply *rep, void *arg)
{
    struct call *c = arg;

    if (rep)
        learn_clock(d, rep);
    if (rep && is_late(rep))
        rep = NULL;
    if (c->late)
        c->late(d, rep, c->arg);
    else if (rep)
        wait_apply_grants(d, rep);
    if (rep)
        go_on(d, rep);
    free(c);
}

static int run(struct dlockd *d, enum script_id id, int nnames, const char *const *names, int nargs,
               const char **args, int bounded, redis_cb *cb, redis_cb *late, void *arg)
{
    int nkeys = nnames * NAME_KEYS, argc = nkeys + 4 + nnames + nargs, rc, n = 0;
    size_t plen = strlen(d->cfg.key_prefix), size = 0;
    const char **argv = malloc((size_t)argc * sizeof(*argv));
    char count[16], deadline[24], *keys, *p;
    struct call *c = malloc(sizeof(*c));

    for (int i = 0; i < nnames; i++)
        size += NAME_KEYS * (plen + strlen(names[i]) + 5);
    if (argv == NULL || c == NULL || (keys = p = malloc(size + 1)) == NULL)
        fatalx("hold: out of memory");
    for (int i = 0; i < nnames; i++) {
        /* The keys of a name differ only in their last letter. */
        size_t len = plen + strlen(names[i]) + 4;
        hold_key(d, p, len + 1, names[i], suffixes[0]);
        for (int j = 0; j < NAME_KEYS; j++, p += len + 1) {
            if (j > 0)
                memcpy(p, p - len - 1, len + 1);
            p[len - 1] = suffixes[j];
            argv[n++] = p;
        }
    }
    snprintf(count, sizeof(count), "%d", nnames);
    snprintf(deadline, sizeof(deadline), "%lld", bounded ? deadline_now(d) : 0);
    argv[n++] = d->cfg.key_prefix;
    argv[n++] = d->id;
    argv[n++] = deadline;
    argv[n++] = count;
    for (int i = 0; i < nnames; i++)
        argv[n++] = names[i];
    for (int i = 0; i < nargs; i++)
        argv[n++] = args[i];
    *c = (struct call){ id, cb, late, arg };
    rc = redis_script(d->redis, id, nkeys, argc, argv, on_answer, on_late, c);
    if (rc)
        free(c);
    free(argv);
    free(keys);
    return rc;
}

int hold_script(struct dlockd *d, enum script_id id, int nnames, const char *const *names, int nargs,
                const char **args, redis_cb *cb, redis_cb *late, void *arg)
{
    return run(d, id, nnames, names, nargs, args, 1, cb, late, arg);
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

void hold_remove(struct dlockd *d, struct hold *h)
{
    TAILQ_REMOVE(&h->s->holds, h, in_session);
    h->s->nholds--;
    d->nholds--;
    TAILQ_REMOVE(&h->ln->holds, h, in_name);
    if (TAILQ_EMPTY(&h->ln->holds)) {
        dict_del(d->names, h->ln->name);
        mem_free(h->ln, sizeof(*h->ln));
    }
    if (h->lease) {
        deadline_cancel(d->deadlines, &h->lease->dl);
        free(h->lease);
    }
    mem_free(h, sizeof(*h) + strlen(h->hid) + 1);
}

/* Forgets h here and releases it in Redis. */
static void drop(struct dlockd *d, struct hold *h, int64_t delay)
{
    char name[PROTO_NAME_MAX + 1], hid[HID_MAX + 1], token[TOKEN_MAX];

    snprintf(name, sizeof(name), "%s", h->ln->name);
    snprintf(hid, sizeof(hid), "%s", h->hid);
    snprintf(token, sizeof(token), "%llu", h->token);
    hold_remove(d, h);
    hold_release(d, name, hid, token, 1, 0, delay);
}

static void on_lease_end(struct deadline *dl)
{
    struct hold *h = container_of(dl, struct hold_lease, dl)->h;

    conn_event(h->s->conn, "LOST %s token=%llu reason=lease", h->ln->name, h->token);
    log_debug("s%s: lease of '%s' ended", h->s->id, h->ln->name);
    drop(h->s->d, h, 0);
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
        memcpy(h->hid, hid, hlen + 1);
        if (lease > 0) {
            if ((h->lease = malloc(sizeof(*h->lease))) == NULL)
                fatalx("hold: out of memory");
            h->lease->h = h;
            deadline_init(&h->lease->dl, on_lease_end);
            deadline_arm(d->deadlines, &h->lease->dl, now_ms() + (uint64_t)lease);
        }
        h->ln = name_get(d, name);
        TAILQ_INSERT_TAIL(&s->holds, h, in_session);
        TAILQ_INSERT_TAIL(&h->ln->holds, h, in_name);
        s->nholds++;
        d->nholds++;
    }
    h->token = strtoull(token, NULL, 10);
    h->count = count;
}

void hold_count(struct dlockd *d, const char *name, const char *hid, long long count)
{
    struct hold *h = hold_find(d, name, hid);

    if (h == NULL)
        return;
    if (count > 0)
        h->count = count;
    else
        hold_remove(d, h);
}

void hold_lost(struct dlockd *d, const char *name, const char *hid, const char *token, const char *reason)
{
    struct hold *h = hold_find(d, name, hid);

    if (h == NULL || h->token != strtoull(token, NULL, 10))
        return;
    d->stats.lost++;
    log_info("s%s: lost '%s' token=%llu (%s)", h->s->id, name, h->token, reason);
    conn_event(h->s->conn, "LOST %s token=%llu reason=%s", name, h->token, reason);
    hold_remove(d, h);
}

void hold_release(struct dlockd *d, const char *name, const char *hid, const char *token, int all, long long k,
                  int64_t delay)
{
    char who[HID_MAX + 1], mode[2] = { hid[0], '\0' }, kbuf[24], dbuf[24];
    const char *args[] = { who, mode, all ? "1" : "0", token, kbuf, dbuf };

    snprintf(who, sizeof(who), "%s", hid + 1);
    snprintf(kbuf, sizeof(kbuf), "%lld", k);
    snprintf(dbuf, sizeof(dbuf), "%lld", (long long)delay);
    /* No deadline: it checks the token, so it may run whenever Redis gets to it. */
    if (run(d, SCRIPT_UNLOCK, 1, &name, 6, args, 0, on_background, NULL, NULL))
        log_warnx("backend down: '%s' is left to its lease in Redis", name);
}

void hold_release_session(struct session *s, int expired)
{
    struct hold *h;

    while ((h = TAILQ_FIRST(&s->holds)) != NULL) {
        if (expired)
            conn_event(s->conn, "LOST %s token=%llu reason=expired", h->ln->name, h->token);
        drop(s->d, h, expired ? s->d->cfg.lock_delay : 0);
    }
}
