/* admin.c - libevent's evhttp on admin-listen: Prometheus /metrics, /healthz
 * (200 only while Redis is usable and not in jeopardy), /status (the INFO document
 * with the effective config, secrets masked), and /locks and /sessions (the documents
 * of LIST and SESSIONS, behind adminpass); at most admin-maxclients connections. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

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
#define ADMIN_LOG_MS 10000     /* at most one line about refused connections or passwords this often */
#define ADMIN_PASS_MAX 512     /* bytes of a decoded Basic credential */
#define ADMIN_FULL_TEXT "too many connections to admin-listen (admin-maxclients); try again\n"

/*
 * The endpoint. evhttp accepts on its own listener (serve) while fewer than
 * admin-maxclients of its connections are open; at that many, a second
 * listener on the same socket (full) answers 503 and closes instead. Each
 * connection is counted from its accept (the bufferevent evhttp asks us for)
 * to its close (evhttp's close callback, set once evhttp has made it).
 */
struct admin {
    struct dlockd *d;
    struct evhttp *http;
    struct evconnlistener *serve;   /* evhttp's */
    struct evconnlistener *full;    /* ours: answers 503 */
    int nconns;                     /* evhttp's connections open */
    int stopping;                   /* evhttp_free is closing them: the listeners are gone */
    struct bufferevent **settling;  /* accepted this turn, referenced until their close callback is set */
    int nsettling, settling_cap;
    struct event *settle;           /* sets those callbacks once evhttp is done with the accept */
    struct log_rate refused;        /* connections answered 503 */
    struct log_rate denied;         /* requests with a wrong password */
};

/* evhttp calls its listener's error callback with the evhttp, which leads to nothing of ours:
 * this is how that callback finds the daemon. */
static struct admin *admin_self;

static void reply(struct evhttp_request *req, int code, const char *reason, const char *type, struct evbuffer *body)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
    evhttp_send_reply(req, code, reason, body);
}

static int admit(struct dlockd *d, struct evhttp_request *req, int census);

static void on_metrics(struct evhttp_request *req, void *arg)
{
    struct evbuffer *body;

    if (!admit(arg, req, 0))
        return;
    body = evbuffer_new();

    info_metrics(arg, body);
    reply(req, HTTP_OK, "OK", "text/plain; version=0.0.4", body);
    evbuffer_free(body);
}

/* 200 only while holds can be kept and locks granted: Redis up, usable, every hold
 * renewed since the last failure, and the failover gate open. */
static void on_healthz(struct evhttp_request *req, void *arg)
{
    struct dlockd *d = arg;
    struct evbuffer *body;
    int up = redis_up(d->redis), ok = up && !redis_jeopardy(d->redis) && !batch_gated(d);
    char until[40];

    if (!admit(d, req, 0))
        return;
    body = evbuffer_new();

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
    struct evbuffer *body;
    char *json;

    if (!admit(arg, req, 0))
        return;
    body = evbuffer_new();
    json = info_status(arg);

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

/* Decodes base64 src into out (NUL-terminated). Returns 0, or -1 when it is not base64 or too long. */
static int unbase64(const char *src, char *out, size_t cap)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned bits = 0, nbits = 0;
    size_t n = 0;

    for (; *src && *src != '='; src++) {
        const char *at = strchr(abc, *src);
        if (at == NULL || *src == '\0')
            return -1;
        bits = (bits << 6) | (unsigned)(at - abc);
        if ((nbits += 6) >= 8) {
            nbits -= 8;
            if (n + 1 >= cap)
                return -1;
            out[n++] = (char)((bits >> nbits) & 0xff);
        }
    }
    out[n] = '\0';
    return 0;
}

/* 1 when req carries adminpass: "Authorization: Bearer PASS", or Basic with PASS as the password (any user). */
static int has_adminpass(const struct dlockd *d, struct evhttp_request *req)
{
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    char cred[ADMIN_PASS_MAX], *colon;

    if (h == NULL)
        return 0;
    if (strncasecmp(h, "Bearer ", 7) == 0)
        return config_secret_eq(d->cfg.adminpass, h + 7 + strspn(h + 7, " "));
    if (strncasecmp(h, "Basic ", 6) != 0 || unbase64(h + 6 + strspn(h + 6, " "), cred, sizeof(cred)) ||
        (colon = strchr(cred, ':')) == NULL)
        return 0;
    return config_secret_eq(d->cfg.adminpass, colon + 1);
}

static void reply_text(struct evhttp_request *req, int code, const char *reason, const char *text)
{
    struct evbuffer *body = evbuffer_new();

    evbuffer_add_printf(body, "%s\n", text);
    reply(req, code, reason, "text/plain", body);
    evbuffer_free(body);
}

