/* scenarios.c - the five workloads of the benchmark. Each opens its
 * connections, warms up, measures inside a window bounded by two samples of
 * Redis commandstats and /proc, adds its figures to the RESULT line and
 * leaves the event loop. The same code drives dlockd and direct Redis. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "bench.h"

#define NAME_LEN 64

/* Samples at both ends of a window. */
struct snap {
    uint64_t t;
    struct cmdstats cs;
    struct procstat dl, rd, self;
    uint64_t busy; /* ticks of every CPU of the machine */
};

static struct snap s0, s1;

/* A process that was to be measured and cannot be read spoils the run. */
static void procstat(struct bench *b, int pid, struct procstat *ps)
{
    if (sys_procstat(pid, ps) != 0 && pid > 0)
        bench_error(b, "cannot read /proc/%d", pid);
}

static void take(struct bench *b, struct snap *s)
{
    sys_cmdstats(b, &s->cs);
    procstat(b, b->o.dlockd_pid, &s->dl);
    procstat(b, b->o.redis_pid, &s->rd);
    sys_procstat(getpid(), &s->self);
    s->busy = sys_busy_ticks();
    s->t = now_ns();
}

static double span(const struct snap *a, const struct snap *z)
{
    return (double)(z->t - a->t) / 1e9;
}

static void begin_window(struct bench *b)
{
    b->heartbeats = 0;
    take(b, &s0);
    b->m_start = s0.t;
}

static void end_window(struct bench *b)
{
    b->m_end = now_ns();
    take(b, &s1);
}

static void finish(struct bench *b)
{
    b->stopping = 1;
    event_base_loopexit(b->base, NULL);
}

/* CPU % of one core that processes other than dlock-bench, dlockd and redis-server used:
 * the other people's load that disturbs a run on a shared machine. */
static double other_cpu(const struct snap *a, const struct snap *z, double secs)
{
    struct procstat x = { 0 }, y = { 0 };
    uint64_t ours = (z->dl.cpu_ticks - a->dl.cpu_ticks) + (z->rd.cpu_ticks - a->rd.cpu_ticks) +
                    (z->self.cpu_ticks - a->self.cpu_ticks);

    if (z->busy < a->busy + ours)
        return 0;
    y.cpu_ticks = z->busy - a->busy - ours;
    return sys_cpu_pct(&x, &y, secs);
}

/* Redis commands and CPU of the window. */
static void add_window(struct bench *b)
{
    double secs = span(&s0, &s1);

    result_add(b, "secs", "%.2f", secs);
    result_add(b, "scripts_s", "%.1f", (double)(s1.cs.scripts - s0.cs.scripts) / secs);
    result_add(b, "cmds_s", "%.1f", (double)(s1.cs.total - s0.cs.total) / secs);
    if (b->o.dlockd_pid)
        result_add(b, "dlockd_cpu", "%.2f", sys_cpu_pct(&s0.dl, &s1.dl, secs));
    if (b->o.redis_pid)
        result_add(b, "redis_cpu", "%.2f", sys_cpu_pct(&s0.rd, &s1.rd, secs));
    result_add(b, "bench_cpu", "%.2f", sys_cpu_pct(&s0.self, &s1.self, secs));
    result_add(b, "other_cpu", "%.2f", other_cpu(&s0, &s1, secs));
}

static void add_latency(struct bench *b, const char *prefix, const struct hist *h)
{
    char k[64];

    snprintf(k, sizeof(k), "%sp50_us", prefix);
    result_add(b, k, "%.1f", (double)hist_percentile(h, 50) / 1e3);
    snprintf(k, sizeof(k), "%sp99_us", prefix);
    result_add(b, k, "%.1f", (double)hist_percentile(h, 99) / 1e3);
    snprintf(k, sizeof(k), "%sp999_us", prefix);
    result_add(b, k, "%.1f", (double)hist_percentile(h, 99.9) / 1e3);
    snprintf(k, sizeof(k), "%smax_us", prefix);
    result_add(b, k, "%.1f", (double)h->max / 1e3);
    snprintf(k, sizeof(k), "%sn", prefix);
    result_add(b, k, "%llu", (unsigned long long)h->n);
}

/* Measures for o.duration after o.warmup, then calls done. */
static void (*window_done)(struct bench *b);

