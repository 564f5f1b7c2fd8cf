/* admin.c - libevent's evhttp on admin-listen: Prometheus /metrics, /healthz
 * (200 only while Redis is usable and not in jeopardy), /status (the INFO document
 * with the effective config, secrets masked), and /locks and /sessions (the documents
 * of LIST and SESSIONS). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "admin.h"
#include "batch.h"
#include "census.h"
#include "dlockd.h"
#include "log.h"
#include "redis.h"
#include "server.h"
#include "info.h"

#define ADMIN_MAX_HEADERS 8192 /* bytes of request line and headers; more gets 400 */
#define ADMIN_TIMEOUT_S 5      /* a connection that sends or takes nothing this long is closed */

static void reply(struct evhttp_request *req, int code, const char *reason, const char *type, struct evbuffer *body)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
    evhttp_send_reply(req, code, reason, body);
}

static void on_metrics(struct evhttp_request *req, void *arg)
{
    struct evbuffer *body = evbuffer_new();

    info_metrics(arg, body);
    reply(req, HTTP_OK, "OK", "text/plain; version=0.0.4", body);
    evbuffer_free(body);
}

/* 200 only while holds can be kept and locks granted: Redis up, usable, every hold
 * renewed since the last failure, and the failover gate open. */
static void on_healthz(struct evhttp_request *req, void *arg)
{
    struct dlockd *d = arg;
    struct evbuffer *body = evbuffer_new();
    int up = redis_up(d->redis), ok = up && !redis_jeopardy(d->redis) && !batch_gated(d);
    char until[40];

    if (ok)
        evbuffer_add_printf(body, "ok\n");
    else if (up && !redis_jeopardy(d->redis))
        evbuffer_add_printf(body, "gated until %s: no grants after a failover\n",
                            batch_gated_until(d, until, sizeof(until)));
    else
        evbuffer_add_printf(body, "backend %s: %s\n", up ? "in jeopardy" : redis_state(d->redis),
                            redis_error(d->redis));
    reply(req, ok ? HTTP_OK : 503, ok ? "OK" : "Service Unavailable", "text/plain", body);
    evbuffer_free(body);
}

static void on_status(struct evhttp_request *req, void *arg)
{
    struct evbuffer *body = evbuffer_new();
    char *json = info_status(arg);

    evbuffer_add_printf(body, "%s\n", json);
    free(json);
    reply(req, HTTP_OK, "OK", "application/json", body);
    evbuffer_free(body);
}

/* Answers an HTTP request with a census document, or 503 when Redis did not give it. */
static void on_census(struct dlockd *d, json_t *doc, const char *err, void *arg)
{
    struct evhttp_request *req = arg;
    struct evbuffer *body = evbuffer_new();
    char *json;

    (void)d;
    if (doc == NULL) {
        evbuffer_add_printf(body, "backend: %s\n", err);
        reply(req, 503, "Service Unavailable", "text/plain", body);
    } else {
        json = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
        evbuffer_add_printf(body, "%s\n", json);
        free(json);
        json_decref(doc);
        reply(req, HTTP_OK, "OK", "application/json", body);
    }
    evbuffer_free(body);
}

/*
 * Reads ?pattern= and ?limit= as LIST and SESSIONS take them. Returns 0, or
 * -1 after answering 400. *pattern is NULL when absent, else valid while q is.
 */
static int census_query(struct evhttp_request *req, struct evkeyvalq *q, const char **pattern, long long *limit)
{
    const char *query = evhttp_uri_get_query(evhttp_request_get_evhttp_uri(req)), *l;
    char *end;

    TAILQ_INIT(q);
    if (query && evhttp_parse_query_str(query, q) != 0) {
        evhttp_send_error(req, HTTP_BADREQUEST, "bad query");
        return -1;
    }
    *pattern = evhttp_find_header(q, "pattern");
    *limit = CENSUS_LIMIT_DEFAULT;
    if ((l = evhttp_find_header(q, "limit")) != NULL)
        *limit = strtoll(l, &end, 10);
    if ((l && (*end != '\0' || *limit < 1 || *limit > CENSUS_LIMIT_MAX)) ||
        (*pattern && !proto_valid_name(*pattern))) {
        evhttp_clear_headers(q);
        evhttp_send_error(req, HTTP_BADREQUEST, "limit is 1 to 1000, pattern a glob of a name");
        return -1;
    }
    return 0;
}

static void on_locks(struct evhttp_request *req, void *arg)
{
    struct dlockd *d = arg;
    struct evkeyvalq q;
    const char *pattern;
    long long limit;

    if (census_query(req, &q, &pattern, &limit))
        return;
    /* evhttp keeps a request until it is answered, even when its client goes. */
    if (census_names(d, pattern, limit, on_census, req))
        on_census(d, NULL, redis_unavailable(d->redis), req);
    evhttp_clear_headers(&q);
}

static void on_sessions(struct evhttp_request *req, void *arg)
{
    struct evkeyvalq q;
    const char *pattern;
    long long limit;

    if (census_query(req, &q, &pattern, &limit))
        return;
    census_sessions(arg, limit, on_census, req);
    evhttp_clear_headers(&q);
}

static void on_other(struct evhttp_request *req, void *arg)
{
    (void)arg;
    evhttp_send_error(req, HTTP_NOTFOUND, "try /metrics, /healthz, /status, /locks or /sessions");
}

int admin_start(struct dlockd *d)
{
    const struct addr *a = &d->cfg.admin;

    if (!d->cfg.admin_on)
        return 0;
    if (a->is_unix) {
        log_warnx("admin: admin-listen takes HOST:PORT");
        return -1;
    }
    if ((d->http = evhttp_new(d->base)) == NULL)
        fatalx("admin: out of memory");
    evhttp_set_allowed_methods(d->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_max_headers_size(d->http, ADMIN_MAX_HEADERS);
    evhttp_set_max_body_size(d->http, 0);
    evhttp_set_timeout(d->http, ADMIN_TIMEOUT_S);
    evhttp_set_cb(d->http, "/metrics", on_metrics, d);
    evhttp_set_cb(d->http, "/healthz", on_healthz, d);
    evhttp_set_cb(d->http, "/status", on_status, d);
    evhttp_set_cb(d->http, "/locks", on_locks, d);
    evhttp_set_cb(d->http, "/sessions", on_sessions, d);
    evhttp_set_gencb(d->http, on_other, d);
    if (evhttp_bind_socket(d->http, a->host, (ev_uint16_t)a->port) != 0) {
        log_warn("admin: cannot listen on %s:%d", a->host, a->port);
        return -1;
    }
    log_notice("admin: http://%s:%d/metrics", a->host, a->port);
    return 0;
}

struct exposed {
    struct dlockd *d;
    char *buf;  /* where the first exposed socket is named */
    size_t len;
    int found;
};

static void check_bound(struct evhttp_bound_socket *b, void *arg)
{
    struct exposed *e = arg;
    const struct addr *a = &e->d->cfg.admin;
    char bound[128];

    if (!e->found && server_fd_exposed(evhttp_bound_socket_get_fd(b), bound, sizeof(bound))) {
        snprintf(e->buf, e->len, "admin-listen %s:%d (bound to %s)", a->host, a->port, bound);
        e->found = 1;
    }
}

int admin_exposed(struct dlockd *d, char *buf, size_t len)
{
    struct exposed e = { d, buf, len, 0 };

    if (d->http)
        evhttp_foreach_bound_socket(d->http, check_bound, &e);
    return e.found;
}

void admin_stop(struct dlockd *d)
{
    if (d->http)
        evhttp_free(d->http);
    d->http = NULL;
}