static void unauthorized(struct evhttp_request *req)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Basic realm=\"dlockd\"");
    reply_text(req, 401, "Unauthorized", "this endpoint needs adminpass: Authorization: Bearer <adminpass>, or Basic");
}

static void on_denied_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    unauthorized(arg);
}

/*
 * Lets req through: 1, or 0 after answering it. With adminpass set every
 * path needs it; census paths need it always (403 while none is set). A
 * wrong password is answered after auth-fail-delay, as AUTH's is, holding
 * one of the admin-maxclients connections meanwhile.
 */
static int admit(struct dlockd *d, struct evhttp_request *req, int census)
{
    struct admin *a = d->admin;
    struct timeval tv = { d->cfg.auth_fail_delay / 1000, (d->cfg.auth_fail_delay % 1000) * 1000 };

    if (d->cfg.adminpass == NULL) {
        if (!census)
            return 1;
        reply_text(req, 403, "Forbidden", "/locks and /sessions need adminpass, and none is set");
        return 0;
    }
    if (has_adminpass(d, req))
        return 1;
    if (evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization") == NULL) {
        unauthorized(req);
        return 0;
    }
    if (log_rate_due(&a->denied, now_ms(), ADMIN_LOG_MS)) {
        log_warnx("admin: wrong adminpass for %s (%d since the last such line)", evhttp_request_get_uri(req),
                  a->denied.count);
        a->denied.count = 0;
    }
    if (event_base_once(d->base, -1, EV_TIMEOUT, on_denied_later, req, &tv) != 0)
        unauthorized(req);
    return 0;
}

static void on_locks(struct evhttp_request *req, void *arg)
{
    struct dlockd *d = arg;
    struct evkeyvalq q;
    const char *pattern;
    long long limit;
    int rc;

    if (!admit(d, req, 1) || census_query(req, &q, &pattern, &limit))
        return;
    /* evhttp keeps a request until it is answered, even when its client goes. */
    if ((rc = census_names(d, pattern, limit, on_census, req)) == CENSUS_BUSY) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
        reply_text(req, 503, "Service Unavailable", CENSUS_BUSY_TEXT);
    } else if (rc) {
        on_census(d, NULL, redis_unavailable(d->redis), req);
    }
    evhttp_clear_headers(&q);
}

static void on_sessions(struct evhttp_request *req, void *arg)
{
    struct evkeyvalq q;
    const char *pattern;
    long long limit;

    if (!admit(arg, req, 1) || census_query(req, &q, &pattern, &limit))
        return;
    census_sessions(arg, limit, on_census, req);
    evhttp_clear_headers(&q);
}

static void on_other(struct evhttp_request *req, void *arg)
{
    if (admit(arg, req, 0))
        evhttp_send_error(req, HTTP_NOTFOUND, "try /metrics, /healthz, /status, /locks or /sessions");
}

/* ---- connections: counted from accept to close, at most admin-maxclients */

/* Accepts with evhttp below admin-maxclients connections, else with full. */
static void update(struct admin *a)
{
    int at_cap = a->nconns >= a->d->cfg.admin_maxclients;

    if (a->stopping)
        return;
    server_want(a->d, a->serve, !at_cap);
    server_want(a->d, a->full, at_cap);
}

static void on_closed(struct evhttp_connection *evcon, void *arg)
{
    struct admin *a = arg;

    (void)evcon;
    a->nconns--;
    update(a);
}

/* evhttp asks for a connection's bufferevent right after accepting it: counts it. */
static struct bufferevent *on_accepted(struct event_base *base, void *arg)
{
    struct admin *a = arg;
    struct bufferevent *bev = must(bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE));

    if (a->nsettling == a->settling_cap) {
        a->settling_cap = a->settling_cap ? 2 * a->settling_cap : 16;
        a->settling = must(realloc(a->settling, (size_t)a->settling_cap * sizeof(*a->settling)));
    }
    bufferevent_incref(bev); /* so that it is still ours to look at should evhttp drop it at once */
    a->settling[a->nsettling++] = bev;
    a->nconns++;
    update(a); /* at the cap this stops evhttp's listener before its next accept */
    event_active(a->settle, EV_TIMEOUT, 0);
    return bev;
}

