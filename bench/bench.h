/* bench.h - dlock-bench, the load generator: one process, many connections to
 * dlockd (line protocol) or straight to Redis over hiredis (the daemon's own Lua
 * scripts, or the recipe a user writes instead), closed- or open-loop, latencies
 * in an HDR-style histogram. */
#ifndef BENCH_H
#define BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "hist.h"

#define CL_QMAX 64          /* requests in flight on one connection */
#define BENCH_PREFIX "dlock:" /* key prefix: dlockd's default, used for direct Redis too */
#define BENCH_LEASE_MS 30000  /* Redis lease of a direct hold: dlockd's default lock-lease */
#define RESULT_MAX 2048

struct event_base;
struct event;
struct bufferevent;
struct redisAsyncContext;
struct redisContext;
struct redisReply;
struct cl;
struct bench;

enum target {
    T_DLOCKD, /* dlockd over its line protocol */
    T_REDIS,  /* dlockd's own scripts, called straight */
    T_RECIPE  /* the recipe (recipe.c), exclusive locks only */
};

/* What a request came back with. */
enum status {
    ST_OK,      /* granted / done */
    ST_BUSY,    /* not granted, did not wait */
    ST_TIMEOUT, /* waited and was not granted */
    ST_ERR,     /* an ERR reply or a Redis error */
    ST_GONE     /* the connection broke before the reply */
};

typedef void cl_cb(struct cl *c, enum status st, void *arg);

struct pending {
    cl_cb *cb;  /* NULL: nobody waits for this reply */
    void *arg;
};

/* One connection: a dlockd session, or one Redis client. */
struct cl {
    struct bench *b;
    int id;                     /* index in b->cls */
    enum target t;
    struct bufferevent *bev;    /* dlockd: the socket */
    struct redisAsyncContext *ac; /* redis: the hiredis context */
    struct pending q[CL_QMAX];  /* replies expected, oldest first (both answer in order) */
    int qhead, qlen;
    int ready;                  /* connected and answered its first PING */
    int broken;                 /* the connection failed */
    char who[20];               /* redis: "session:owner" of this client's holds; recipe: the owner */
    /* scenario state */
    int state;
    int name;                   /* current name number */
    int shared;                 /* current mode */
    int tries;                  /* attempts of the current acquire */
    uint64_t t0;                /* start of the current operation (ns) */
    struct event *timer;        /* hold, retry sleep, renewal */
    void (*tick)(struct cl *c); /* what timer runs */
    struct event *hb;           /* heartbeat timer */
};

/* Redis INFO commandstats, summed the way the report needs them. */
struct cmdstats {
    uint64_t scripts;  /* EVALSHA + EVAL calls */
    uint64_t total;    /* every command, those run inside scripts too, but INFO */
    uint64_t ping;     /* PING calls */
};

/* A CPU, memory and I/O sample of a process from /proc. */
struct procstat {
    uint64_t cpu_ticks;   /* utime + stime */
    uint64_t user_ticks;  /* utime */
    uint64_t sys_ticks;   /* stime */
    uint64_t rss_kb;      /* VmRSS */
    uint64_t rw_calls;    /* syscr + syscw of /proc/PID/io: read- and write-family calls */
    int has_io;           /* rw_calls was read (the kernel keeps task I/O accounting) */
};

/* Where a server listens: HOST:PORT, or unix:PATH. */
struct bench_addr {
    char host[64];
    int port;
    char path[108];            /* the unix socket; empty: host and port */
};

struct opts {
    enum target target;
    const char *scenario;      /* pairs handoff idle scale mixed */
    struct bench_addr dl;      /* dlockd */
    struct bench_addr rd;      /* Redis */
    int dlockd_pid, redis_pid; /* for CPU and RSS; 0: not measured */
    int conns;                 /* connections (pairs, mixed, handoff clients) */
    double duration;           /* measured seconds */
    double warmup;             /* seconds before measuring */
    double rate;               /* open loop: pairs/s offered; 0: closed loop */
    int hold_ms;               /* handoff: how long a holder holds */
    int sleep_ms;              /* direct Redis: sleep between tries of a busy lock */
    int long_hold_ms;          /* handoff: the hold during which commands are counted */
    int sessions;              /* idle, scale: connected sessions */
    int locks;                 /* idle: locks per session */
    int heartbeat_ms;          /* idle, scale: PING period */
    int renew_ms;              /* idle, direct Redis: renewal period of each hold */
    int names;                 /* mixed: names */
    int shared_pct;            /* mixed: share of shared requests */
    int wait_ms;               /* dlockd: wait= of a LOCK that may wait */
    int open_max;              /* connects in flight at once */
    const char *label;         /* echoed into the RESULT line */
};

