/* census.c - who holds what: the names in Redis (asynchronous SCAN of each master, then STATUS of each name)
 * and the sessions here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "census.h"
#include "batch.h"
#include "conn.h"
#include "dict.h"
#include "dlockd.h"
#include "hooks.h"
#include "latch.h"
#include "log.h"
#include "redis.h"
#include "session.h"

#define SCAN_STEPS 16     /* SCAN calls of one LIST at most, over all masters */
#define SCAN_COUNT "1000" /* keys each SCAN call looks at, about */
#define CENSUS_INFLIGHT 2 /* LIST and /locks collections at once, daemon-wide; more are refused */
#define STATUS_WINDOW 32  /* STATUS calls of one census unanswered at once: renewals pass between */

/* A LIST being collected. */
struct census {
    struct dlockd *d;
    census_done *done;
    void *arg;
    long long limit;
    int steps;                     /* SCAN calls so far */
    int node;                      /* the master being scanned (redis_command's node) */
    int more;                      /* stopped before the end */
    const char *failed;            /* why a STATUS had no answer, or NULL */
    int sending;                   /* in probe_more: answers do not send */
    long long next;                /* the next name to ask STATUS of */
    char cursor[32];               /* SCAN's */
    char match[2 * PROTO_NAME_MAX + 2 * CONTRACT_KEY_MAX]; /* the MATCH pattern of the x and k keys */
    struct dict *seen;             /* names found (SCAN may return one twice) */
    char **names;                  /* found, limit at most */
    long long nnames;
    json_t **entries;              /* per name, once its STATUS answered; NULL if it went meanwhile */
    long long pending;             /* STATUS calls not answered */
    char *pattern;                 /* LIST's, for its latches; NULL for all */
    json_t *found;                 /* the names' entries, while the latches are read */
};

/* One STATUS call of a census. */
struct probe {
    struct census *c;
    long long i;                   /* the name's index */
};

static void census_free(struct census *c)
{
    for (long long i = 0; i < c->nnames; i++) {
        free(c->names[i]);
        if (c->entries)
            json_decref(c->entries[i]);
    }
    free(c->names);
    free(c->entries);
    dict_free(c->seen);
    free(c->pattern);
    json_decref(c->found);
    free(c);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void on_latches(struct dlockd *d, json_t *latches, int more, const char *err, void *arg)
{
    struct census *c = arg;

    if (err)
        c->done(d, NULL, err, c->arg);
    else
        c->done(d, json_pack("{s:O, s:o, s:i}", "names", c->found, "latches", latches, "more", c->more || more), NULL,
                c->arg);
    census_free(c);
}

/* The names are known: the latches created here follow. */
static void finish(struct census *c, const char *err)
{
    c->d->censuses--;
    if (err) {
        c->done(c->d, NULL, err, c->arg);
        census_free(c);
        return;
    }
    c->found = json_array();
    for (long long i = 0; i < c->nnames; i++)
        if (c->entries && c->entries[i])
            json_array_append(c->found, c->entries[i]);
    latch_list(c->d, c->pattern, c->limit, on_latches, c);
}

static void probe_more(struct census *c);

static void on_status(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct probe *p = arg;
    struct census *c = p->c;
    const char *kind = rep ? rep->state.kind : "";

    (void)d;
    if (rep == NULL || rep->status != CONTRACT_OK)
        c->failed = NO_ANSWER;
    else if (kind[0] && strcmp(kind, "latch") != 0)
        c->entries[p->i] = json_pack("{s:s, s:s, s:I, s:I}", "name", c->names[p->i], "type", kind, "holders",
                                     (json_int_t)(rep->state.nholders + rep->state.more), "waiters",
                                     (json_int_t)rep->state.waiters);
    free(p);
    c->pending--;
    if (!c->sending)
        probe_more(c);
}

/* Asks STATUS of the next names, STATUS_WINDOW unanswered at most; finishes c once all answered. */
static void probe_more(struct census *c)
{
    c->sending = 1;
    while (!c->failed && c->next < c->nnames && c->pending < STATUS_WINDOW) {
        struct probe *p = must(malloc(sizeof(*p)));
        const char *name = c->names[c->next];

        p->c = c;
        p->i = c->next++;
        c->pending++;
        if (batch_op(c->d, OP_STATUS, 1, 1, &name, NULL, on_status, NULL, p)) {
            free(p);
            c->pending--;
            c->failed = redis_unavailable(c->d->redis);
        }
    }
    c->sending = 0;
    if (c->pending == 0)
        finish(c, c->failed);
}

/* Asks STATUS of every name found, in name order. */
static void probe_all(struct census *c)
{
    qsort(c->names, (size_t)c->nnames, sizeof(*c->names), by_name);
    c->entries = must(calloc((size_t)c->nnames + 1, sizeof(*c->entries)));
    probe_more(c);
}

/* Adds the name of key (prefix{name}:x, or :k for a hold in the one-key form) unless seen; 1 once limit
 * names are found. */
static int add_key(struct census *c, const char *key)
{
    size_t plen = strlen(c->d->cfg.key_prefix), len = strlen(key);
    char name[PROTO_NAME_MAX + 1];

    if (c->nnames >= c->limit)
        return 1;
    if (len < plen + 4 || len - plen - 4 > PROTO_NAME_MAX || (strcmp(key + len - 3, "}:x") != 0 && strcmp(key + len - 3, "}:k") != 0))
        return 0;
    memcpy(name, key + plen + 1, len - plen - 4);
    name[len - plen - 4] = '\0';
    if (!proto_valid_name(name) || dict_get(c->seen, name))
        return 0;
    dict_set(c->seen, name, c);
    c->names[c->nnames++] = must(strdup(name));
    return 0;
}

static int scan_step(struct census *c);

static void on_scan(struct dlockd *d, redisReply *r, void *arg)
{
    struct census *c = arg;
    const redisReply *keys;
    int full = 0;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->type != REDIS_REPLY_ARRAY) {
        finish(c, "Redis did not answer SCAN in time");
        return;
    }
    snprintf(c->cursor, sizeof(c->cursor), "%s", r->element[0]->str ? r->element[0]->str : "0");
    if (strcmp(c->cursor, "0") == 0 && c->node + 1 < redis_nodes(d->redis)) {
        c->node++; /* the next master, from its start: "" is no cursor of SCAN's */
        c->cursor[0] = '\0';
    }
    keys = r->element[1];
    for (size_t i = 0; i < keys->elements && !full; i++)
        if (keys->element[i]->type == REDIS_REPLY_STRING && add_key(c, keys->element[i]->str))
            full = 1;
    if (c->nnames >= c->limit && strcmp(c->cursor, "0") != 0)
        full = 1;
    if (full || (strcmp(c->cursor, "0") != 0 && c->steps >= SCAN_STEPS)) {
        c->more = 1;
    } else if (strcmp(c->cursor, "0") != 0) {
        if (scan_step(c) == 0)
            return;
        finish(c, redis_unavailable(c->d->redis));
        return;
    }
    if (c->nnames == 0)
        finish(c, NULL);
    else
        probe_all(c);
}

