/* client.c - the connections of the load generator: dlockd sessions spoken to
 * in the line protocol, or direct Redis clients that call dlockd's own batch
 * library (FCALL) and renew script (EVALSHA), or the recipe's scripts
 * (EVALSHA); over TCP or a unix socket. All answer in order, so each
 * connection keeps a FIFO of the callbacks waiting for a reply. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <hiredis/adapters/libevent.h>

#include "bench.h"
#include "contract.h"
#include "proto.h"
#include "scripts.h"

/* Connects in flight on a unix socket: one whose listen backlog is full fails a
 * connect (EAGAIN) where TCP would retry it (dlockd's backlog is 511, Redis's 511 by default). */
#define UNIX_OPEN_MAX 100

enum kind { K_PING, K_LOCK, K_UNLOCK, K_RENEW, K_HB, K_ACQUIRE, K_RELEASE };

static void open_more(struct bench *b);

void bench_name(const struct bench *b, int i, char *buf, size_t len)
{
    snprintf(buf, len, "bench:%s:%d", b->run, i);
}

/* --- the reply FIFO */

static void push(struct cl *c, cl_cb *cb, void *arg)
{
    int i;

    if (c->qlen == CL_QMAX) {
        bench_error(c->b, "connection %d: more than %d requests in flight", c->id, CL_QMAX);
        return;
    }
    i = (c->qhead + c->qlen++) % CL_QMAX;
    c->q[i].cb = cb;
    c->q[i].arg = arg;
}

static void pop(struct cl *c, enum status st)
{
    struct pending p;

    if (c->qlen == 0) {
        bench_error(c->b, "connection %d: a reply nobody asked for", c->id);
        return;
    }
    p = c->q[c->qhead];
    c->qhead = (c->qhead + 1) % CL_QMAX;
    c->qlen--;
    if (p.cb)
        p.cb(c, st, p.arg);
}

/* The connection is gone: every request in flight fails. */
static void broken(struct cl *c, const char *why)
{
    if (c->broken)
        return;
    c->broken = 1;
    if (!c->b->stopping)
        bench_error(c->b, "connection %d: %s", c->id, why);
    while (c->qlen > 0)
        pop(c, ST_GONE);
}

static void on_ready(struct cl *c, enum status st, void *arg)
{
    struct bench *b = c->b;

    (void)arg;
    if (st != ST_OK)
        return;
    c->ready = 1;
    b->connecting--;
    if (++b->opened == b->ncl && b->all_open) {
        void (*done)(struct bench *) = b->all_open;
        b->all_open = NULL;
        done(b);
        return;
    }
    open_more(b);
}

/* --- dlockd: the line protocol */

static enum status line_status(struct cl *c, const struct proto_reply *r, const char *raw)
{
    if (strcmp(r->status, "OK") == 0)
        return ST_OK;
    if (strcmp(r->status, "BUSY") == 0)
        return ST_BUSY;
    if (strcmp(r->status, "TIMEOUT") == 0)
        return ST_TIMEOUT;
    bench_error(c->b, "connection %d: %s", c->id, raw);
    return ST_ERR;
}

static void dl_line(struct cl *c, char *line)
{
    struct proto_reply r;
    char raw[256];

    snprintf(raw, sizeof(raw), "%.200s", line);
    if (proto_parse_reply(line, &r) != 0) {
        bench_error(c->b, "connection %d: not a reply: %s", c->id, raw);
        return;
    }
    if (r.event) {
        c->b->events++;
        /* An idle benchmark must lose nothing; shutdown BYEs come after the run. */
        if (!c->b->stopping)
            bench_error(c->b, "connection %d: event %s", c->id, raw);
        return;
    }
    if (r.tag[0] != '\0') {
        if (strcmp(r.tag, "p") != 0 || strcmp(r.status, "OK") != 0)
            bench_error(c->b, "connection %d: %s", c->id, raw);
        c->b->heartbeats++;
        return;
    }
    pop(c, line_status(c, &r, raw));
}