static void window_over(struct bench *b)
{
    end_window(b);
    window_done(b);
}

static void window_open(struct bench *b)
{
    begin_window(b);
    after_ms(b, b->o.duration * 1000, window_over);
}

static void measure(struct bench *b, void (*done)(struct bench *b))
{
    window_done = done;
    after_ms(b, b->o.warmup * 1000, window_open);
}

/* ------------------------------------------------------------------ 1. pairs */

/* Open loop: intended start times of pairs no connection was free for. */
static struct {
    uint64_t *t;
    size_t cap, head, len;
    uint64_t dropped;
    struct cl **idle;
    int nidle;
    uint64_t next;     /* intended start of the next pair */
    uint64_t interval; /* ns between pairs */
    struct event *tick;
} ol;

static void pair_start(struct cl *c, uint64_t t0);

static void pair_next(struct cl *c)
{
    struct bench *b = c->b;

    if (b->stopping)
        return;
    if (b->o.rate <= 0) {
        pair_start(c, now_ns());
    } else if (ol.len > 0) {
        uint64_t t = ol.t[ol.head];
        ol.head = (ol.head + 1) % ol.cap;
        ol.len--;
        pair_start(c, t);
    } else {
        ol.idle[ol.nidle++] = c;
    }
}

static void pair_unlocked(struct cl *c, enum status st, void *arg)
{
    struct bench *b = c->b;
    uint64_t t = now_ns();

    (void)arg;
    if (st == ST_OK && in_window(b, t)) {
        hist_record(&b->h, t - c->t0);
        b->done++;
    }
    if (st != ST_GONE)
        pair_next(c);
}

static void pair_locked(struct cl *c, enum status st, void *arg)
{
    char name[NAME_LEN];

    (void)arg;
    if (st == ST_GONE)
        return;
    if (st != ST_OK) {
        if (st == ST_BUSY)
            bench_error(c->b, "connection %d: its own name is busy", c->id);
        pair_next(c);
        return;
    }
    bench_name(c->b, c->id, name, sizeof(name));
    cl_unlock(c, name, pair_unlocked, NULL);
}

static void pair_start(struct cl *c, uint64_t t0)
{
    char name[NAME_LEN];

    c->t0 = t0;
    bench_name(c->b, c->id, name, sizeof(name));
    cl_lock(c, name, 0, 0, pair_locked, NULL);
}

/* Open loop: start every pair that is due, on a free connection or later. */
static void ol_tick(evutil_socket_t fd, short what, void *arg)
{
    struct bench *b = arg;
    uint64_t now = now_ns();

    (void)fd;
    (void)what;
    if (b->stopping)
        return;
    while (ol.next <= now) {
        if (ol.nidle > 0) {
            pair_start(ol.idle[--ol.nidle], ol.next);
        } else if (ol.len < ol.cap) {
            ol.t[(ol.head + ol.len++) % ol.cap] = ol.next;
        } else {
            ol.dropped++;
        }
        ol.next += ol.interval;
    }
}

/* A server's CPU per pair, in all and in user and system time apart, and its
 * read/write calls per pair: keys who_us_pair, who_user_us_pair, who_sys_us_pair,
 * who_rw_calls_pair. */
static void add_server_pair(struct bench *b, const char *who, const struct procstat *a, const struct procstat *z,
                            double n)
{
    char k[64];

    snprintf(k, sizeof(k), "%s_us_pair", who);
    result_add(b, k, "%.2f", sys_ticks_us(a->cpu_ticks, z->cpu_ticks) / n);
    snprintf(k, sizeof(k), "%s_user_us_pair", who);
    result_add(b, k, "%.2f", sys_ticks_us(a->user_ticks, z->user_ticks) / n);
    snprintf(k, sizeof(k), "%s_sys_us_pair", who);
    result_add(b, k, "%.2f", sys_ticks_us(a->sys_ticks, z->sys_ticks) / n);
    if (a->has_io && z->has_io && z->rw_calls >= a->rw_calls) {
        snprintf(k, sizeof(k), "%s_rw_calls_pair", who);
        result_add(b, k, "%.2f", (double)(z->rw_calls - a->rw_calls) / n);
    }
}

