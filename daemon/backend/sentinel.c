/* sentinel.c - the master's address from Redis Sentinel: asks the sentinels
 * in turn (SENTINEL get-master-addr-by-name, backend-timeout each), and
 * keeps a pub/sub connection to each of them for +switch-master: the one
 * that leads a failover announces it first, and only it at first. */
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
    struct watch *watches;         /* one per sentinel */
    int closed;
};

/* The pub/sub connection to one sentinel. */
struct watch {
    struct sentinel *s;
    int i;                         /* the sentinel's index */
    redisAsyncContext *ac;         /* NULL while down */
    int backoff;                   /* ms before the next try */
    struct event *rewatch;
    struct deadline timeout;       /* the subscription must be confirmed by then */
    char error[256];               /* the last failure that was logged */
};

static void ask_failed(struct sentinel *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void watch_failed(struct watch *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The watch whose connection ac is, or NULL. */
static struct watch *watch_of(const struct sentinel *s, const redisAsyncContext *ac)
{
    for (int i = 0; s->watches && i < s->list->n; i++)
        if (s->watches[i].ac == ac)
            return &s->watches[i];
    return NULL;
}

static const char *name_of(const struct sentinel *s, int i, char *buf, size_t len)
{
    return config_addr_str(&s->list->addr[i], buf, len);
}

/* --- connections */

/* Connection ac failed or closed (hiredis frees it after this): the ask or watch it was goes on. */
static void lost(const redisAsyncContext *ac, const char *why)
{
    struct sentinel *s = ac->data;
    struct watch *w;

    if (ac == s->ask) {
        s->ask = NULL;
        ask_failed(s, "%s", why);
    } else if ((w = watch_of(s, ac)) != NULL) {
        w->ac = NULL;
        watch_failed(w, "%s", why);
    }
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    if (status != REDIS_OK)
        lost(ac, ac->errstr);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    lost(ac, status == REDIS_OK ? "connection closed" : ac->errstr);
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

/* --- watching for +switch-master, on every sentinel */

static void watch_drop(struct watch *w)
{
    redisAsyncContext *ac = w->ac;

    w->ac = NULL;
    deadline_cancel(w->s->d->deadlines, &w->timeout);
    if (ac)
        redisAsyncFree(ac);
}

/* The watch failed: logs why when it is news, and tries again after a backoff. */
static void watch_failed(struct watch *w, const char *fmt, ...)
{
    struct sentinel *s = w->s;
    char why[256], addr[300];
    struct timeval tv;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    name_of(s, w->i, addr, sizeof(addr));
    if (strcmp(why, w->error) != 0) {
        log_warnx("sentinel: cannot watch %s for a switch of master %s: %s; trying again", addr,
                  s->d->cfg.sentinel_master, why);
        snprintf(w->error, sizeof(w->error), "%s", why);
    } else {
        log_debug("sentinel: %s: %s; next try in %dms", addr, why, w->backoff);
    }
    watch_drop(w);
    tv.tv_sec = w->backoff / 1000;
    tv.tv_usec = (w->backoff % 1000) * 1000;
    evtimer_add(w->rewatch, &tv);
    w->backoff = w->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : w->backoff * 2;
}

static void on_watch_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct watch *w = watch_of(ac->data, ac);
    redisReply *r = reply;

    (void)privdata;
    if (w && r && r->type == REDIS_REPLY_ERROR)
        watch_failed(w, "AUTH: %s", r->str);
}

/* A +switch-master message: "name old-ip old-port new-ip new-port". Each
 * sentinel announces the same switch: the link decides what is news. */
static void heard(struct sentinel *s, const char *msg)
{
    char name[256], old_ip[256], old_port[16], ip[256], port[16], to[300];

    if (sscanf(msg, "%255s %255s %15s %255s %15s", name, old_ip, old_port, ip, port) != 5 ||
        strcmp(name, s->d->cfg.sentinel_master) != 0)
        return;
    snprintf(to, sizeof(to), "%s:%s", ip, port);
    log_info("sentinel: master %s switched from %s:%s to %s", name, old_ip, old_port, to);
    s->on_switch(to, s->switch_arg);
}

static void on_event(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct watch *w = watch_of(ac->data, ac);
    redisReply *r = reply;
    char addr[300];

    (void)privdata;
    if (w == NULL || r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(r->element[0]->str, "subscribe") == 0) {
        deadline_cancel(w->s->d->deadlines, &w->timeout);
        w->backoff = BACKOFF_MIN_MS;
        w->error[0] = '\0';
        log_info("sentinel: watching %s for a switch of master %s", name_of(w->s, w->i, addr, sizeof(addr)),
                 w->s->d->cfg.sentinel_master);
    } else if (strcmp(r->element[0]->str, "message") == 0 && r->element[2]->type == REDIS_REPLY_STRING) {
        heard(w->s, r->element[2]->str);
    }
}

static void on_watch_late(struct deadline *dl)
{
    struct watch *w = container_of(dl, struct watch, timeout);

    watch_failed(w, "SUBSCRIBE not confirmed within %lldms", (long long)w->s->d->cfg.backend_timeout);
}

static void watch_one(struct watch *w)
{
    char err[256];

    if (w->s->closed)
        return;
    if ((w->ac = open_one(w->s, w->i, on_watch_auth, err, sizeof(err))) == NULL) {
        watch_failed(w, "%s", err);
        return;
    }
    redisAsyncCommand(w->ac, on_event, NULL, "SUBSCRIBE " SWITCH_CHANNEL);
    deadline_arm(w->s->d->deadlines, &w->timeout, now_ms() + (uint64_t)w->s->d->cfg.backend_timeout);
}

static void on_rewatch(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    watch_one(arg);
}

void sentinel_watch(struct sentinel *s)
{
    for (int i = 0; i < s->list->n; i++)
        if (s->watches[i].ac == NULL && !evtimer_pending(s->watches[i].rewatch, NULL))
            watch_one(&s->watches[i]);
}

/* --- life */

struct sentinel *sentinel_new(struct dlockd *d, sentinel_switch_cb *on_switch, void *arg)
{
    struct sentinel *s = must(calloc(1, sizeof(*s)));

    s->d = d;
    s->list = &d->cfg.sentinels;
    s->on_switch = on_switch;
    s->switch_arg = arg;
    deadline_init(&s->ask_timeout, on_ask_late);
    s->watches = must(calloc((size_t)s->list->n, sizeof(*s->watches)));
    for (int i = 0; i < s->list->n; i++) {
        struct watch *w = &s->watches[i];
        w->s = s;
        w->i = i;
        w->backoff = BACKOFF_MIN_MS;
        w->rewatch = must(evtimer_new(d->base, on_rewatch, w));
        deadline_init(&w->timeout, on_watch_late);
    }
    return s;
}

void sentinel_close(struct sentinel *s)
{
    s->closed = 1;
    s->found = NULL;
    ask_drop(s);
    for (int i = 0; i < s->list->n; i++) {
        evtimer_del(s->watches[i].rewatch);
        watch_drop(&s->watches[i]);
    }
}

void sentinel_free(struct sentinel *s)
{
    sentinel_close(s);
    for (int i = 0; i < s->list->n; i++)
        event_free(s->watches[i].rewatch);
    free(s->watches);
    free(s);
}
