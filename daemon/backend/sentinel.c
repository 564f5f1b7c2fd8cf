/* sentinel.c - the master's address from Redis Sentinel: asks the sentinels
 * in turn (SENTINEL get-master-addr-by-name, backend-timeout each), and
 * keeps one pub/sub connection to one of them for +switch-master. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "dlockd.h"
#include "evlink.h"
#include "log.h"
#include "sentinel.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define SWITCH_CHANNEL "+switch-master"

struct sentinel {
    struct dlockd *d;
    const struct addr_list *list;  /* the sentinels, from the config */
    sentinel_switch_cb *on_switch;
    void *switch_arg;
    redisAsyncContext *ask;        /* the try running; NULL when none */
    int asking;                    /* index of the sentinel asked, or to ask first */
    int tries;                     /* sentinels the running ask tried */
    sentinel_found_cb *found;      /* of the running ask; NULL when none runs */
    void *found_arg;
    struct deadline ask_timeout;   /* the try must be answered by then */
    char why[1024];                /* what the tries of the running ask met */
    redisAsyncContext *watch;      /* pub/sub; NULL while down */
    int watching;                  /* index of the sentinel watched, or to watch next */
    int backoff;                   /* ms before the next watch */
    struct event *rewatch;
    struct deadline watch_timeout; /* the subscription must be confirmed by then */
    char watch_error[256];         /* the last failure of the watch that was logged */
    int closed;
};

static void ask_failed(struct sentinel *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void watch_failed(struct sentinel *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static const char *name_of(const struct sentinel *s, int i, char *buf, size_t len)
{
    return config_addr_str(&s->list->addr[i], buf, len);
}

/* --- connections */

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct sentinel *s = ac->data;

    /* hiredis frees the context after this callback. */
    if (status == REDIS_OK)
        return;
    if (ac == s->ask) {
        s->ask = NULL;
        ask_failed(s, "%s", ac->errstr);
    } else if (ac == s->watch) {
        s->watch = NULL;
        watch_failed(s, "%s", ac->errstr);
    }
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct sentinel *s = ac->data;
    const char *why = status == REDIS_OK ? "connection closed" : ac->errstr;

    if (ac == s->ask) {
        s->ask = NULL;
        ask_failed(s, "%s", why);
    } else if (ac == s->watch) {
        s->watch = NULL;
        watch_failed(s, "%s", why);
    }
}

/* Opens a connection to sentinel i and queues its AUTH, answered to on_auth.
 * Returns NULL with the reason in err. */
static redisAsyncContext *open_one(struct sentinel *s, int i, redisCallbackFn *on_auth, char *err, size_t len)
{
    const struct addr *a = &s->list->addr[i];
    redisAsyncContext *ac = must(a->is_unix ? redisAsyncConnectUnix(a->path) : redisAsyncConnect(a->host, a->port));

    if (ac->err) {
        snprintf(err, len, "%s", ac->errstr);
        redisAsyncFree(ac);
        return NULL;
    }
    ac->data = s;
    evlink_attach(ac, s->d->base);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (s->d->cfg.sentinel_password)
        redisAsyncCommand(ac, on_auth, NULL, "AUTH %s", s->d->cfg.sentinel_password);
    return ac;
}

/* --- asking for the master: one sentinel after the other */

static void ask_next(struct sentinel *s);

/* Lets go of the try's connection; hiredis defers the free while one of its callbacks runs. */
static void ask_drop(struct sentinel *s)
{
    redisAsyncContext *ac = s->ask;

    s->ask = NULL;
    deadline_cancel(s->d->deadlines, &s->ask_timeout);
    if (ac)
        redisAsyncFree(ac);
}

/* Ends the running ask: found is told, once. */
static void ask_end(struct sentinel *s, const struct addr *master, const char *why)
{
    sentinel_found_cb *found = s->found;

    s->found = NULL;
    found(master, why, s->found_arg);
}

/* The sentinel asked did not answer: notes why and asks the next one. */
static void ask_failed(struct sentinel *s, const char *fmt, ...)
{
    char one[256], addr[300];
    size_t used = strlen(s->why);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(one, sizeof(one), fmt, ap);
    va_end(ap);
    name_of(s, s->asking, addr, sizeof(addr));
    log_debug("sentinel: %s: %s", addr, one);
    snprintf(s->why + used, sizeof(s->why) - used, "%s%s: %s", used ? "; " : "", addr, one);
    ask_drop(s);
    s->asking = (s->asking + 1) % s->list->n;
    s->tries++;
    ask_next(s);
}

static void on_ask_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct sentinel *s = ac->data;
    redisReply *r = reply;

    (void)privdata;
    if (ac == s->ask && r && r->type == REDIS_REPLY_ERROR)
        ask_failed(s, "AUTH: %s", r->str);
}