/* What a pair costs: Redis commands and script calls, and the CPU and I/O calls of Redis and of dlockd. */
static void add_per_pair(struct bench *b)
{
    double n = (double)b->done;

    if (b->done == 0) {
        bench_error(b, "no pair completed in the window");
        return;
    }
    result_add(b, "cmds_per_pair", "%.2f", (double)(s1.cs.total - s0.cs.total) / n);
    result_add(b, "scripts_per_pair", "%.2f", (double)(s1.cs.scripts - s0.cs.scripts) / n);
    if (b->o.redis_pid)
        add_server_pair(b, "redis", &s0.rd, &s1.rd, n);
    if (b->o.dlockd_pid)
        add_server_pair(b, "dlockd", &s0.dl, &s1.dl, n);
}

static void pairs_done(struct bench *b)
{
    double secs = (double)(b->m_end - b->m_start) / 1e9;

    result_add(b, "conns", "%d", b->o.conns);
    result_add(b, "rate", "%.0f", b->o.rate);
    result_add(b, "pairs_s", "%.1f", (double)b->done / secs);
    add_latency(b, "", &b->h);
    if (b->o.rate > 0) {
        result_add(b, "backlog", "%zu", ol.len);
        result_add(b, "dropped", "%llu", (unsigned long long)ol.dropped);
    }
    add_window(b);
    add_per_pair(b);
    finish(b);
}

static void pairs_go(struct bench *b)
{
    if (b->o.rate <= 0) {
        for (int i = 0; i < b->ncl; i++)
            pair_start(b->cls[i], now_ns());
    } else {
        struct timeval tv = { 0, 200 };
        ol.cap = (size_t)(b->o.rate * (b->o.duration + b->o.warmup + 1));
        if (ol.cap > (1u << 24))
            ol.cap = 1u << 24;
        ol.t = malloc(ol.cap * sizeof(*ol.t));
        ol.idle = malloc((size_t)b->ncl * sizeof(*ol.idle));
        if (ol.t == NULL || ol.idle == NULL) {
            bench_error(b, "out of memory");
            return;
        }
        for (int i = 0; i < b->ncl; i++)
            ol.idle[ol.nidle++] = b->cls[b->ncl - 1 - i];
        ol.interval = (uint64_t)(1e9 / b->o.rate);
        ol.next = now_ns();
        ol.tick = event_new(b->base, -1, EV_PERSIST, ol_tick, b);
        event_add(ol.tick, &tv);
    }
    measure(b, pairs_done);
}

int scen_pairs(struct bench *b)
{
    cl_open_all(b, b->o.conns, pairs_go);
    return 0;
}

/* ------------------------------------------------------------------ 2. handoff */

enum { H_IDLE, H_WANT, H_HOLD };

static struct {
    uint64_t released; /* when the last UNLOCK was sent; 0 once the lock was granted again */
    int long_hold;     /* 1: the next grant holds long_hold_ms; 2: it does */
    struct snap w0, w1;
    uint64_t grants;
} ho;

static void h_try(struct cl *c);
static void h_release(struct cl *c);

static void h_name(const struct bench *b, char *name)
{
    bench_name(b, -1, name, NAME_LEN);
}

static void h_want(struct cl *c)
{
    c->state = H_WANT;
    h_try(c);
}

static void h_wait_end(struct bench *b)
{
    double secs;

    take(b, &ho.w1);
    secs = span(&ho.w0, &ho.w1);
    result_add(b, "waiters", "%d", b->ncl - 1);
    result_add(b, "wait_secs", "%.2f", secs);
    result_add(b, "wait_scripts", "%llu", (unsigned long long)(ho.w1.cs.scripts - ho.w0.cs.scripts));
    result_add(b, "wait_cmds", "%llu", (unsigned long long)(ho.w1.cs.total - ho.w0.cs.total));
    finish(b);
}

static void h_wait_begin(struct bench *b)
{
    take(b, &ho.w0);
    after_ms(b, b->o.long_hold_ms, h_wait_end);
}