static void dl_read(struct bufferevent *bev, void *arg)
{
    struct cl *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    char line[PROTO_LINE_DEFAULT + 1];

    while (!c->broken) {
        size_t eol_len;
        struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, &eol_len, EVBUFFER_EOL_LF);
        if (eol.pos < 0)
            return;
        if ((size_t)eol.pos >= sizeof(line)) {
            evbuffer_drain(in, (size_t)eol.pos + eol_len);
            bench_error(c->b, "connection %d: reply line too long", c->id);
            continue;
        }
        evbuffer_remove(in, line, (size_t)eol.pos + eol_len);
        line[eol.pos] = '\0';
        dl_line(c, line);
    }
}

static void dl_event(struct bufferevent *bev, short what, void *arg)
{
    struct cl *c = arg;

    if (what & BEV_EVENT_CONNECTED) {
        int one = 1;
        if (c->b->o.dl.path[0] == '\0')
            setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return;
    }
    broken(c, (what & BEV_EVENT_EOF) ? "closed by dlockd" : "socket error");
}

/* Sends a line; an untagged one (fifo) expects its reply in order. */
static void dl_send(struct cl *c, const char *line, int len, int fifo, cl_cb *cb, void *arg)
{
    if (c->broken) {
        if (cb)
            cb(c, ST_GONE, arg);
        return;
    }
    if (fifo)
        push(c, cb, arg);
    bufferevent_write(c->bev, line, (size_t)len);
}

/* dlockd's address, TCP or unix; returns its length. */
static socklen_t dl_sockaddr(const struct bench_addr *a, struct sockaddr_storage *ss)
{
    struct sockaddr_un *sun = (struct sockaddr_un *)ss;
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;

    memset(ss, 0, sizeof(*ss));
    if (a->path[0]) {
        sun->sun_family = AF_UNIX;
        snprintf(sun->sun_path, sizeof(sun->sun_path), "%s", a->path);
        return sizeof(*sun);
    }
    sin->sin_family = AF_INET;
    sin->sin_port = htons((uint16_t)a->port);
    inet_pton(AF_INET, a->host, &sin->sin_addr);
    return sizeof(*sin);
}

static void dl_open(struct cl *c)
{
    struct bench *b = c->b;
    struct sockaddr_storage ss;
    socklen_t sslen = dl_sockaddr(&b->o.dl, &ss);

    c->bev = bufferevent_socket_new(b->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (c->bev == NULL) {
        broken(c, "out of memory");
        return;
    }
    bufferevent_setcb(c->bev, dl_read, NULL, dl_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(c->bev, (struct sockaddr *)&ss, (int)sslen) != 0) {
        broken(c, "connect failed");
        return;
    }
    /* As libdlock does: a session with a secret, so its record is written in Redis too. */
    dl_send(c, "HELLO name=bench\n", 17, 1, on_ready, NULL);
}

/* --- direct Redis: hiredis and the daemon's scripts, or the recipe's */

/* The recipe's reply: anything but a grant, a nil and a release is an error. */
static enum status recipe_status(struct cl *c, const redisReply *r, int kind)
{
    enum status st = kind == K_ACQUIRE ? recipe_acquired(r) : recipe_released(r);

    if (st == ST_ERR)
        bench_error(c->b, "connection %d: unexpected reply to the recipe's %s (type %d)", c->id,
                    kind == K_ACQUIRE ? "acquire" : "release", r->type);
    return st;
}

static enum status rd_status(struct cl *c, const redisReply *r, int kind)
{
    struct contract_batch head;
    struct contract_reply op;

    if (r == NULL)
        return ST_GONE;
    if (r->type == REDIS_REPLY_ERROR) {
        bench_error(c->b, "connection %d: Redis: %s", c->id, r->str);
        return ST_ERR;
    }
    switch (kind) {
    case K_ACQUIRE:
    case K_RELEASE:
        return recipe_status(c, r, kind);
    case K_PING:
    case K_HB:
        return ST_OK;
    case K_RENEW:
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 0)
            return ST_OK;
        bench_error(c->b, "connection %d: renew found a hold gone", c->id);
        return ST_ERR;
    default:
        break;
    }
    /* the batch script's reply, with its one operation's */
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
        bench_error(c->b, "connection %d: unexpected script reply", c->id);
        return ST_ERR;
    }
    contract_batch(&head, r);
    if (contract_op_reply(&head, 0, kind == K_LOCK ? OP_LOCK : OP_UNLOCK, &op) == NULL) {
        bench_error(c->b, "connection %d: unexpected script reply", c->id);
        return ST_ERR;
    }
    if (op.status == CONTRACT_OK)
        return ST_OK;
    if (op.status == CONTRACT_BUSY)
        return ST_BUSY;
    bench_error(c->b, "connection %d: script says %s", c->id, op.text);
    return ST_ERR;
}