/* The address of a reply [host, port]. Returns 0, or -1 when it is not one. */
static int addr_of(const redisReply *r, struct addr *a)
{
    char *end;
    long port;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
        r->element[1]->type != REDIS_REPLY_STRING || r->element[0]->len >= sizeof(a->host))
        return -1;
    port = strtol(r->element[1]->str, &end, 10);
    if (*end || end == r->element[1]->str || port < 1 || port > 65535)
        return -1;
    memset(a, 0, sizeof(*a));
    memcpy(a->host, r->element[0]->str, r->element[0]->len);
    a->port = (int)port;
    return 0;
}

static void on_addr(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct sentinel *s = ac->data;
    redisReply *r = reply;
    struct addr master;

    (void)privdata;
    if (ac != s->ask || r == NULL)
        return;
    if (r->type == REDIS_REPLY_NIL) {
        ask_failed(s, "does not know master %s", s->d->cfg.sentinel_master);
    } else if (r->type == REDIS_REPLY_ERROR) {
        ask_failed(s, "%s", r->str);
    } else if (addr_of(r, &master)) {
        ask_failed(s, "bad reply to SENTINEL get-master-addr-by-name");
    } else {
        ask_drop(s);
        ask_end(s, &master, "");
    }
}

static void on_ask_late(struct deadline *dl)
{
    struct sentinel *s = container_of(dl, struct sentinel, ask_timeout);

    ask_failed(s, "no answer within %lldms", (long long)s->d->cfg.backend_timeout);
}

/* Asks the next sentinel, or ends the ask when each was tried once. */
static void ask_next(struct sentinel *s)
{
    char err[256], why[sizeof(s->why) + 300];

    if (s->tries == s->list->n) {
        snprintf(why, sizeof(why), "no sentinel gave the address of master %s (%s)", s->d->cfg.sentinel_master,
                 s->why);
        ask_end(s, NULL, why);
        return;
    }
    if ((s->ask = open_one(s, s->asking, on_ask_auth, err, sizeof(err))) == NULL) {
        ask_failed(s, "%s", err);
        return;
    }
    redisAsyncCommand(s->ask, on_addr, NULL, "SENTINEL get-master-addr-by-name %s", s->d->cfg.sentinel_master);
    deadline_arm(s->d->deadlines, &s->ask_timeout, now_ms() + (uint64_t)s->d->cfg.backend_timeout);
}

void sentinel_ask(struct sentinel *s, sentinel_found_cb *found, void *arg)
{
    ask_drop(s);
    s->found = found;
    s->found_arg = arg;
    s->tries = 0;
    s->why[0] = '\0';
    ask_next(s);
}

/* --- watching for +switch-master */

static void watch_drop(struct sentinel *s)
{
    redisAsyncContext *ac = s->watch;

    s->watch = NULL;
    deadline_cancel(s->d->deadlines, &s->watch_timeout);
    if (ac)
        redisAsyncFree(ac);
}