static void h_granted(struct cl *c)
{
    struct bench *b = c->b;
    uint64_t t = now_ns();

    if (ho.released) {
        if (in_window(b, t)) {
            hist_record(&b->h, t - ho.released);
            b->done++;
        }
        ho.released = 0;
    }
    ho.grants++;
    c->state = H_HOLD;
    /* the previous holder queues again only now: it never races for its own handoff */
    for (int i = 0; i < b->ncl; i++)
        if (b->cls[i]->state == H_IDLE && b->cls[i] != c)
            h_want(b->cls[i]);
    if (ho.long_hold == 1) {
        /* everybody else waits now: count what Redis does meanwhile */
        ho.long_hold = 2;
        after_ms(b, 100, h_wait_begin);
        return;
    }
    cl_after(c, b->o.hold_ms, h_release);
}

static void h_locked(struct cl *c, enum status st, void *arg)
{
    struct bench *b = c->b;

    (void)arg;
    if (b->stopping || st == ST_GONE)
        return;
    if (st == ST_BUSY && c->t != T_DLOCKD) {
        if (in_window(b, now_ns()))
            b->busy++;
        cl_after(c, b->o.sleep_ms, h_try);
        return;
    }
    if (st != ST_OK) {
        bench_error(b, "connection %d: handoff LOCK was not granted", c->id);
        h_try(c);
        return;
    }
    h_granted(c);
}

static void h_try(struct cl *c)
{
    char name[NAME_LEN];

    h_name(c->b, name);
    cl_lock(c, name, 0, c->t == T_DLOCKD ? c->b->o.wait_ms : 0, h_locked, NULL);
}

static void h_unlocked(struct cl *c, enum status st, void *arg)
{
    (void)arg;
    if (st != ST_OK && st != ST_GONE)
        bench_error(c->b, "connection %d: handoff UNLOCK failed", c->id);
}

static void h_release(struct cl *c)
{
    char name[NAME_LEN];

    h_name(c->b, name);
    c->state = H_IDLE;
    ho.released = now_ns();
    cl_unlock(c, name, h_unlocked, NULL);
}

static void handoff_done(struct bench *b)
{
    double secs = (double)(b->m_end - b->m_start) / 1e9;
    double n = b->done ? (double)b->done : 1;

    result_add(b, "clients", "%d", b->ncl);
    result_add(b, "handoffs_s", "%.1f", (double)b->done / secs);
    add_latency(b, "", &b->h);
    result_add(b, "scripts_per_handoff", "%.2f", (double)(s1.cs.scripts - s0.cs.scripts) / n);
    result_add(b, "cmds_per_handoff", "%.2f", (double)(s1.cs.total - s0.cs.total) / n);
    result_add(b, "busy_per_handoff", "%.2f", (double)b->busy / n);
    add_window(b);
    ho.long_hold = 1;
}

static void handoff_go(struct bench *b)
{
    for (int i = 0; i < b->ncl; i++) {
        struct cl *c = b->cls[i];
        c->state = H_WANT;
        /* spinning clients start at random phases, as independent processes would */
        if (c->t != T_DLOCKD && b->o.sleep_ms > 0)
            cl_after(c, (double)(random() % (b->o.sleep_ms * 1000)) / 1000.0, h_try);
        else
            h_try(c);
    }
    measure(b, handoff_done);
}

int scen_handoff(struct bench *b)
{
    if (b->o.conns < 2) {
        bench_note("handoff needs at least 2 clients");
        return -1;
    }
    cl_open_all(b, b->o.conns, handoff_go);
    return 0;
}

/* ------------------------------------------------------------------ 3. idle holds */

static struct {
    struct procstat p0, p1, p2; /* dlockd before connecting, with sessions, with holds */
    uint64_t m1, m2;            /* Redis used_memory with the holds, and right after FLUSHALL */
    uint64_t granted;           /* holds granted */
    uint64_t setup_start;
} id;

