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
#include "session.h"
#include "wait.h"

void hold_keys(struct dlockd *d, const char *name, char keys[NAME_KEYS][KEY_MAX])
{
    static const char suffix[] = "hxqwtml";

    for (int i = 0; i < NAME_KEYS; i++)
        snprintf(keys[i], KEY_MAX, "%s{%s}:%c", d->cfg.key_prefix, name, suffix[i]);
}

int hold_script(struct dlockd *d, enum script_id id, int nnames, const char *const *names, int nargs,
                const char **args, redis_cb *cb, redis_cb *late, void *arg)
{
    int nkeys = nnames * NAME_KEYS, argc = nkeys + 3 + nnames + nargs, rc;
    char (*keys)[NAME_KEYS][KEY_MAX] = malloc((size_t)nnames * sizeof(*keys));
    const char **argv = malloc((size_t)argc * sizeof(*argv));
    char count[16];
    int n = 0;

    if (keys == NULL || argv == NULL)
        fatalx("hold: out of memory");
    for (int i = 0; i < nnames; i++) {
        hold_keys(d, names[i], keys[i]);
        for (int j = 0; j < NAME_KEYS; j++)
            argv[n++] = keys[i][j];
    }
    snprintf(count, sizeof(count), "%d", nnames);
    argv[n++] = d->cfg.key_prefix;
    argv[n++] = d->id;
    argv[n++] = count;
    for (int i = 0; i < nnames; i++)
        argv[n++] = names[i];
    for (int i = 0; i < nargs; i++)
        argv[n++] = args[i];
    rc = redis_script(d->redis, id, nkeys, argc, argv, cb, late, arg);
    free(argv);
    free(keys);
    return rc;
}

struct lname *hold_name(struct dlockd *d, const char *name)
{
    return dict_get(d->names, name);
}

static void hold_key(char *key, size_t len, const char *name, const char *hid)
{
    snprintf(key, len, "%s\n%s", name, hid);
}

struct hold *hold_find(struct dlockd *d, const char *name, const char *hid)
{
    char key[HOLD_KEY_MAX];

    hold_key(key, sizeof(key), name, hid);
    return dict_get(d->holds, key);
}

void hold_remove(struct dlockd *d, struct hold *h)
{
    dict_del(d->holds, h->key);
    TAILQ_REMOVE(&h->s->holds, h, in_session);
    h->s->nholds--;
    TAILQ_REMOVE(&h->ln->holds, h, in_name);
    if (TAILQ_EMPTY(&h->ln->holds)) {
        dict_del(d->names, h->ln->name);
        free(h->ln);
    }
    deadline_cancel(d->deadlines, &h->lease_dl);
    free(h);
}

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
    hold_release(d, name, hid, token, 1, 0, 0);
}

static struct lname *name_get(struct dlockd *d, const char *name)
{
    struct lname *ln = dict_get(d->names, name);

    if (ln == NULL) {
        if ((ln = calloc(1, sizeof(*ln))) == NULL)
            fatalx("hold: out of memory");
        TAILQ_INIT(&ln->holds);
        snprintf(ln->name, sizeof(ln->name), "%s", name);
        dict_set(d->names, name, ln);
    }
    return ln;
}

void hold_set(struct session *s, const char *name, const char *hid, const char *token, long long count,
              int64_t lease)
{
    struct dlockd *d = s->d;
    struct hold *h = hold_find(d, name, hid);

    if (h == NULL) {
        if ((h = calloc(1, sizeof(*h))) == NULL)
            fatalx("hold: out of memory");
        h->s = s;
        hold_key(h->key, sizeof(h->key), name, hid);
        snprintf(h->name, sizeof(h->name), "%s", name);
        snprintf(h->hid, sizeof(h->hid), "%s", hid);
        h->since = now_ms();
        deadline_init(&h->lease_dl, on_lease_end);
        if (lease > 0) {
            h->lease_end = h->since + (uint64_t)lease;
            deadline_arm(d->deadlines, &h->lease_dl, h->lease_end);
        }
        h->ln = name_get(d, name);
        dict_set(d->holds, h->key, h);
        TAILQ_INSERT_TAIL(&s->holds, h, in_session);
        TAILQ_INSERT_TAIL(&h->ln->holds, h, in_name);
        s->nholds++;
    }
    snprintf(h->token, sizeof(h->token), "%s", token);
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

void hold_lost(struct dlockd *d, const char *key, const char *reason)
{
    struct hold *h = dict_get(d->holds, key);

    if (h == NULL)
        return;
    d->stats.lost++;
    log_info("s%s: lost '%s' token=%s (%s)", h->s->id, h->name, h->token, reason);
    conn_event(h->s->conn, "LOST %s token=%s reason=%s", h->name, h->token, reason);
    hold_remove(d, h);
}

static void on_release(struct dlockd *d, redisReply *rep, void *arg)
{
    (void)arg;
    if (rep)
        wait_apply_grants(d, rep);
}

void hold_release(struct dlockd *d, const char *name, const char *hid, const char *token, int all, long long k,
                  int64_t delay)
{
    char who[HID_MAX + 1], mode[2] = { hid[0], '\0' }, kbuf[24], dbuf[24];
    const char *args[] = { who, mode, all ? "1" : "0", token, kbuf, dbuf };

    snprintf(who, sizeof(who), "%s", hid + 1);
    snprintf(kbuf, sizeof(kbuf), "%lld", k);
    snprintf(dbuf, sizeof(dbuf), "%lld", (long long)delay);
    if (hold_script(d, SCRIPT_UNLOCK, 1, &name, 6, args, on_release, NULL, NULL))
        log_warnx("backend down: '%s' is left to its lease in Redis", name);
}

void hold_release_session(struct session *s, int expired)
{
    struct dlockd *d = s->d;
    struct hold *h;

    while ((h = TAILQ_FIRST(&s->holds)) != NULL) {
        char name[PROTO_NAME_MAX + 1], hid[HID_MAX + 1], token[24];
        if (expired)
            conn_event(s->conn, "LOST %s token=%s reason=expired", h->name, h->token);
        memcpy(name, h->name, sizeof(name));
        memcpy(hid, h->hid, sizeof(hid));
        memcpy(token, h->token, sizeof(token));
        hold_remove(d, h);
        hold_release(d, name, hid, token, 1, 0, expired ? d->cfg.lock_delay : 0);
    }
}
