/* redis.c - two hiredis connections on the event loop: one runs scripts
 * (pipelined EVALSHA, reloaded on NOSCRIPT), one receives this daemon's pub/sub
 * channel. Every call has a deadline of backend-timeout; a dropped link is
 * reconnected with backoff, and sessions hear * JEOPARDY and * SAFE. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/adapters/libevent.h>
#include <hiredis/async.h>

#include "conn.h"
#include "dlockd.h"
#include "latch.h"
#include "wait.h"
#include "log.h"
#include "notify.h"
#include "redis.h"
#include "renew.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

struct redis {
    struct dlockd *d;
    redisAsyncContext *ac;  /* scripts; NULL while down */
    redisAsyncContext *sub; /* pub/sub; NULL while down */
    int ac_ready, sub_ready;
    int jeopardy;           /* sessions were told * JEOPARDY */
    int clean;              /* nothing failed since the renewal cycle started */
    int recheck;            /* Redis went silent: renew as soon as it answers again */
    char error[256];        /* the last failure: why the link is down or in jeopardy */
    int backoff;            /* ms before the next reconnect */
    struct event *reconnect;
    char latch_channel[256]; /* where a latch that reaches 0 is announced */
    int closed;              /* shutting down: no reconnects */
    uint64_t answering_sent; /* sent time of the call whose callback runs */
    int answering_late;      /* the callback running is a late one */
};

struct redis_call {
    struct redis *rd;
    enum script_id id;
    redis_cb *cb, *late;
    void *arg;
    int answered;             /* cb was called */
    int retried;              /* resent with EVAL after NOSCRIPT */
    uint64_t sent;            /* monotonic us */
    struct deadline timeout;
    int argc;                 /* of the command */
    sds cmd;                  /* EVALSHA sha nkeys argv..., as sent */
};

static void link_down(struct redis *rd, const char *why);

int redis_up(const struct redis *rd)
{
    return rd->ac_ready && rd->sub_ready;
}

int redis_jeopardy(const struct redis *rd)
{
    return rd->jeopardy;
}

int redis_answering_late(const struct redis *rd)
{
    return rd->answering_late;
}

const char *redis_error(const struct redis *rd)
{
    return redis_up(rd) && !rd->jeopardy ? "" : rd->error;
}

/* --- jeopardy: from any failure until a whole renewal cycle succeeds */

/* Something failed; silent: Redis did not answer at all. */
static void trouble(struct redis *rd, int silent, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void trouble(struct redis *rd, int silent, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    rd->clean = 0;
    rd->recheck |= silent;
    if (rd->jeopardy) {
        log_debug("backend: %s", why);
        return;
    }
    snprintf(rd->error, sizeof(rd->error), "%s", why);
    log_warnx("backend: in jeopardy, holds may not be renewed: %s", why);
    rd->jeopardy = 1;
    conn_broadcast(rd->d, "JEOPARDY");
}

void redis_renewing(struct redis *rd)
{
    rd->clean = 1;
}

void redis_renewed(struct redis *rd)
{
    if (!rd->jeopardy || !redis_up(rd) || !rd->clean)
        return;
    rd->jeopardy = 0;
    log_info("backend: safe again, every hold renewed");
    conn_broadcast(rd->d, "SAFE");
}

const char *redis_elem(const redisReply *r, size_t i, char *buf, size_t len)
{
    const redisReply *e;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements)
        return "";
    e = r->element[i];
    if (e->type == REDIS_REPLY_INTEGER) {
        snprintf(buf, len, "%lld", e->integer);
        return buf;
    }
    return (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) ? e->str : "";
}

long long redis_elem_int(const redisReply *r, size_t i)
{
    char buf[32];

    return strtoll(redis_elem(r, i, buf, sizeof(buf)), NULL, 10);
}

static void call_free(struct redis_call *call)
{
    deadline_cancel(call->rd->d->deadlines, &call->timeout);
    redisFreeSdsCommand(call->cmd);
    free(call);
}

uint64_t redis_answering_sent(const struct redis *rd)
{
    return rd->answering_sent;
}

static void call_answer(struct redis_call *call, redisReply *r)
{
    struct redis *rd = call->rd;

    call->answered = 1;
    deadline_cancel(rd->d->deadlines, &call->timeout);
    if (r)
        histo_add(&rd->d->stats.backend, now_us() - call->sent);
    rd->answering_sent = r ? call->sent : 0;
    call->cb(rd->d, r, call->arg);
    rd->answering_sent = 0;
}

static void call_timeout(struct deadline *dl)
{
    struct redis_call *call = container_of(dl, struct redis_call, timeout);

    trouble(call->rd, 1, "%s did not answer within %lldms", scripts[call->id].name,
            (long long)call->rd->d->cfg.backend_timeout);
    call_answer(call, NULL);
}

