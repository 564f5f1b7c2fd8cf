/* redis.c - two hiredis connections on the event loop: one runs scripts
 * (pipelined FCALL of the batch library and EVALSHA of renew.lua, loaded
 * again when Redis lost them), one receives this daemon's pub/sub
 * channel. They go to the redis key's address, or to the master that
 * sentinel.c names before each connect. The link is up only once both are
 * authenticated, the scripts loaded and Redis's eviction policy (and with
 * Sentinel its role) checked; every call has a deadline of
 * backend-timeout; any failure drops the link and reconnects with backoff,
 * and sessions hear * JEOPARDY, then * SAFE once every hold was renewed. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>
#include <hiredis/async.h>

#include "cluster.h"
#include "dlockd.h"
#include "evlink.h"
#include "log.h"
#include "notify.h"
#include "redis.h"
#include "reply.h"
#include "sentinel.h"
#include "strbuf.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define POLICY_NEEDED "noeviction" /* any other policy may evict a hold and grant it twice */

enum link_state {
    LINK_DOWN,      /* waiting to reconnect (or closed) */
    LINK_HANDSHAKE, /* connecting, authenticating, checking the policy, loading scripts, subscribing */
    LINK_UP,
};

/* What the log last said about the link: a line is written only when this changes. */
enum link_shown { SHOWN_NOTHING, SHOWN_UP, SHOWN_DOWN, SHOWN_REFUSED };

struct redis {
    struct dlockd *d;
    const struct redis_owner *owner; /* what the link tells, and to whom */
    redisAsyncContext *ac;    /* scripts; NULL while down */
    redisAsyncContext *sub;   /* pub/sub; NULL while down */
    enum link_state state;
    int ac_ready, sub_ready;  /* the handshake of each connection is done */
    int refused;              /* the last failure: Redis answered, but its eviction policy is not noeviction */
    enum link_shown shown;
    int jeopardy;             /* sessions were told * JEOPARDY */
    int clean;                /* nothing failed since the renewal cycle started */
    int recheck;              /* Redis went silent: renew as soon as it answers again */
    int backoff;              /* ms before the next reconnect */
    struct event *reconnect;
    struct deadline handshake; /* the handshake must be over by then */
    struct sentinel *sentinel; /* names the master; NULL: the redis key does */
    struct cluster *cluster;   /* routes scripts to the masters of a Redis Cluster; NULL: one Redis */
    int nmasters;              /* with cluster: the masters the handshake loaded, in table order */
    struct cluster_node masters[REDIS_NODES_MAX];
    int master_slot[REDIS_NODES_MAX]; /* a slot each master serves, to reach it */
    uint64_t redirects_at_table; /* MOVED and ASK the router had followed when its table was last installed */
    int pending;               /* with cluster: handshake calls not answered yet */
    unsigned epoch;            /* counts handshakes: a reply of an older one is stale */
    unsigned sub_next;         /* with cluster: the node the next pub/sub connection tries */
    char addr[300];            /* of the Redis in use or last tried; "" before the sentinels named one */
    char error[256];           /* the last failure: why the link is down or in jeopardy */
    char run_id[REDIS_NODES_MAX * 41];     /* of the Redis (every master) the link was last up to; "" before */
    char run_id_now[REDIS_NODES_MAX * 41]; /* of those this handshake reached, space-separated */
    char latch_channel[256];   /* where a latch that reaches 0 is announced */
    int closed;                /* shutting down: no reconnects */
    uint64_t answering_sent;   /* sent time of the call whose callback runs */
    int answering_late;        /* the callback running is a late one */
    uint64_t trouble_at;       /* monotonic ms of the last failure */
    uint64_t reconnects;       /* times the link came up again after the first time */
    TAILQ_HEAD(, redis_call) held; /* calls made during the first handshake, sent once it is over */
};

struct redis_call {
    struct redis *rd;
    enum script_id id;        /* SCRIPT_COUNT for a plain command */
    redis_cb *cb, *late;
    void *arg;
    int answered;             /* cb was called */
    int retried;              /* resent after NOSCRIPT or "Function not found" */
    uint64_t sent;            /* monotonic us */
    struct deadline timeout;
    int argc;                 /* of the command */
    int slot;                 /* with cluster: of the first key (0 without keys) */
    sds cmd;                  /* EVALSHA sha nkeys argv..., as sent */
    TAILQ_ENTRY(redis_call) in_held;
};