struct bench {
    struct event_base *base;
    struct opts o;
    char run[12];              /* random id in every name of this run */
    char daemon_id[17];        /* redis: stands for dlockd's id in the scripts' ARGV */
    char sha_renew[41];
    char sha_acquire[41], sha_release[41]; /* the recipe's scripts */
    struct redisContext *ctl;  /* control link to Redis: INFO, SCRIPT LOAD */
    struct cl **cls;
    int ncl;
    int opened;                /* connections ready */
    int connecting;            /* connects in flight */
    int next_open;             /* next connection to open */
    void (*all_open)(struct bench *b);
    uint64_t seq;              /* redis: numbers wait ids */
    uint64_t m_start, m_end;   /* measurement window (ns, monotonic); 0 until set */
    int stopping;              /* no new requests */
    struct hist h;             /* the latency of the scenario */
    struct hist h2;            /* a second one where a scenario needs it */
    uint64_t done;             /* completions inside the window */
    uint64_t busy;             /* BUSY replies inside the window */
    uint64_t errors;           /* unexpected replies, broken connections */
    uint64_t events;           /* '*' event lines from dlockd */
    uint64_t heartbeats;       /* heartbeat replies */
    char result[RESULT_MAX];   /* key=value ... of the RESULT line */
    size_t rlen;
};

/* --- main.c */
uint64_t now_ns(void);
/* Appends " key=value" to the result line. */
void result_add(struct bench *b, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Reports an unexpected condition; counts it as an error. */
void bench_error(struct bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void bench_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Formats a as --dlockd and --redis take it; returns buf. */
const char *bench_addr_str(const struct bench_addr *a, char *buf, size_t len);
/* 1 when t lies in the measurement window. */
int in_window(const struct bench *b, uint64_t t);
/* Calls fn after ms milliseconds, once. */
void after_ms(struct bench *b, double ms, void (*fn)(struct bench *b));

/* --- client.c */
/*
 * Opens n connections to the target, at most o.open_max at once (100 on a unix
 * socket); each is ready once it answered a PING. Calls done(b) when all are ready.
 */
void cl_open_all(struct bench *b, int n, void (*done)(struct bench *b));
/* LOCK name [shared] [wait=wait_ms]. Direct Redis never waits (wait_ms ignored); the recipe is never shared. */
void cl_lock(struct cl *c, const char *name, int shared, int wait_ms, cl_cb *cb, void *arg);
/* UNLOCK name (the exclusive hold if any, else the shared one). */
void cl_unlock(struct cl *c, const char *name, cl_cb *cb, void *arg);
/* A heartbeat: dlockd "#p PING" (never queued behind a wait), Redis PING. */
void cl_heartbeat(struct cl *c);
/* redis: extends the lease of this client's exclusive hold on name (renew.lua). */
void cl_renew(struct cl *c, const char *name, cl_cb *cb, void *arg);
/* Runs fn(c) after ms milliseconds (one pending timer per connection). */
void cl_after(struct cl *c, double ms, void (*fn)(struct cl *c));
/* Starts heartbeats every period_ms, the first after a random part of it. */
void cl_heartbeats(struct cl *c, int period_ms);
/* Formats the name number i of this run. */
void bench_name(const struct bench *b, int i, char *buf, size_t len);

/* --- recipe.c */

/* One EVALSHA of the recipe: argv points into the struct and into the caller's strings. */
struct recipe_call {
    const char *argv[8];
    int argc;
    char lock[256];    /* recipe:{name} */
    char counter[256]; /* recipe:{name}:t, the fencing counter */
    char lease[16];    /* ms */
};

extern const char recipe_acquire_lua[], recipe_release_lua[];
/* Fills rc with the acquire of name for owner; b gives the script's SHA1. */
void recipe_acquire(const struct bench *b, const char *owner, const char *name, struct recipe_call *rc);
/* Fills rc with the release of name by owner. */
void recipe_release(const struct bench *b, const char *owner, const char *name, struct recipe_call *rc);
/* ST_OK for a token, ST_BUSY for nil, ST_ERR for any other reply (r is no error reply). */
enum status recipe_acquired(const struct redisReply *r);
/* ST_OK when the lock was the owner's and is gone, else ST_ERR. */
enum status recipe_released(const struct redisReply *r);

/* --- sys.c */
int sys_redis_connect(struct bench *b);
/* Loads the scripts of the target (lock, unlock and renew, or the recipe's) and keeps their SHA1s. */
int sys_load_scripts(struct bench *b);
int sys_cmdstats(struct bench *b, struct cmdstats *cs);
/* INFO memory used_memory, bytes; 0 on failure. */
uint64_t sys_redis_used_memory(struct bench *b);
/* FLUSHALL: empties Redis (the scripts stay loaded). */
int sys_redis_flushall(struct bench *b);
/* Samples /proc/PID/stat, status and io; -1 when stat or status cannot be read (io is optional). */
int sys_procstat(int pid, struct procstat *ps);
/* Clock ticks of the whole machine in user, system and steal time, every CPU (/proc/stat); 0 on failure. */
uint64_t sys_busy_ticks(void);
/* CPU % of one core between two samples taken secs apart. */
double sys_cpu_pct(const struct procstat *a, const struct procstat *z, double secs);
/* Microseconds of CPU between two samples of a tick count (cpu_ticks, user_ticks or sys_ticks). */
double sys_ticks_us(uint64_t a, uint64_t z);
/* Raises RLIMIT_NOFILE to its hard limit; returns the new soft limit. */
long sys_raise_nofile(void);

/* --- scenarios.c: each sets up its clients and timers; main runs the loop. */
int scen_pairs(struct bench *b);
int scen_handoff(struct bench *b);
int scen_idle(struct bench *b);
int scen_scale(struct bench *b);
int scen_mixed(struct bench *b);

/* --- report.c */
int report_main(int argc, char **argv);

#endif