static void rd_reply(redisAsyncContext *ac, void *reply, void *priv)
{
    struct cl *c = ac->data;

    if (reply == NULL) {
        broken(c, "Redis link closed");
        return;
    }
    if ((intptr_t)priv == K_HB) {
        /* heartbeats ride in the same FIFO, with no callback */
        rd_status(c, reply, K_HB);
        c->b->heartbeats++;
        pop(c, ST_OK);
        return;
    }
    pop(c, rd_status(c, reply, (int)(intptr_t)priv));
}

static void rd_connected(const redisAsyncContext *ac, int status)
{
    if (status != REDIS_OK)
        broken(ac->data, ac->errstr);
}

static void rd_disconnected(const redisAsyncContext *ac, int status)
{
    struct cl *c = ac->data;

    (void)status;
    c->ac = NULL;
    broken(c, "Redis disconnected");
}

static void rd_send(struct cl *c, int kind, int argc, const char **argv, cl_cb *cb, void *arg)
{
    size_t len[32];

    if (c->broken || c->ac == NULL) {
        if (cb)
            cb(c, ST_GONE, arg);
        return;
    }
    for (int i = 0; i < argc; i++)
        len[i] = strlen(argv[i]);
    push(c, cb, arg);
    if (redisAsyncCommandArgv(c->ac, rd_reply, (void *)(intptr_t)kind, argc, argv, len) != REDIS_OK)
        broken(c, "hiredis refused a command");
}

static void rd_open(struct cl *c)
{
    struct bench *b = c->b;
    const char *ping[] = { "PING" };
    redisAsyncContext *ac = b->o.rd.path[0] ? redisAsyncConnectUnix(b->o.rd.path)
                                            : redisAsyncConnect(b->o.rd.host, b->o.rd.port);

    snprintf(c->who, sizeof(c->who), "%016x:", (unsigned)c->id * 2654435761u);
    if (ac == NULL || ac->err) {
        broken(c, ac ? ac->errstr : "out of memory");
        return;
    }
    c->ac = ac;
    ac->data = c;
    redisLibeventAttach(ac, b->base);
    redisAsyncSetConnectCallback(ac, rd_connected);
    redisAsyncSetDisconnectCallback(ac, rd_disconnected);
    rd_send(c, K_PING, 1, ping, on_ready, NULL);
}

/* The keys of a name, in the scripts' order (daemon/backend/contract.h: CONTRACT_SUFFIXES). */
static void rd_keys(const char *name, char keys[CONTRACT_NAME_KEYS][256])
{
    for (int i = 0; i < CONTRACT_NAME_KEYS; i++)
        snprintf(keys[i], 256, "%s{%s}:%c", BENCH_PREFIX, name, CONTRACT_SUFFIXES[i]);
}