static int scan_step(struct census *c)
{
    const char *argv[] = { "SCAN", c->cursor[0] ? c->cursor : "0", "MATCH", c->match, "COUNT", SCAN_COUNT };

    c->steps++;
    return redis_command(c->d->redis, c->node, 6, argv, on_scan, c);
}

/* Copies s into out with the glob characters escaped. */
static size_t glob_escape(char *out, const char *s)
{
    size_t n = 0;

    for (; *s; s++) {
        if (strchr("*?[]\\", *s))
            out[n++] = '\\';
        out[n++] = *s;
    }
    out[n] = '\0';
    return n;
}

int census_names(struct dlockd *d, const char *pattern, long long limit, census_done *done, void *arg)
{
    struct census *c;
    size_t n;

    if (d->censuses >= CENSUS_INFLIGHT)
        return CENSUS_BUSY;
    c = must(calloc(1, sizeof(*c)));
    c->names = must(calloc((size_t)limit, sizeof(*c->names)));
    c->d = d;
    c->done = done;
    c->arg = arg;
    c->limit = limit;
    c->seen = dict_new();
    if (pattern)
        c->pattern = must(strdup(pattern));
    snprintf(c->cursor, sizeof(c->cursor), "0");
    /* Holds and queue entries both have a lease in the x key: it exists while anyone holds or waits. */
    n = glob_escape(c->match, d->cfg.key_prefix);
    snprintf(c->match + n, sizeof(c->match) - n, "{%s}:[xk]", pattern ? pattern : "*");
    d->censuses++;
    if (scan_step(c)) {
        d->censuses--;
        census_free(c);
        return -1;
    }
    return 0;
}

/* A walk of the sessions, limit at most. */
struct walk {
    json_t *list;
    long long limit;
    int more;
};

static int add_session(const char *key, void *val, void *arg)
{
    struct session *s = val;
    struct walk *w = arg;
    int64_t left = (int64_t)(s->last_seen + (uint64_t)s->ttl) - (int64_t)now_ms();

    (void)key;
    if ((long long)json_array_size(w->list) >= w->limit) {
        w->more = 1;
        return 1;
    }
    json_array_append_new(w->list, json_pack("{s:s, s:s, s:s, s:s, s:I, s:i, s:i}", "session", s->id, "client",
                                             s->name, "peer", s->conn ? s->conn->peer : "", "daemon", s->d->id,
                                             "ttl_ms", (json_int_t)(left > 0 ? left : 0), "holds", s->nholds,
                                             "waits", s->nwaits));
    return 0;
}

void census_sessions(struct dlockd *d, long long limit, census_done *done, void *arg)
{
    struct walk w = { json_array(), limit, 0 };

    dict_each(d->sessions, add_session, &w);
    done(d, json_pack("{s:o, s:i}", "sessions", w.list, "more", w.more), NULL, arg);
}