/* The watch failed: logs why when it is news, and watches the next sentinel after a backoff. */
static void watch_failed(struct sentinel *s, const char *fmt, ...)
{
    char why[256], addr[300];
    struct timeval tv;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    name_of(s, s->watching, addr, sizeof(addr));
    if (strcmp(why, s->watch_error) != 0) {
        log_warnx("sentinel: cannot watch %s for a switch of master %s: %s; trying the next sentinel", addr,
                  s->d->cfg.sentinel_master, why);
        snprintf(s->watch_error, sizeof(s->watch_error), "%s", why);
    } else {
        log_debug("sentinel: %s: %s; next try in %dms", addr, why, s->backoff);
    }
    watch_drop(s);
    s->watching = (s->watching + 1) % s->list->n;
    tv.tv_sec = s->backoff / 1000;
    tv.tv_usec = (s->backoff % 1000) * 1000;
    evtimer_add(s->rewatch, &tv);
    s->backoff = s->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff * 2;
}

static void on_watch_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct sentinel *s = ac->data;
    redisReply *r = reply;

    (void)privdata;
    if (ac == s->watch && r && r->type == REDIS_REPLY_ERROR)
        watch_failed(s, "AUTH: %s", r->str);
}

/* A +switch-master message: "name old-ip old-port new-ip new-port". */
static void heard(struct sentinel *s, const char *msg)
{
    char name[256], old_ip[256], old_port[16], ip[256], port[16], to[300];

    if (sscanf(msg, "%255s %255s %15s %255s %15s", name, old_ip, old_port, ip, port) != 5 ||
        strcmp(name, s->d->cfg.sentinel_master) != 0)
        return;
    snprintf(to, sizeof(to), "%s:%s", ip, port);
    log_notice("sentinel: master %s switched from %s:%s to %s", name, old_ip, old_port, to);
    s->on_switch(to, s->switch_arg);
}

static void on_event(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct sentinel *s = ac->data;
    redisReply *r = reply;
    char addr[300];

    (void)privdata;
    if (ac != s->watch || r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(r->element[0]->str, "subscribe") == 0) {
        deadline_cancel(s->d->deadlines, &s->watch_timeout);
        s->backoff = BACKOFF_MIN_MS;
        s->watch_error[0] = '\0';
        log_info("sentinel: watching %s for a switch of master %s", name_of(s, s->watching, addr, sizeof(addr)),
                 s->d->cfg.sentinel_master);
    } else if (strcmp(r->element[0]->str, "message") == 0 && r->element[2]->type == REDIS_REPLY_STRING) {
        heard(s, r->element[2]->str);
    }
}

static void on_watch_late(struct deadline *dl)
{
    struct sentinel *s = container_of(dl, struct sentinel, watch_timeout);

    watch_failed(s, "SUBSCRIBE not confirmed within %lldms", (long long)s->d->cfg.backend_timeout);
}

void sentinel_watch(struct sentinel *s)
{
    char err[256];

    if (s->closed)
        return;
    if ((s->watch = open_one(s, s->watching, on_watch_auth, err, sizeof(err))) == NULL) {
        watch_failed(s, "%s", err);
        return;
    }
    redisAsyncCommand(s->watch, on_event, NULL, "SUBSCRIBE " SWITCH_CHANNEL);
    deadline_arm(s->d->deadlines, &s->watch_timeout, now_ms() + (uint64_t)s->d->cfg.backend_timeout);
}

static void on_rewatch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sentinel_watch(arg);
}

/* --- life */

struct sentinel *sentinel_new(struct dlockd *d, sentinel_switch_cb *on_switch, void *arg)
{
    struct sentinel *s = must(calloc(1, sizeof(*s)));

    s->rewatch = must(evtimer_new(d->base, on_rewatch, s));
    s->d = d;
    s->list = &d->cfg.sentinels;
    s->on_switch = on_switch;
    s->switch_arg = arg;
    s->backoff = BACKOFF_MIN_MS;
    deadline_init(&s->ask_timeout, on_ask_late);
    deadline_init(&s->watch_timeout, on_watch_late);
    return s;
}

void sentinel_close(struct sentinel *s)
{
    s->closed = 1;
    s->found = NULL;
    evtimer_del(s->rewatch);
    ask_drop(s);
    watch_drop(s);
}

void sentinel_free(struct sentinel *s)
{
    sentinel_close(s);
    event_free(s->rewatch);
    free(s);
}