/* FCALL batch keys... prefix daemon deadline(0: none) 1(op) op 1 name 0(no record) nargs args... */
static void rd_script(struct cl *c, int kind, const char *op, const char *name, int nargs, const char **args,
                      cl_cb *cb, void *arg)
{
    char keys[CONTRACT_NAME_KEYS][256], count[16], nkeys[16];
    const char *argv[40];
    int n = 0;

    rd_keys(name, keys);
    snprintf(nkeys, sizeof(nkeys), "%d", CONTRACT_NAME_KEYS);
    argv[n++] = "FCALL";
    argv[n++] = scripts[SCRIPT_BATCH].function;
    argv[n++] = nkeys;
    for (int i = 0; i < CONTRACT_NAME_KEYS; i++)
        argv[n++] = keys[i];
    argv[n++] = BENCH_PREFIX;
    argv[n++] = c->b->daemon_id;
    argv[n++] = "0";
    argv[n++] = "1";
    argv[n++] = op;
    argv[n++] = "1";
    argv[n++] = name;
    argv[n++] = "0"; /* no session record carried */
    snprintf(count, sizeof(count), "%d", nargs);
    argv[n++] = count;
    for (int i = 0; i < nargs; i++)
        argv[n++] = args[i];
    rd_send(c, kind, n, argv, cb, arg);
}

static void recipe_lock(struct cl *c, const char *name, int shared, cl_cb *cb, void *arg)
{
    struct recipe_call rc;

    if (shared) {
        bench_error(c->b, "connection %d: the recipe has no shared locks", c->id);
        if (cb)
            cb(c, ST_ERR, arg);
        return;
    }
    recipe_acquire(c->b, c->who, name, &rc);
    rd_send(c, K_ACQUIRE, rc.argc, rc.argv, cb, arg);
}

static void recipe_unlock(struct cl *c, const char *name, cl_cb *cb, void *arg)
{
    struct recipe_call rc;

    recipe_release(c->b, c->who, name, &rc);
    rd_send(c, K_RELEASE, rc.argc, rc.argv, cb, arg);
}

/* --- the operations */

void cl_lock(struct cl *c, const char *name, int shared, int wait_ms, cl_cb *cb, void *arg)
{
    char line[512], wid[64], lease[16], qttl[16];
    int len;

    if (c->t == T_DLOCKD) {
        if (wait_ms > 0)
            len = snprintf(line, sizeof(line), "LOCK %s%s wait=%d\n", name, shared ? " shared" : "", wait_ms);
        else
            len = snprintf(line, sizeof(line), "LOCK %s%s\n", name, shared ? " shared" : "");
        dl_send(c, line, len, 1, cb, arg);
        return;
    }
    if (c->t == T_RECIPE) {
        recipe_lock(c, name, shared, cb, arg);
        return;
    }
    /* lock.lua: who mode client wid wait ttl lease bounded qttl known ends (what dlockd passes, never waiting) */
    snprintf(wid, sizeof(wid), "%s.%llu", c->b->daemon_id, (unsigned long long)++c->b->seq);
    snprintf(lease, sizeof(lease), "%d", BENCH_LEASE_MS);
    snprintf(qttl, sizeof(qttl), "%d", BENCH_LEASE_MS * 2 / 3);
    const char *args[] = { c->who, shared ? "s" : "x", "bench", wid, "0", lease, lease, "0", qttl, "1", "0" };
    rd_script(c, K_LOCK, "lock", name, 11, args, cb, arg);
}

void cl_unlock(struct cl *c, const char *name, cl_cb *cb, void *arg)
{
    char line[512];

    if (c->t == T_DLOCKD) {
        dl_send(c, line, snprintf(line, sizeof(line), "UNLOCK %s\n", name), 1, cb, arg);
        return;
    }
    if (c->t == T_RECIPE) {
        recipe_unlock(c, name, cb, arg);
        return;
    }
    /* unlock.lua: who mode(any) all token k delay known unindex */
    const char *args[] = { c->who, "", "0", "", "1", "0", "1", "" };
    rd_script(c, K_UNLOCK, "unlock", name, 8, args, cb, arg);
}

void cl_heartbeat(struct cl *c)
{
    const char *ping[] = { "PING" };

    if (c->t == T_DLOCKD)
        dl_send(c, "#p PING\n", 8, 0, NULL, NULL);
    else
        rd_send(c, K_HB, 1, ping, NULL, NULL);
}