static int call_send(struct redis_call *call);

/* After NOSCRIPT: the same call with EVAL and the body instead of EVALSHA and the sha. */
static int resend_with_eval(struct redis_call *call)
{
    const char *body = scripts[call->id].body, *args = call->cmd;
    sds cmd;

    for (int i = 0; i < 5; i++) /* past the lines "*N", "$7", "EVALSHA", "$40" and the sha */
        args = strstr(args, "\r\n") + 2;
    cmd = sdscatfmt(sdsempty(), "*%i\r\n$4\r\nEVAL\r\n$%U\r\n%s\r\n%s", call->argc,
                    (unsigned long long)strlen(body), body, args);
    if (cmd == NULL)
        fatalx("redis: out of memory");
    redisFreeSdsCommand(call->cmd);
    call->cmd = cmd;
    return call_send(call);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct redis_call *call = privdata;
    struct redis *rd = call->rd;
    redisReply *r = reply;

    (void)ac;
    if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0 && !call->retried) {
        call->retried = 1;
        if (resend_with_eval(call) == 0)
            return;
        r = NULL;
    }
    if (r && r->type == REDIS_REPLY_ERROR) {
        /* OOM, BUSY, READONLY...: Redis is there but does not do what dlockd needs. */
        trouble(rd, 0, "%s: %s", scripts[call->id].name, r->str);
        r = NULL;
    }
    if (!call->answered) {
        call_answer(call, r);
        if (r == NULL && call->late)
            call->late(rd->d, NULL, call->arg);
    } else if (call->late) {
        rd->answering_late = 1;
        call->late(rd->d, r, call->arg);
        rd->answering_late = 0;
    }
    if (r && rd->recheck && rd->jeopardy) {
        rd->recheck = 0;
        renew_now(rd->d);
    }
    call_free(call);
}

static int call_send(struct redis_call *call)
{
    if (call->rd->ac == NULL)
        return -1;
    return redisAsyncFormattedCommand(call->rd->ac, on_reply, call, call->cmd, sdslen(call->cmd)) == REDIS_OK ? 0 : -1;
}

int redis_script(struct redis *rd, enum script_id id, int nkeys, int argc, const char **argv, redis_cb *cb,
                 redis_cb *late, void *arg)
{
    struct redis_call *call;
    const char **all;
    char nk[16];
    int n = argc + 3;

    if (!redis_up(rd))
        return -1;
    if ((call = calloc(1, sizeof(*call))) == NULL || (all = malloc((size_t)n * sizeof(*all))) == NULL)
        fatalx("redis: out of memory");
    call->rd = rd;
    call->id = id;
    call->cb = cb;
    call->late = late;
    call->arg = arg;
    deadline_init(&call->timeout, call_timeout);
    snprintf(nk, sizeof(nk), "%d", nkeys);
    all[0] = scripts[id].sha[0] ? "EVALSHA" : "EVAL";
    all[1] = scripts[id].sha[0] ? scripts[id].sha : scripts[id].body;
    all[2] = nk;
    memcpy(all + 3, argv, (size_t)argc * sizeof(*argv));
    call->argc = n;
    /* The one copy of the arguments: hiredis sends it, and a NOSCRIPT resends it. */
    if (redisFormatSdsCommandArgv(&call->cmd, n, all, NULL) < 0)
        fatalx("redis: out of memory");
    free(all);
    call->sent = now_us();
    if (call_send(call)) {
        call_free(call);
        return -1;
    }
    deadline_arm(rd->d->deadlines, &call->timeout, now_ms() + (uint64_t)rd->d->cfg.backend_timeout);
    return 0;
}

static void on_loaded(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct script *s = privdata;
    redisReply *r = reply;

    (void)ac;
    if (r && r->type == REDIS_REPLY_STRING && r->len == 40)
        memcpy(s->sha, r->str, 41);
    else if (r)
        log_warnx("backend: SCRIPT LOAD %s: %s", s->name, r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
}

static void on_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = reply;

    (void)ac;
    (void)privdata;
    if (r && r->type == REDIS_REPLY_ERROR)
        log_warnx("backend: AUTH: %s", r->str);
}

static void on_message(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct redis *rd = privdata;
    redisReply *r = reply;

    (void)ac;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3)
        return;
    if (strcmp(r->element[0]->str, "message") != 0 || r->element[2]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(r->element[1]->str, rd->latch_channel) == 0)
        latch_on_message(rd->d, r->element[2]->str);
    else
        wait_on_message(rd->d, r->element[2]->str);
}