/* evhttp made each connection it accepted the bufferevents' callback argument: sets its close callback. */
static void on_settle(evutil_socket_t fd, short what, void *arg)
{
    struct admin *a = arg;

    (void)fd;
    (void)what;
    for (int i = 0; i < a->nsettling; i++) {
        void *evcon = NULL;

        bufferevent_getcb(a->settling[i], NULL, NULL, NULL, &evcon);
        if (evcon)
            evhttp_connection_set_closecb(evcon, on_closed, a);
        else
            on_closed(NULL, a); /* evhttp gave it up already */
        bufferevent_decref(a->settling[i]);
    }
    a->nsettling = 0;
}

/* A connection past admin-maxclients: 503 and close, one log line at most every ADMIN_LOG_MS. */
static void on_full(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
    static const char resp[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                               "Retry-After: 1\r\n\r\n" ADMIN_FULL_TEXT;
    struct admin *a = arg;

    (void)l;
    (void)sa;
    (void)salen;
    if (write(fd, resp, sizeof(resp) - 1) < 0)
        log_debug("admin: refusing a connection: %s", strerror(errno));
    evutil_closesocket(fd);
    if (log_rate_due(&a->refused, now_ms(), ADMIN_LOG_MS)) {
        log_warnx("admin: admin-maxclients (%lld) reached, refused %d connection(s) since the last such line",
                  (long long)a->d->cfg.admin_maxclients, a->refused.count);
        a->refused.count = 0;
    }
}

static void on_serve_error(struct evconnlistener *l, void *arg)
{
    (void)arg; /* evhttp's */
    server_accept_failed(admin_self->d, l);
}

static void on_full_error(struct evconnlistener *l, void *arg)
{
    server_accept_failed(((struct admin *)arg)->d, l);
}

/* Binds admin-listen: evhttp's listener and ours on one socket. Returns 0, or -1 after logging why. */
static int bind_admin(struct admin *a)
{
    const struct addr *ad = &a->d->cfg.admin;
    struct evhttp_bound_socket *b = evhttp_bind_socket_with_handle(a->http, ad->host, (ev_uint16_t)ad->port);

    if (b == NULL) {
        log_warn("admin: cannot listen on %s:%d", ad->host, ad->port);
        return -1;
    }
    a->serve = evhttp_bound_socket_get_listener(b);
    a->full = must(evconnlistener_new(a->d->base, on_full, a, LEV_OPT_DISABLED, -1, evhttp_bound_socket_get_fd(b)));
    evconnlistener_set_error_cb(a->serve, on_serve_error);
    evconnlistener_set_error_cb(a->full, on_full_error);
    server_adopt(a->d, a->serve, 1);
    server_adopt(a->d, a->full, 0);
    return 0;
}

static struct evhttp *new_http(struct dlockd *d)
{
    struct evhttp *http = must(evhttp_new(d->base));

    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_max_headers_size(http, ADMIN_MAX_HEADERS);
    evhttp_set_max_body_size(http, 0);
    evhttp_set_timeout(http, ADMIN_TIMEOUT_S);
    evhttp_set_cb(http, "/metrics", on_metrics, d);
    evhttp_set_cb(http, "/healthz", on_healthz, d);
    evhttp_set_cb(http, "/status", on_status, d);
    evhttp_set_cb(http, "/locks", on_locks, d);
    evhttp_set_cb(http, "/sessions", on_sessions, d);
    evhttp_set_gencb(http, on_other, d);
    return http;
}

int admin_start(struct dlockd *d)
{
    struct admin *a;

    if (!d->cfg.admin_on)
        return 0;
    if (d->cfg.admin.is_unix) {
        log_warnx("admin: admin-listen takes HOST:PORT");
        return -1;
    }
    a = must(calloc(1, sizeof(*a)));
    a->settle = must(event_new(d->base, -1, 0, on_settle, a));
    a->d = d;
    a->http = new_http(d);
    evhttp_set_bevcb(a->http, on_accepted, a);
    d->admin = admin_self = a;
    if (bind_admin(a))
        return -1;
    log_notice("admin: http://%s:%d/metrics", d->cfg.admin.host, d->cfg.admin.port);
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

    if (d->admin)
        evhttp_foreach_bound_socket(d->admin->http, check_bound, &e);
    return e.found;
}

void admin_stop(struct dlockd *d)
{
    struct admin *a = d->admin;

    if (a == NULL)
        return;
    a->stopping = 1;
    server_disown(d, a->serve);
    server_disown(d, a->full);
    if (a->full)
        evconnlistener_free(a->full);
    evhttp_free(a->http); /* closes its listener and connections */
    on_settle(-1, 0, a);  /* drops the references of connections accepted this turn */
    event_free(a->settle);
    free(a->settling);
    free(a);
    d->admin = admin_self = NULL;
}