void cl_renew(struct cl *c, const char *name, cl_cb *cb, void *arg)
{
    char keys[CONTRACT_RENEW_KEYS][256], member[32], lease[16], nkeys[16];
    const char *argv[4 + CONTRACT_RENEW_KEYS + 3];
    int n = 0;

    /* renew.lua: KEYS (CONTRACT_RENEW_SUFFIXES) of each name; ARGV per name: n, then member lease pairs */
    for (int i = 0; i < CONTRACT_RENEW_KEYS; i++)
        snprintf(keys[i], sizeof(keys[i]), "%s{%s}:%c", BENCH_PREFIX, name, CONTRACT_RENEW_SUFFIXES[i]);
    snprintf(member, sizeof(member), "x%s", c->who);
    snprintf(lease, sizeof(lease), "%d", BENCH_LEASE_MS);
    snprintf(nkeys, sizeof(nkeys), "%d", CONTRACT_RENEW_KEYS);
    argv[n++] = "EVALSHA";
    argv[n++] = c->b->sha_renew;
    argv[n++] = nkeys;
    for (int i = 0; i < CONTRACT_RENEW_KEYS; i++)
        argv[n++] = keys[i];
    argv[n++] = "1";
    argv[n++] = member;
    argv[n++] = lease;
    rd_send(c, K_RENEW, n, argv, cb, arg);
}

/* --- timers */

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct cl *c = arg;

    (void)fd;
    (void)what;
    if (!c->b->stopping && c->tick)
        c->tick(c);
}

static struct timeval tv_ms(double ms)
{
    struct timeval tv;

    tv.tv_sec = (long)(ms / 1000);
    tv.tv_usec = (long)((ms - (double)tv.tv_sec * 1000) * 1000);
    return tv;
}

void cl_after(struct cl *c, double ms, void (*fn)(struct cl *c))
{
    struct timeval tv = tv_ms(ms);

    if (c->timer == NULL && (c->timer = evtimer_new(c->b->base, on_tick, c)) == NULL) {
        bench_error(c->b, "out of memory");
        return;
    }
    c->tick = fn;
    evtimer_add(c->timer, &tv);
}

static void on_hb(evutil_socket_t fd, short what, void *arg)
{
    struct cl *c = arg;
    struct timeval tv;

    (void)fd;
    (void)what;
    if (c->b->stopping || c->broken)
        return;
    cl_heartbeat(c);
    tv = tv_ms(c->b->o.heartbeat_ms);
    evtimer_add(c->hb, &tv);
}

void cl_heartbeats(struct cl *c, int period_ms)
{
    struct timeval tv = tv_ms((double)(random() % (period_ms > 0 ? period_ms : 1)));

    if (c->hb == NULL && (c->hb = evtimer_new(c->b->base, on_hb, c)) == NULL) {
        bench_error(c->b, "out of memory");
        return;
    }
    evtimer_add(c->hb, &tv);
}

/* --- opening many connections */

static void open_one(struct bench *b, int i)
{
    struct cl *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        bench_error(b, "out of memory");
        return;
    }
    c->b = b;
    c->id = i;
    c->t = b->o.target;
    b->cls[i] = c;
    b->connecting++;
    if (c->t == T_DLOCKD)
        dl_open(c);
    else
        rd_open(c);
}

static void open_more(struct bench *b)
{
    while (b->connecting < b->o.open_max && b->next_open < b->ncl && !b->stopping)
        open_one(b, b->next_open++);
}

void cl_open_all(struct bench *b, int n, void (*done)(struct bench *b))
{
    const struct bench_addr *a = b->o.target == T_DLOCKD ? &b->o.dl : &b->o.rd;

    if (a->path[0] && b->o.open_max > UNIX_OPEN_MAX)
        b->o.open_max = UNIX_OPEN_MAX;
    b->cls = calloc((size_t)n, sizeof(*b->cls));
    if (b->cls == NULL) {
        bench_error(b, "out of memory");
        return;
    }
    b->ncl = n;
    b->all_open = done;
    open_more(b);
}
