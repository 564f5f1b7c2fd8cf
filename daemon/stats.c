/* stats.c - the INFO document, built from the counters and the tables. */
#include <stdlib.h>

#include <jansson.h>

#include "dict.h"
#include "dlockd.h"
#include "redis.h"
#include "stats.h"

char *stats_info_json(struct dlockd *d)
{
    json_t *requests = json_object(), *doc;
    char *text;

    for (int v = 0; v < VERB_NVERBS; v++)
        json_object_set_new(requests, proto_verb_name((enum proto_verb)v), json_integer((json_int_t)d->stats.requests[v]));
    doc = json_pack("{s:s, s:s, s:I, s:i, s:I, s:I, s:I, s:s, s:b, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                    "version", PACKAGE_VERSION, "id", d->id, "uptime_ms", (json_int_t)(now_ms() - d->started),
                    "connections", d->nconns, "sessions", (json_int_t)dict_size(d->sessions), "holds",
                    (json_int_t)dict_size(d->holds), "waiters", (json_int_t)dict_size(d->waits), "backend",
                    redis_up(d->redis) ? "up" : "down", "jeopardy", redis_jeopardy(d->redis), "requests", requests,
                    "grants", (json_int_t)d->stats.grants, "busy", (json_int_t)d->stats.busy, "timeouts",
                    (json_int_t)d->stats.timeouts, "errors", (json_int_t)d->stats.errors, "expired_sessions",
                    (json_int_t)d->stats.expired_sessions, "lost", (json_int_t)d->stats.lost, "renewed",
                    (json_int_t)d->stats.renewed);
    text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(doc);
    return text;
}