static void idle_done(struct bench *b)
{
    double holds = (double)b->ncl * b->o.locks;
    double secs = span(&s0, &s1);
    double scripts_s = (double)(s1.cs.scripts - s0.cs.scripts) / secs;
    double period = b->o.renew_ms / 1000.0;

    result_add(b, "sessions", "%d", b->ncl);
    result_add(b, "holds", "%.0f", holds);
    add_window(b);
    result_add(b, "heartbeats_s", "%.1f", (double)b->heartbeats / secs);
    result_add(b, "renew_period_s", "%.1f", period);
    if (holds > 0) {
        result_add(b, "holds_per_script", "%.1f", scripts_s > 0 ? holds / (scripts_s * period) : 0);
        result_add(b, "cmds_per_hold_period", "%.3f", (double)(s1.cs.total - s0.cs.total) / secs * period / holds);
    }
    if (b->o.dlockd_pid) {
        result_add(b, "rss_base_kb", "%llu", (unsigned long long)id.p0.rss_kb);
        result_add(b, "rss_session_B", "%.0f", ((double)id.p1.rss_kb - (double)id.p0.rss_kb) * 1024 / b->ncl);
        if (holds > 0)
            result_add(b, "rss_hold_B", "%.0f", ((double)id.p2.rss_kb - (double)id.p1.rss_kb) * 1024 / holds);
    }
    b->stopping = 1; /* a LOST from the flush below is expected */
    if (holds > 0) {
        /* client buffers change with time, so the holds' memory is what FLUSHALL frees at once;
         * the run ends here, and run.sh restarts dlockd before the next one */
        id.m1 = sys_redis_used_memory(b);
        if (sys_redis_flushall(b) == 0 && (id.m2 = sys_redis_used_memory(b)) > 0)
            result_add(b, "redis_mem_hold_B", "%.0f", ((double)id.m1 - (double)id.m2) / holds);
    }
    result_add(b, "setup_s", "%.1f", (double)(s0.t - id.setup_start) / 1e9);
    finish(b);
}

static void idle_measure(struct bench *b)
{
    sys_procstat(b->o.dlockd_pid, &id.p2);
    begin_window(b);
    after_ms(b, b->o.duration * 1000, window_over);
    window_done = idle_done;
}

static void renew_tick(struct cl *c);

static void renewed(struct cl *c, enum status st, void *arg)
{
    (void)c;
    (void)st;
    (void)arg;
}

/* Direct Redis: the client renews each of its holds every period, one call each. */
static void renew_tick(struct cl *c)
{
    char name[NAME_LEN];

    for (int j = 0; j < c->b->o.locks; j++) {
        bench_name(c->b, c->id * c->b->o.locks + j, name, sizeof(name));
        cl_renew(c, name, renewed, NULL);
    }
    cl_after(c, c->b->o.renew_ms, renew_tick);
}

static void idle_locked(struct cl *c, enum status st, void *arg)
{
    struct bench *b = c->b;

    (void)arg;
    if (st != ST_OK) {
        if (st != ST_GONE)
            bench_error(b, "connection %d: idle LOCK not granted", c->id);
        return;
    }
    if (++id.granted == (uint64_t)b->ncl * b->o.locks) {
        bench_note("%llu holds granted after %.1f s", (unsigned long long)id.granted,
                   (double)(now_ns() - id.setup_start) / 1e9);
        if (b->o.target == T_REDIS)
            for (int i = 0; i < b->ncl; i++)
                cl_after(b->cls[i], (double)(random() % (b->o.renew_ms * 1000)) / 1000.0, renew_tick);
        after_ms(b, b->o.warmup * 1000, idle_measure);
    }
}

static void idle_lock_all(struct bench *b)
{
    char name[NAME_LEN];

    sys_procstat(b->o.dlockd_pid, &id.p1);
    if (b->o.locks == 0) {
        after_ms(b, b->o.warmup * 1000, idle_measure);
        return;
    }
    for (int i = 0; i < b->ncl; i++) {
        struct cl *c = b->cls[i];
        for (int j = 0; j < b->o.locks; j++) {
            bench_name(b, i * b->o.locks + j, name, sizeof(name));
            cl_lock(c, name, 0, 0, idle_locked, NULL);
        }
    }
}

static void idle_open(struct bench *b)
{
    bench_note("%d sessions connected after %.1f s", b->ncl, (double)(now_ns() - id.setup_start) / 1e9);
    if (b->o.target == T_DLOCKD)
        for (int i = 0; i < b->ncl; i++)
            cl_heartbeats(b->cls[i], b->o.heartbeat_ms);
    /* let the allocator settle before sampling RSS */
    after_ms(b, 500, idle_lock_all);
}

int scen_idle(struct bench *b)
{
    if (b->o.locks < 0 || b->o.locks >= CL_QMAX) {
        bench_note("--locks must be below %d", CL_QMAX);
        return -1;
    }
    id.setup_start = now_ns();
    sys_procstat(b->o.dlockd_pid, &id.p0);
    cl_open_all(b, b->o.sessions, idle_open);
    return 0;
}