static void became_ready(struct redis *rd)
{
    if (!redis_up(rd))
        return;
    rd->backoff = BACKOFF_MIN_MS;
    log_info("backend: connected");
    if (!rd->d->ready) {
        rd->d->ready = 1;
        notify("READY=1\nSTATUS=serving, Redis connected");
    } else {
        notify("STATUS=serving, Redis connected again");
    }
    renew_now(rd->d);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct redis *rd = ac->data;

    if (ac != rd->ac && ac != rd->sub)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback. */
        if (ac == rd->ac)
            rd->ac = NULL;
        else
            rd->sub = NULL;
        link_down(rd, ac->errstr);
        return;
    }
    if (ac == rd->ac)
        rd->ac_ready = 1;
    else
        rd->sub_ready = 1;
    became_ready(rd);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct redis *rd = ac->data;

    if (ac != rd->ac && ac != rd->sub)
        return;
    if (ac == rd->ac)
        rd->ac = NULL;
    else
        rd->sub = NULL;
    link_down(rd, status == REDIS_OK ? "closed" : ac->errstr);
}

static redisAsyncContext *open_one(struct redis *rd)
{
    const struct addr *a = &rd->d->cfg.redis;
    redisAsyncContext *ac = a->is_unix ? redisAsyncConnectUnix(a->path) : redisAsyncConnect(a->host, a->port);

    if (ac == NULL)
        fatalx("redis: out of memory");
    if (ac->err) {
        log_warnx("backend: connect: %s", ac->errstr);
        redisAsyncFree(ac);
        return NULL;
    }
    ac->data = rd;
    redisLibeventAttach(ac, rd->d->base);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (rd->d->cfg.redis_password)
        redisAsyncCommand(ac, on_auth, NULL, "AUTH %s", rd->d->cfg.redis_password);
    return ac;
}

static void connect_link(struct redis *rd)
{
    char channel[256];

    rd->ac_ready = rd->sub_ready = 0;
    if ((rd->ac = open_one(rd)) == NULL) {
        link_down(rd, "connect failed");
        return;
    }
    if ((rd->sub = open_one(rd)) == NULL) {
        link_down(rd, "connect failed");
        return;
    }
    for (int i = 0; i < SCRIPT_COUNT; i++)
        redisAsyncCommand(rd->ac, on_loaded, &scripts[i], "SCRIPT LOAD %s", scripts[i].body);
    snprintf(channel, sizeof(channel), "%s%s", rd->d->cfg.key_prefix, rd->d->id);
    snprintf(rd->latch_channel, sizeof(rd->latch_channel), "%slatch", rd->d->cfg.key_prefix);
    redisAsyncCommand(rd->sub, on_message, rd, "SUBSCRIBE %s %s", channel, rd->latch_channel);
}

static void on_reconnect(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    connect_link(arg);
}

/* Drops whatever is left of the link and schedules a reconnect. */
static void link_down(struct redis *rd, const char *why)
{
    redisAsyncContext *ac = rd->ac, *sub = rd->sub;
    struct timeval tv;

    if (rd->closed || event_pending(rd->reconnect, EV_TIMEOUT, NULL))
        return;
    log_warnx("backend: link down (%s), retrying in %dms", why ? why : "?", rd->backoff);
    notify("STATUS=Redis unreachable (%s), retrying", why ? why : "?");
    rd->ac = rd->sub = NULL;
    rd->ac_ready = rd->sub_ready = 0;
    tv.tv_sec = rd->backoff / 1000;
    tv.tv_usec = (rd->backoff % 1000) * 1000;
    evtimer_add(rd->reconnect, &tv);
    rd->backoff = rd->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : rd->backoff * 2;
    if (ac)
        redisAsyncDisconnect(ac);
    if (sub)
        redisAsyncDisconnect(sub);
    trouble(rd, 0, "link down (%s)", why ? why : "?");
}

struct redis *redis_new(struct dlockd *d)
{
    struct redis *rd = calloc(1, sizeof(*rd));

    if (rd == NULL || (rd->reconnect = evtimer_new(d->base, on_reconnect, rd)) == NULL)
        fatalx("redis: out of memory");
    rd->d = d;
    rd->backoff = BACKOFF_MIN_MS;
    snprintf(rd->error, sizeof(rd->error), "not connected yet");
    return rd;
}

void redis_start(struct redis *rd)
{
    connect_link(rd);
}

void redis_close(struct redis *rd)
{
    redisAsyncContext *ac = rd->ac, *sub = rd->sub;

    rd->closed = 1;
    evtimer_del(rd->reconnect);
    rd->ac = rd->sub = NULL;
    rd->ac_ready = rd->sub_ready = 0;
    /* Calls still pending are answered NULL from here. */
    if (ac)
        redisAsyncFree(ac);
    if (sub)
        redisAsyncFree(sub);
}

void redis_free(struct redis *rd)
{
    redis_close(rd);
    event_free(rd->reconnect);
    free(rd);
}