static void link_fail(struct redis *rd, int refused, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void on_policy(redisAsyncContext *ac, void *reply, void *privdata);
static void masters_policy(struct redis *rd);

int redis_up(const struct redis *rd)
{
    return rd->state == LINK_UP;
}

int redis_jeopardy(const struct redis *rd)
{
    return rd->jeopardy;
}

const char *redis_state(const struct redis *rd)
{
    if (rd->state == LINK_UP)
        return "up";
    return rd->refused ? "refused" : "down";
}

const char *redis_error(const struct redis *rd)
{
    return rd->state == LINK_UP && !rd->jeopardy ? "" : rd->error;
}

const char *redis_addr(const struct redis *rd)
{
    return rd->addr;
}

/* The Redis of the link, for logs. */
static const char *where(const struct redis *rd)
{
    return rd->addr[0] ? rd->addr : "(no master named yet)";
}

int64_t redis_notice_ms(const struct redis *rd)
{
    return BACKOFF_MAX_MS + rd->d->cfg.backend_timeout;
}

uint64_t redis_reconnects(const struct redis *rd)
{
    return rd->reconnects;
}

const char *redis_unavailable(const struct redis *rd)
{
    return rd->refused ? rd->error : "Redis is not reachable";
}

int redis_answering_late(const struct redis *rd)
{
    return rd->answering_late;
}

uint64_t redis_answering_sent(const struct redis *rd)
{
    return rd->answering_sent;
}

/* --- jeopardy: from any failure until a whole renewal cycle succeeds */

int redis_trouble_since(const struct redis *rd, uint64_t ms)
{
    return rd->jeopardy || rd->trouble_at >= ms;
}

static void enter_jeopardy(struct redis *rd)
{
    rd->trouble_at = now_ms();
    rd->clean = 0;
    if (rd->jeopardy)
        return;
    rd->jeopardy = 1;
    rd->owner->broadcast(rd->d, "JEOPARDY");
}

/* A call failed while the link is up; silent: Redis did not answer at all. */
static void trouble(struct redis *rd, int silent, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void trouble(struct redis *rd, int silent, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    rd->recheck |= silent;
    if (rd->jeopardy) {
        log_debug("backend: %s", why);
    } else {
        snprintf(rd->error, sizeof(rd->error), "%s", why);
        log_warnx("backend: in jeopardy, holds may not be renewed: %s", why);
    }
    enter_jeopardy(rd);
}

void redis_renewing(struct redis *rd)
{
    rd->clean = 1;
    if (rd->state == LINK_UP && rd->cluster)
        masters_policy(rd);
    else if (rd->state == LINK_UP)
        redisAsyncCommand(rd->ac, on_policy, rd, "INFO memory");
}

void redis_renewed(struct redis *rd)
{
    if (!rd->jeopardy || rd->state != LINK_UP || !rd->clean)
        return;
    rd->jeopardy = 0;
    log_notice("backend: safe again, every hold renewed");
    rd->owner->broadcast(rd->d, "SAFE");
}

/* --- replies */

const char *redis_elem(const redisReply *r, size_t i, char *buf, size_t len)
{
    const redisReply *e;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements)
        return "";
    e = r->element[i];
    if (e->type == REDIS_REPLY_INTEGER) {
        str_ll(buf, len, e->integer);
        return buf;
    }
    return (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) ? e->str : "";
}

long long redis_elem_int(const redisReply *r, size_t i)
{
    char buf[32];

    return strtoll(redis_elem(r, i, buf, sizeof(buf)), NULL, 10);
}

/* --- script calls */

static void call_free(struct redis_call *call)
{
    deadline_cancel(call->rd->d->deadlines, &call->timeout);
    redisFreeSdsCommand(call->cmd);
    free(call);
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

/* Answers a call that was never sent: it ran nowhere, and will not. */
static void call_drop(struct redis_call *call)
{
    call_answer(call, NULL);
    if (call->late)
        call->late(call->rd->d, NULL, call->arg);
    call_free(call);
}

/* The script of a call, or "command" for redis_command's. */
static const char *call_name(const struct redis_call *call)
{
    return call->id < SCRIPT_COUNT ? scripts[call->id].name : "command";
}

static void call_timeout(struct deadline *dl)
{
    struct redis_call *call = container_of(dl, struct redis_call, timeout);

    trouble(call->rd, 1, "%s did not answer within %lldms", call_name(call),
            (long long)call->rd->d->cfg.backend_timeout);
    call_answer(call, NULL);
}

static int call_send(struct redis_call *call);
static void on_reply(redisAsyncContext *ac, void *reply, void *privdata);

/* With cluster: a reply through the router. Without one, on_routed_late follows. */
static void on_routed(struct dlockd *d, redisReply *r, void *arg)
{
    (void)d;
    if (r)
        on_reply(NULL, r, arg);
}

/* With cluster: the reply after the router gave up waiting, or NULL when none will come. */
static void on_routed_late(struct dlockd *d, redisReply *r, void *arg)
{
    struct redis_call *call = arg;

    (void)d;
    if (r == NULL && !call->rd->closed && !call->answered)
        trouble(call->rd, 1, "%s: the cluster node was lost", call_name(call));
    on_reply(NULL, r, arg);
}

static void on_reloaded_routed(struct dlockd *d, redisReply *r, void *arg)
{
    const struct script *lib = arg;

    if (r && r->type == REDIS_REPLY_ERROR)
        trouble(d->redis, 0, "FUNCTION LOAD %s: %s", lib->name, r->str);
}

/* Writes "<c><n>\r\n" at p; returns the end. */
static char *resp_head(char *p, char c, size_t n)
{
    char d[24], *q = d + sizeof(d);
    size_t len;

    do
        *--q = (char)('0' + n % 10);
    while ((n /= 10) != 0);
    len = (size_t)(d + sizeof(d) - q);
    *p++ = c;
    memcpy(p, q, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

char *redis_resp_bulk(char *p, const char *s, size_t len)
{
    p = resp_head(p, '$', len);
    memcpy(p, s, len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/*
 * argv as a RESP command, in one allocation. hiredis's formatter appends
 * each argument with sdscatfmt, which on a batch of LOCKs costs more than
 * everything else the daemon does for them.
 */
static sds resp_command(int argc, const char **argv)
{
    size_t total = 3 + 20, len;
    sds cmd;
    char *p;

    for (int i = 0; i < argc; i++)
        total += 25 + strlen(argv[i]); /* at most: "$", 20 digits, "\r\n", the argument, "\r\n" */
    /* not sdsnewlen(NULL, total), which clears it all first */
    cmd = must(sdsMakeRoomFor(sdsempty(), total));
    p = resp_head(cmd, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        len = strlen(argv[i]);
        p = redis_resp_bulk(p, argv[i], len);
    }
    sdssetlen(cmd, (size_t)(p - cmd));
    *p = '\0';
    return cmd;
}

/* Formats argv as a command for the router. */
static sds routed_cmd(int argc, const char **argv)
{
    return resp_command(argc, argv);
}

static void on_reloaded(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = reply;
    const struct script *lib = privdata;

    if (r && r->type == REDIS_REPLY_ERROR && ac == ((struct redis *)ac->data)->ac)
        trouble(ac->data, 0, "FUNCTION LOAD %s: %s", lib->name, r->str);
}

/* After "Function not found" (someone ran FUNCTION FLUSH): the library
 * again, then the same call, which Redis runs after it. */
static int resend_with_library(struct redis_call *call)
{
    const struct script *lib = &scripts[call->id];
    const char *argv[] = { "FUNCTION", "LOAD", "REPLACE", lib->body };

    if (call->rd->cluster) {
        if (cluster_send(call->rd->cluster, call->slot, routed_cmd(4, argv), on_reloaded_routed, NULL, (void *)lib))
            return -1;
        return call_send(call);
    }
    if (call->rd->ac == NULL ||
        redisAsyncCommand(call->rd->ac, on_reloaded, (void *)lib, "FUNCTION LOAD REPLACE %s", lib->body) != REDIS_OK)
        return -1;
    return call_send(call);
}

/* After NOSCRIPT: the same call with EVAL and the body instead of EVALSHA and the sha. */
static int resend_with_eval(struct redis_call *call)
{
    const char *body = scripts[call->id].body, *args = call->cmd;
    sds cmd;

    for (int i = 0; i < 5; i++) /* past the lines "*N", "$7", "EVALSHA", "$40" and the sha */
        args = strstr(args, "\r\n") + 2;
    cmd = must(sdscatfmt(sdsempty(), "*%i\r\n$4\r\nEVAL\r\n$%U\r\n%s\r\n%s", call->argc,
                         (unsigned long long)strlen(body), body, args));
    redisFreeSdsCommand(call->cmd);
    call->cmd = cmd;
    return call_send(call);
}

/* 1 when a reply error says the Redis that Sentinel named is no longer the
 * master: the link drops, and the next connect asks the sentinels again. */
static int demoted(const struct redis *rd, const char *error)
{
    return rd->sentinel && (strncmp(error, "READONLY", 8) == 0 || strncmp(error, "MASTERDOWN", 10) == 0);
}

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct redis_call *call = privdata;
    struct redis *rd = call->rd;
    redisReply *r = reply;

    (void)ac;
    if (r && r->type == REDIS_REPLY_ERROR && demoted(rd, r->str)) {
        link_fail(rd, 0, "%s: %s", call_name(call), r->str);
        r = NULL;
    }
    if (r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0 && !call->retried) {
        call->retried = 1;
        if (resend_with_eval(call) == 0)
            return;
        r = NULL;
    }
    if (r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "Function not found") && !call->retried) {
        call->retried = 1;
        if (resend_with_library(call) == 0)
            return;
        r = NULL;
    }
    if (r && r->type == REDIS_REPLY_ERROR) {
        /* OOM, BUSY, READONLY...: Redis is there but does not do what dlockd needs. */
        trouble(rd, 0, "%s: %s", call_name(call), r->str);
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
        rd->owner->renew(rd->d);
    }
    call_free(call);
}

static int call_send(struct redis_call *call)
{
    sds cmd;

    if (call->rd->cluster) {
        cmd = must(sdsdup(call->cmd));
        return cluster_send(call->rd->cluster, call->slot, cmd, on_routed, on_routed_late, call);
    }
    if (call->rd->ac == NULL)
        return -1;
    return redisAsyncFormattedCommand(call->rd->ac, on_reply, call, call->cmd, sdslen(call->cmd)) == REDIS_OK ? 0 : -1;
}

/* Sends a new call and starts its backend-timeout. */
static int call_start(struct redis_call *call)
{
    struct redis *rd = call->rd;

    call->sent = now_us();
    if (call_send(call))
        return -1;
    deadline_arm(rd->d->deadlines, &call->timeout, now_ms() + (uint64_t)rd->d->cfg.backend_timeout);
    return 0;
}

/* Sends the calls held back by the first handshake once the link is up, or
 * answers them when it failed: they ran nowhere. The handshake has its own
 * deadline, so they wait no longer than backend-timeout. */
static void release_held(struct redis *rd)
{
    struct redis_call *call;

    while ((call = TAILQ_FIRST(&rd->held)) != NULL) {
        TAILQ_REMOVE(&rd->held, call, in_held);
        if (rd->state != LINK_UP || call_start(call))
            call_drop(call);
    }
}

int redis_accepts(const struct redis *rd)
{
    /* Requests that come while dlockd first connects wait for it; later, a link that is not up fails them at once. */
    return redis_up(rd) || (rd->state == LINK_HANDSHAKE && rd->shown == SHOWN_NOTHING);
}

static struct redis_call *call_new(struct redis *rd, enum script_id id, redis_cb *cb, redis_cb *late, void *arg)
{
    struct redis_call *call = must(calloc(1, sizeof(*call)));

    call->rd = rd;
    call->id = id;
    call->cb = cb;
    call->late = late;
    call->arg = arg;
    deadline_init(&call->timeout, call_timeout);
    return call;
}

/* Sends call, or holds it while the first handshake runs. Returns 0, or -1 (call freed). */
static int call_go(struct redis_call *call)
{
    if (!redis_up(call->rd)) {
        TAILQ_INSERT_TAIL(&call->rd->held, call, in_held);
        return 0;
    }
    if (call_start(call)) {
        call_free(call);
        return -1;
    }
    return 0;
}

int redis_script(struct redis *rd, enum script_id id, int nkeys, int argc, const char **argv, redis_cb *cb,
                 redis_cb *late, void *arg)
{
    struct redis_call *call;
    const char **all;
    char nk[16];
    int n = argc + 3;

    if (!redis_accepts(rd))
        return -1;
    all = must(malloc((size_t)n * sizeof(*all)));
    call = call_new(rd, id, cb, late, arg);
    call->slot = nkeys > 0 ? cluster_slot(argv[0], strlen(argv[0])) : 0;
    str_ll(nk, sizeof(nk), nkeys);
    /* Before the first SCRIPT LOAD answered (a call held by the first handshake), the body itself. */
    if (scripts[id].function) {
        all[0] = "FCALL";
        all[1] = scripts[id].function;
    } else {
        all[0] = scripts[id].sha[0] ? "EVALSHA" : "EVAL";
        all[1] = scripts[id].sha[0] ? scripts[id].sha : scripts[id].body;
    }
    all[2] = nk;
    memcpy(all + 3, argv, (size_t)argc * sizeof(*argv));
    call->argc = n;
    /* The one copy of the arguments: hiredis sends it, and a NOSCRIPT resends it. */
    call->cmd = resp_command(n, all);
    free(all);
    return call_go(call);
}

int redis_script_resp(struct redis *rd, enum script_id id, int slot, int nkeys, int argc,
                      const struct redis_resp *parts, int nparts, redis_cb *cb, redis_cb *late, void *arg)
{
    const char *fn = scripts[id].function;
    struct redis_call *call;
    size_t total = 3 + 20 + REDIS_RESP_BULK_MAX(5) + REDIS_RESP_BULK_MAX(strlen(fn)) + REDIS_RESP_BULK_MAX(20);
    char nk[24], *p;

    if (!redis_accepts(rd))
        return -1;
    for (int i = 0; i < nparts; i++)
        total += parts[i].len;
    call = call_new(rd, id, cb, late, arg);
    call->slot = slot;
    call->argc = argc + 3;
    call->cmd = must(sdsMakeRoomFor(sdsempty(), total));
    p = resp_head(call->cmd, '*', (size_t)call->argc);
    p = redis_resp_bulk(p, "FCALL", 5);
    p = redis_resp_bulk(p, fn, strlen(fn));
    p = redis_resp_bulk(p, nk, str_ll(nk, sizeof(nk), nkeys));
    for (int i = 0; i < nparts; i++) {
        memcpy(p, parts[i].buf, parts[i].len);
        p += parts[i].len;
    }
    sdssetlen(call->cmd, (size_t)(p - call->cmd));
    *p = '\0';
    return call_go(call);
}

int redis_nodes(const struct redis *rd)
{
    return rd->cluster && rd->nmasters > 0 ? rd->nmasters : 1;
}

int redis_command(struct redis *rd, int node, int argc, const char **argv, redis_cb *cb, void *arg)
{
    struct redis_call *call;

    if (!redis_accepts(rd) || node < 0 || node >= redis_nodes(rd))
        return -1;
    call = call_new(rd, SCRIPT_COUNT, cb, NULL, arg);
    call->slot = rd->cluster ? rd->master_slot[node] : 0;
    call->retried = 1; /* no script to load again */
    call->argc = argc;
    call->cmd = resp_command(argc, argv);
    return call_go(call);
}

/* --- the handshake: AUTH, the eviction policy and the scripts on one connection, AUTH and SUBSCRIBE on the other */

/* 1 when the space-separated words of list hold word. */
static int has_word(const char *list, const char *word, size_t len)
{
    for (const char *p = list; *p; p += *p == ' ') {
        size_t n = strcspn(p, " ");
        if (n == len && memcmp(p, word, len) == 0)
            return 1;
        p += n;
    }
    return 0;
}

/* 1 when a run_id of now is not in old: another server, or one restarted. */
static int new_server(const char *old, const char *now)
{
    for (const char *p = now; *p; p += *p == ' ') {
        size_t n = strcspn(p, " ");
        if (!has_word(old, p, n))
            return 1;
        p += n;
    }
    return 0;
}

static void link_up(struct redis *rd)
{
    if (rd->state != LINK_HANDSHAKE || !rd->ac_ready || !rd->sub_ready)
        return;
    rd->state = LINK_UP;
    rd->refused = 0;
    rd->backoff = BACKOFF_MIN_MS;
    deadline_cancel(rd->d->deadlines, &rd->handshake);
    rd->shown = SHOWN_UP;
    log_notice("backend: Redis at %s is up", where(rd));
    release_held(rd);
    rd->owner->resubscribed(rd->d);
    if (!rd->d->ready) {
        rd->d->ready = 1;
        notify("READY=1\nSTATUS=serving, Redis connected");
    } else {
        rd->reconnects++;
        notify("STATUS=serving, Redis connected again");
    }
    /* Another server, or one restarted: it may lack holds that were granted. */
    if (rd->run_id[0] && new_server(rd->run_id, rd->run_id_now)) {
        memcpy(rd->run_id, rd->run_id_now, sizeof(rd->run_id));
        rd->owner->failover(rd->d);
        return;
    }
    memcpy(rd->run_id, rd->run_id_now, sizeof(rd->run_id));
    rd->owner->renew(rd->d);
}

/* The reply of a handshake command on ac, or NULL when it is stale or the link went. */
static redisReply *current(const redisAsyncContext *ac, void *reply)
{
    const struct redis *rd = ac->data;

    return reply && (ac == rd->ac || ac == rd->sub) ? reply : NULL;
}

static void on_auth(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = current(ac, reply);

    (void)privdata;
    if (r && r->type == REDIS_REPLY_ERROR)
        link_fail(ac->data, 0, "AUTH: %s", r->str);
}

/* Copies the maxmemory_policy of an INFO memory reply to out; "" when absent. */
static void policy_of(const redisReply *r, char *out, size_t len)
{
    const char *p = r->type == REDIS_REPLY_STRING ? strstr(r->str, "maxmemory_policy:") : NULL;

    out[0] = '\0';
    if (p) {
        p += strlen("maxmemory_policy:");
        snprintf(out, len, "%.*s", (int)strcspn(p, "\r\n"), p);
    }
}

/* INFO memory: a policy other than noeviction refuses the link. Returns 0, or -1 after link_fail. */
static int policy_check(struct redis *rd, const redisReply *r)
{
    char policy[64];

    if (r->type == REDIS_REPLY_ERROR) {
        link_fail(rd, 1, "Redis maxmemory-policy cannot be read (INFO: %s); dlockd needs " POLICY_NEEDED, r->str);
        return -1;
    }
    policy_of(r, policy, sizeof(policy));
    if (strcmp(policy, POLICY_NEEDED) != 0) {
        link_fail(rd, 1, "Redis maxmemory-policy is %s; dlockd needs " POLICY_NEEDED, policy[0] ? policy : "unknown");
        return -1;
    }
    return 0;
}

static void on_policy(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = current(ac, reply);

    (void)privdata;
    if (r)
        policy_check(ac->data, r);
}

/* INFO server: the run_id, which tells a failover or a restart from a
 * reconnect, added to run_id_now. Returns 0, or -1 after link_fail. */
static int run_id_read(struct redis *rd, const redisReply *r)
{
    const char *p = r->type == REDIS_REPLY_STRING ? strstr(r->str, "run_id:") : NULL;
    size_t at = strlen(rd->run_id_now);

    if (p == NULL) {
        link_fail(rd, 0, "INFO server: %s", r->type == REDIS_REPLY_ERROR ? r->str : "no run_id");
        return -1;
    }
    p += strlen("run_id:");
    snprintf(rd->run_id_now + at, sizeof(rd->run_id_now) - at, "%s%.*s", at ? " " : "", (int)strcspn(p, "\r\n"), p);
    return 0;
}

static void on_server(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = current(ac, reply);

    (void)privdata;
    if (r)
        run_id_read(ac->data, r);
}

/* With Sentinel: the Redis named must say it is the master, or the link fails and the sentinels are asked again. */
static void on_role(redisAsyncContext *ac, void *reply, void *privdata)
{
    redisReply *r = current(ac, reply);
    const char *role;
    char buf[32];

    (void)privdata;
    if (r == NULL)
        return;
    role = redis_elem(r, 0, buf, sizeof(buf));
    if (r->type == REDIS_REPLY_ERROR)
        link_fail(ac->data, 0, "ROLE: %s", r->str);
    else if (strcmp(role, "master") != 0)
        link_fail(ac->data, 0, "Redis at %s is a %s, not the master", ((struct redis *)ac->data)->addr,
                  role[0] ? role : "server of unknown role");
}

static void check_role(struct redis *rd)
{
    if (rd->sentinel)
        redisAsyncCommand(rd->ac, on_role, NULL, "ROLE");
}

/* The answer to loading s. Returns 0, or -1 after link_fail. */
static int loaded_check(struct redis *rd, struct script *s, const redisReply *r)
{
    if (r->type != REDIS_REPLY_STRING || (s->function == NULL && r->len != 40)) {
        link_fail(rd, 0, "%s %s: %s", s->function ? "FUNCTION LOAD" : "SCRIPT LOAD", s->name,
                  r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
        return -1;
    }
    if (s->function == NULL)
        memcpy(s->sha, r->str, 41);
    return 0;
}

static void on_loaded(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct redis *rd = ac->data;
    struct script *s = privdata;
    redisReply *r = current(ac, reply);

    if (r == NULL || loaded_check(rd, s, r))
        return;
    if (s == &scripts[SCRIPT_COUNT - 1]) {
        rd->ac_ready = 1;
        link_up(rd);
    }
}

/* Pub/sub: the confirmation of the two channels, then messages. */
static void on_message(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct redis *rd = privdata;
    redisReply *r = reply;

    if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_STRING)
        return;
    if (strcmp(r->element[0]->str, "subscribe") == 0 && ac == rd->sub && r->element[2]->type == REDIS_REPLY_INTEGER &&
        r->element[2]->integer == 2) {
        rd->sub_ready = 1;
        link_up(rd);
        return;
    }
    if (strcmp(r->element[0]->str, "message") != 0 || r->element[2]->type != REDIS_REPLY_STRING)
        return;
    rd->owner->message(rd->d, strcmp(r->element[1]->str, rd->latch_channel) == 0, r->element[2]->str);
}

static void on_handshake_late(struct deadline *dl)
{
    struct redis *rd = container_of(dl, struct redis, handshake);

    link_fail(rd, 0, "no answer within %lldms while connecting", (long long)rd->d->cfg.backend_timeout);
}

/* --- connections */

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct redis *rd = ac->data;

    if (status == REDIS_OK || (ac != rd->ac && ac != rd->sub))
        return;
    /* hiredis frees the context after this callback. */
    if (ac == rd->ac)
        rd->ac = NULL;
    else
        rd->sub = NULL;
    link_fail(rd, 0, "%s", ac->errstr);
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
    link_fail(rd, 0, "%s", status == REDIS_OK ? "connection closed" : ac->errstr);
}

/* Opens one connection to a and queues its AUTH. Returns NULL with the reason in err. */
static redisAsyncContext *open_one(struct redis *rd, const struct addr *a, char *err, size_t len)
{
    const struct config *cfg = &rd->d->cfg;
    redisAsyncContext *ac = must(a->is_unix ? redisAsyncConnectUnix(a->path) : redisAsyncConnect(a->host, a->port));

    if (ac->err) {
        snprintf(err, len, "%s", ac->errstr);
        redisAsyncFree(ac);
        return NULL;
    }
    ac->data = rd;
    reply_arena_attach(&ac->c);
    evlink_attach(ac, rd->d->base);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (cfg->redis_user)
        redisAsyncCommand(ac, on_auth, NULL, "AUTH %s %s", cfg->redis_user,
                          cfg->redis_password ? cfg->redis_password : "");
    else if (cfg->redis_password)
        redisAsyncCommand(ac, on_auth, NULL, "AUTH %s", cfg->redis_password);
    return ac;
}

/* This daemon's channel and the latch channel, on the pub/sub connection. */
static void subscribe(struct redis *rd)
{
    char channel[256];

    snprintf(channel, sizeof(channel), "%s%s", rd->d->cfg.key_prefix, rd->d->id);
    redisAsyncCommand(rd->sub, on_message, rd, "SUBSCRIBE %s %s", channel, rd->latch_channel);
}

/* The handshake with the Redis at a. */
static void connect_to(struct redis *rd, const struct addr *a)
{
    char err[256];

    config_addr_str(a, rd->addr, sizeof(rd->addr));
    deadline_arm(rd->d->deadlines, &rd->handshake, now_ms() + (uint64_t)rd->d->cfg.backend_timeout);
    if ((rd->ac = open_one(rd, a, err, sizeof(err))) == NULL || (rd->sub = open_one(rd, a, err, sizeof(err))) == NULL) {
        link_fail(rd, 0, "%s", err);
        return;
    }
    check_role(rd);
    redisAsyncCommand(rd->ac, on_policy, rd, "INFO memory");
    redisAsyncCommand(rd->ac, on_server, rd, "INFO server");
    for (int i = 0; i < SCRIPT_COUNT; i++)
        redisAsyncCommand(rd->ac, on_loaded, &scripts[i],
                          scripts[i].function ? "FUNCTION LOAD REPLACE %s" : "SCRIPT LOAD %s", scripts[i].body);
    subscribe(rd);
}

/* --- Redis Cluster: the handshake on every master, through the router */

#define HS_POLICY (-1) /* what a handshake call asks: INFO memory */
#define HS_SERVER (-2) /* INFO server; else the index of the script it loads */

/* A handshake call through the router: what it asks, and for which handshake. */
struct hs_call {
    struct redis *rd;
    unsigned epoch;
    int what;
};

static void on_hs_reply(struct dlockd *d, redisReply *r, void *arg)
{
    struct hs_call *h = arg;
    struct redis *rd = d->redis;
    int what = h->what, stale = h->epoch != rd->epoch || rd->state != LINK_HANDSHAKE;

    free(h);
    if (stale)
        return;
    if (r == NULL) {
        link_fail(rd, 0, "a cluster master did not answer within %lldms", (long long)d->cfg.backend_timeout);
        return;
    }
    if (what == HS_POLICY ? policy_check(rd, r) : what == HS_SERVER ? run_id_read(rd, r)
                                                                    : loaded_check(rd, &scripts[what], r))
        return;
    if (--rd->pending == 0) {
        rd->ac_ready = 1;
        link_up(rd);
    }
}

static void hs_send(struct redis *rd, int slot, int what, int argc, const char **argv)
{
    struct hs_call *h = must(malloc(sizeof(*h)));

    *h = (struct hs_call){ rd, rd->epoch, what };
    rd->pending++;
    if (cluster_send(rd->cluster, slot, routed_cmd(argc, argv), on_hs_reply, NULL, h)) {
        free(h);
        link_fail(rd, 0, "no cluster master serves slot %d", slot);
    }
}

/* The policy, the run_id and the scripts on the master that serves slot. */
static void master_load(struct redis *rd, int slot)
{
    const char *memory[] = { "INFO", "memory" }, *server[] = { "INFO", "server" };

    hs_send(rd, slot, HS_POLICY, 2, memory);
    hs_send(rd, slot, HS_SERVER, 2, server);
    for (int i = 0; i < SCRIPT_COUNT && rd->state == LINK_HANDSHAKE; i++) {
        const char *fn[] = { "FUNCTION", "LOAD", "REPLACE", scripts[i].body };
        const char *sc[] = { "SCRIPT", "LOAD", scripts[i].body };
        if (scripts[i].function)
            hs_send(rd, slot, i, 4, fn);
        else
            hs_send(rd, slot, i, 3, sc);
    }
}

/* Opens the pub/sub connection on the next node of t, masters and replicas in turn. */
static void sub_open(struct redis *rd, const struct cluster_table *t)
{
    const struct cluster_node *node = NULL;
    struct addr a = { 0 };
    char err[256];
    int n = 0, pick;

    for (int i = 0; i < t->nshards; i++)
        n += 1 + t->shards[i].nreplicas;
    pick = (int)(rd->sub_next++ % (unsigned)n);
    for (int i = 0; node == NULL; pick -= 1 + t->shards[i++].nreplicas)
        if (pick <= t->shards[i].nreplicas)
            node = pick == 0 ? &t->shards[i].master : &t->shards[i].replicas[pick - 1];
    snprintf(a.host, sizeof(a.host), "%s", node->host);
    a.port = node->port;
    if ((rd->sub = open_one(rd, &a, err, sizeof(err))) == NULL) {
        link_fail(rd, 0, "pub/sub on %s:%d: %s", node->host, node->port, err);
        return;
    }
    subscribe(rd);
}

/* The table is known: every master gets the handshake, one node the pub/sub connection. */
static void masters_load(struct redis *rd)
{
    const struct cluster_table *t = cluster_table(rd->cluster);

    if (t->nshards > REDIS_NODES_MAX) {
        link_fail(rd, 0, "the cluster has %d masters; dlockd works with %d at most", t->nshards, REDIS_NODES_MAX);
        return;
    }
    rd->nmasters = t->nshards;
    for (int i = 0; i < t->nshards; i++)
        rd->masters[i] = t->shards[i].master;
    for (int slot = CLUSTER_SLOTS - 1; slot >= 0; slot--)
        if (t->shard_of[slot] >= 0)
            rd->master_slot[t->shard_of[slot]] = slot;
    deadline_arm(rd->d->deadlines, &rd->handshake, now_ms() + (uint64_t)rd->d->cfg.backend_timeout);
    for (int i = 0; i < rd->nmasters && rd->state == LINK_HANDSHAKE; i++)
        master_load(rd, rd->master_slot[i]);
    if (rd->state == LINK_HANDSHAKE)
        sub_open(rd, t);
}

static void on_policy_routed(struct dlockd *d, redisReply *r, void *arg)
{
    (void)arg;
    if (r && d->redis->state == LINK_UP)
        policy_check(d->redis, r);
}

/* The eviction policy of every master again, as a renewal cycle starts. */
static void masters_policy(struct redis *rd)
{
    const char *memory[] = { "INFO", "memory" };

    for (int i = 0; i < rd->nmasters; i++)
        cluster_send(rd->cluster, rd->master_slot[i], routed_cmd(2, memory), on_policy_routed, NULL, NULL);
}

/* A master of the table the handshake did not load, or NULL. */
static const struct cluster_node *new_master(const struct redis *rd)
{
    const struct cluster_table *t = cluster_table(rd->cluster);
    int known;

    for (int i = 0; t && i < t->nshards; i++) {
        known = 0;
        for (int j = 0; j < rd->nmasters && !known; j++)
            known = rd->masters[j].port == t->shards[i].master.port &&
                    strcmp(rd->masters[j].host, t->shards[i].master.host) == 0;
        if (!known)
            return &t->shards[i].master;
    }
    return NULL;
}

/* A refresh ended: the handshake goes on with the table, and a new master
 * (a failover, a master added) makes the link again, to load it there. */
static void on_refreshed(struct dlockd *d, int ok)
{
    struct redis *rd = d->redis;
    const struct cluster_node *n;

    if (ok)
        rd->redirects_at_table = cluster_stats(rd->cluster)->moved + cluster_stats(rd->cluster)->asked;
    if (rd->closed || rd->state == LINK_DOWN)
        return;
    if (rd->state == LINK_HANDSHAKE && rd->sub == NULL) {
        if (ok)
            masters_load(rd);
        else
            link_fail(rd, 0, "no cluster node gave the slot table (%s)", cluster_error(rd->cluster));
        return;
    }
    if (ok && (n = new_master(rd)) != NULL)
        link_fail(rd, 0, "%s:%d is a new cluster master", n->host, n->port);
}

static const struct cluster_owner cluster_owner = {
    .refreshed = on_refreshed,
};

int redis_slots(const struct redis *rd)
{
    return rd->cluster ? CLUSTER_SLOTS : 1;
}

int redis_slot(const struct redis *rd, const char *key)
{
    return rd->cluster ? cluster_slot(key, strlen(key)) : 0;
}

int redis_node_of(const struct redis *rd, int slot)
{
    const struct cluster_node *n, *m;

    if (rd->cluster == NULL)
        return 0;
    if ((n = cluster_node_for_slot(rd->cluster, slot)) == NULL)
        return -1;
    for (int i = 0; i < rd->nmasters; i++)
        if ((m = cluster_node_for_slot(rd->cluster, rd->master_slot[i])) != NULL && m->port == n->port &&
            strcmp(m->host, n->host) == 0)
            return i;
    return -1;
}

uint64_t redis_routing(const struct redis *rd)
{
    const struct cluster_stats *st;

    if (rd->cluster == NULL)
        return rd->epoch;
    st = cluster_stats(rd->cluster);
    return rd->epoch + st->refreshes + st->failures + st->moved + st->asked;
}

int redis_routing_settled(const struct redis *rd)
{
    const struct cluster_stats *st;

    if (rd->cluster == NULL)
        return 1;
    st = cluster_stats(rd->cluster);
    return !cluster_refreshing(rd->cluster) && st->moved + st->asked == rd->redirects_at_table;
}

/* The sentinels' answer: the master to connect to, or why there is none. */
static void on_located(const struct addr *master, const char *why, void *arg)
{
    struct redis *rd = arg;

    if (rd->state != LINK_HANDSHAKE || rd->ac)
        return;
    if (master)
        connect_to(rd, master);
    else
        link_fail(rd, 0, "%s", why);
}

static void connect_link(struct redis *rd)
{
    rd->state = LINK_HANDSHAKE;
    rd->ac_ready = rd->sub_ready = 0;
    rd->run_id_now[0] = '\0';
    rd->epoch++;
    rd->pending = 0;
    if (rd->cluster)
        cluster_refresh(rd->cluster); /* on_refreshed goes on */
    else if (rd->sentinel)
        sentinel_ask(rd->sentinel, on_located, rd);
    else
        connect_to(rd, &rd->d->cfg.redis);
}

/* A sentinel announced a new master: the link to the old one drops, or a
 * link waiting for its backoff asks the sentinels at once. A link to (or
 * connecting to) that address already heard of the switch from another
 * sentinel. An old announcement costs a reconnect: the sentinels are asked. */
static void on_switch(const char *to, void *arg)
{
    struct redis *rd = arg;

    if (rd->closed || (rd->state != LINK_DOWN && rd->ac && strcmp(rd->addr, to) == 0))
        return;
    if (rd->state == LINK_HANDSHAKE && rd->ac == NULL) { /* asking the sentinels: again, from now */
        sentinel_ask(rd->sentinel, on_located, rd);
        return;
    }
    if (rd->state != LINK_DOWN) {
        link_fail(rd, 0, "Sentinel switched the master to %s", to);
        return;
    }
    evtimer_del(rd->reconnect);
    rd->backoff = BACKOFF_MIN_MS;
    connect_link(rd);
}

static void on_reconnect(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    connect_link(arg);
}

/* Lets go of a connection: an up one after the replies still due (calls
 * that get none time out), one still in its handshake at once, so that a
 * Redis that does not answer keeps no connection per retry. */
static void drop(redisAsyncContext *ac, int was_up)
{
    if (ac && was_up)
        redisAsyncDisconnect(ac);
    else if (ac)
        redisAsyncFree(ac);
}

/* The one way down: drops what is left of the link and schedules a
 * reconnect, backing off further after each failure until the link is up.
 * refused: Redis answered, but must not be used. */
static void link_fail(struct redis *rd, int refused, const char *fmt, ...)
{
    redisAsyncContext *ac = rd->ac, *sub = rd->sub;
    enum link_shown shown = refused ? SHOWN_REFUSED : SHOWN_DOWN;
    int was_up = rd->state == LINK_UP;
    struct timeval tv;
    va_list ap;

    if (rd->closed || rd->state == LINK_DOWN)
        return;
    va_start(ap, fmt);
    vsnprintf(rd->error, sizeof(rd->error), fmt, ap);
    va_end(ap);
    rd->state = LINK_DOWN;
    rd->refused = refused;
    rd->ac = rd->sub = NULL;
    deadline_cancel(rd->d->deadlines, &rd->handshake);
    if (shown != rd->shown) {
        log_warnx("backend: %s Redis at %s: %s; holds cannot be renewed, retrying", refused ? "refusing" : "cannot use",
                  where(rd), rd->error);
        notify("STATUS=Redis %s (%s), retrying", refused ? "refused" : "unreachable", rd->error);
        rd->shown = shown;
    } else {
        log_debug("backend: Redis at %s: %s; next try in %dms", where(rd), rd->error, rd->backoff);
    }
    tv.tv_sec = rd->backoff / 1000;
    tv.tv_usec = (rd->backoff % 1000) * 1000;
    evtimer_add(rd->reconnect, &tv);
    rd->backoff = rd->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : rd->backoff * 2;
    drop(ac, was_up);
    drop(sub, was_up);
    enter_jeopardy(rd);
    release_held(rd);
}

struct redis *redis_new(struct dlockd *d, const struct redis_owner *owner)
{
    struct redis *rd = must(calloc(1, sizeof(*rd)));

    rd->reconnect = must(evtimer_new(d->base, on_reconnect, rd));
    rd->d = d;
    rd->owner = owner;
    rd->backoff = BACKOFF_MIN_MS;
    TAILQ_INIT(&rd->held);
    deadline_init(&rd->handshake, on_handshake_late);
    if (d->cfg.sentinels.n > 0)
        rd->sentinel = sentinel_new(d, on_switch, rd);
    else if (d->cfg.cluster.n > 0)
        rd->cluster = cluster_new(d, &cluster_owner, d->cfg.cluster.addr, d->cfg.cluster.n);
    if (d->cfg.cluster.n > 0)
        config_addr_str(&d->cfg.cluster.addr[0], rd->addr, sizeof(rd->addr));
    else if (d->cfg.sentinels.n == 0)
        config_addr_str(&d->cfg.redis, rd->addr, sizeof(rd->addr));
    snprintf(rd->error, sizeof(rd->error), "not connected yet");
    snprintf(rd->latch_channel, sizeof(rd->latch_channel), "%slatch", d->cfg.key_prefix);
    return rd;
}

void redis_start(struct redis *rd)
{
    if (rd->sentinel)
        sentinel_watch(rd->sentinel);
    connect_link(rd);
}

void redis_close(struct redis *rd)
{
    redisAsyncContext *ac = rd->ac, *sub = rd->sub;

    rd->closed = 1;
    rd->state = LINK_DOWN;
    evtimer_del(rd->reconnect);
    if (rd->sentinel)
        sentinel_close(rd->sentinel);
    if (rd->cluster)
        cluster_free(rd->cluster);
    rd->cluster = NULL;
    deadline_cancel(rd->d->deadlines, &rd->handshake);
    rd->ac = rd->sub = NULL;
    release_held(rd);
    /* Calls still pending are answered NULL from here. */
    if (ac)
        redisAsyncFree(ac);
    if (sub)
        redisAsyncFree(sub);
}

void redis_free(struct redis *rd)
{
    redis_close(rd);
    if (rd->sentinel)
        sentinel_free(rd->sentinel);
    event_free(rd->reconnect);
    free(rd);
    reply_arena_free_all();
}