/* ------------------------------------------------------------------ 4. connection scale */

static void scale_done(struct bench *b)
{
    double secs = span(&s0, &s1);

    result_add(b, "sessions", "%d", b->ncl - 1);
    result_add(b, "pairs_s", "%.1f", (double)b->done / secs);
    add_latency(b, "", &b->h);
    result_add(b, "heartbeats_s", "%.1f", (double)b->heartbeats / secs);
    add_window(b);
    finish(b);
}

static void scale_probe(struct bench *b)
{
    pair_start(b->cls[0], now_ns());
    measure(b, scale_done);
}

static void scale_open(struct bench *b)
{
    bench_note("%d sessions connected", b->ncl - 1);
    for (int i = 1; i < b->ncl; i++)
        cl_heartbeats(b->cls[i], b->o.heartbeat_ms);
    /* a full heartbeat period first, so that every session is beating */
    after_ms(b, b->o.heartbeat_ms, scale_probe);
}

int scen_scale(struct bench *b)
{
    b->o.rate = 0;
    cl_open_all(b, b->o.sessions + 1, scale_open);
    return 0;
}

/* ------------------------------------------------------------------ 5. mixed */

static void mixed_start(struct cl *c);
static void mixed_try(struct cl *c);

static void mixed_unlocked(struct cl *c, enum status st, void *arg)
{
    (void)arg;
    if (st == ST_GONE)
        return;
    if (st != ST_OK)
        bench_error(c->b, "connection %d: mixed UNLOCK failed", c->id);
    mixed_start(c);
}

static void mixed_locked(struct cl *c, enum status st, void *arg)
{
    struct bench *b = c->b;
    char name[NAME_LEN];
    uint64_t t = now_ns();

    (void)arg;
    if (b->stopping || st == ST_GONE)
        return;
    if (st == ST_BUSY && c->t != T_DLOCKD) {
        if (in_window(b, t))
            b->busy++;
        cl_after(c, b->o.sleep_ms, mixed_try);
        return;
    }
    if (st != ST_OK) {
        mixed_start(c);
        return;
    }
    if (in_window(b, t)) {
        hist_record(c->shared ? &b->h2 : &b->h, t - c->t0);
        b->done++;
    }
    bench_name(b, c->name, name, sizeof(name));
    cl_unlock(c, name, mixed_unlocked, NULL);
}

static void mixed_try(struct cl *c)
{
    char name[NAME_LEN];

    bench_name(c->b, c->name, name, sizeof(name));
    cl_lock(c, name, c->shared, c->t == T_DLOCKD ? c->b->o.wait_ms : 0, mixed_locked, NULL);
}

static void mixed_start(struct cl *c)
{
    if (c->b->stopping)
        return;
    c->name = (int)(random() % c->b->o.names);
    c->shared = (int)(random() % 100) < c->b->o.shared_pct;
    c->t0 = now_ns();
    mixed_try(c);
}

static void mixed_done(struct bench *b)
{
    struct hist all = b->h;
    double secs = span(&s0, &s1);
    double n = b->done ? (double)b->done : 1;

    hist_merge(&all, &b->h2);
    result_add(b, "conns", "%d", b->ncl);
    result_add(b, "names", "%d", b->o.names);
    result_add(b, "shared_pct", "%d", b->o.shared_pct);
    result_add(b, "grants_s", "%.1f", (double)b->done / secs);
    add_latency(b, "", &all);
    add_latency(b, "x_", &b->h);
    add_latency(b, "s_", &b->h2);
    result_add(b, "scripts_per_grant", "%.2f", (double)(s1.cs.scripts - s0.cs.scripts) / n);
    result_add(b, "busy_per_grant", "%.2f", (double)b->busy / n);
    add_window(b);
    finish(b);
}

static void mixed_go(struct bench *b)
{
    for (int i = 0; i < b->ncl; i++)
        mixed_start(b->cls[i]);
    measure(b, mixed_done);
}

int scen_mixed(struct bench *b)
{
    if (b->o.names < 1) {
        bench_note("--names must be at least 1");
        return -1;
    }
    cl_open_all(b, b->o.conns, mixed_go);
    return 0;
}
