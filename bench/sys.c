/* sys.c - what the load generator measures besides latency: Redis command
 * counts (INFO commandstats), memory, and a process's CPU time, RSS and
 * read/write calls from /proc; and the control link that loads the scripts of
 * direct Redis. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "bench.h"
#include "scripts.h"

int sys_redis_connect(struct bench *b)
{
    struct timeval tv = { 5, 0 };
    char buf[160];

    if (b->o.rd.path[0])
        b->ctl = redisConnectUnixWithTimeout(b->o.rd.path, tv);
    else
        b->ctl = redisConnectWithTimeout(b->o.rd.host, b->o.rd.port, tv);
    if (b->ctl == NULL || b->ctl->err) {
        fprintf(stderr, "dlock-bench: cannot connect to Redis at %s: %s\n", bench_addr_str(&b->o.rd, buf, sizeof(buf)),
                b->ctl ? b->ctl->errstr : "out of memory");
        return -1;
    }
    return 0;
}

static int load(struct bench *b, const char *name, const char *body, char *sha)
{
    redisReply *r = redisCommand(b->ctl, "SCRIPT LOAD %s", body);

    if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 40) {
        fprintf(stderr, "dlock-bench: SCRIPT LOAD %s failed: %s\n", name,
                r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
        if (r)
            freeReplyObject(r);
        return -1;
    }
    memcpy(sha, r->str, 41);
    freeReplyObject(r);
    return 0;
}

/* The daemon's batch library is loaded as a function, called with FCALL (client.c). */
static int load_library(struct bench *b, enum script_id id)
{
    redisReply *r = redisCommand(b->ctl, "FUNCTION LOAD REPLACE %s", scripts[id].body);
    int ok = r && r->type == REDIS_REPLY_STRING;

    if (!ok)
        fprintf(stderr, "dlock-bench: FUNCTION LOAD %s failed: %s\n", scripts[id].name,
                r && r->type == REDIS_REPLY_ERROR ? r->str : "no reply");
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

static int load_own(struct bench *b, enum script_id id, char *sha)
{
    return load(b, scripts[id].name, scripts[id].body, sha);
}

int sys_load_scripts(struct bench *b)
{
    if (b->o.target == T_RECIPE) {
        if (load(b, "recipe acquire", recipe_acquire_lua, b->sha_acquire) ||
            load(b, "recipe release", recipe_release_lua, b->sha_release))
            return -1;
        return 0;
    }
    if (load_library(b, SCRIPT_BATCH) || load_own(b, SCRIPT_RENEW, b->sha_renew))
        return -1;
    return 0;
}

static redisReply *info(struct bench *b, const char *section)
{
    redisReply *r = redisCommand(b->ctl, "INFO %s", section);

    if (r == NULL || r->type != REDIS_REPLY_STRING) {
        bench_error(b, "INFO %s failed", section);
        if (r)
            freeReplyObject(r);
        return NULL;
    }
    return r;
}

int sys_cmdstats(struct bench *b, struct cmdstats *cs)
{
    redisReply *r = info(b, "commandstats");
    char *line, *save = NULL;

    memset(cs, 0, sizeof(*cs));
    if (r == NULL)
        return -1;
    for (line = strtok_r(r->str, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
        char name[128];
        unsigned long long calls;
        if (sscanf(line, "cmdstat_%127[^:]:calls=%llu", name, &calls) != 2)
            continue;
        if (strcmp(name, "info") == 0)
            continue;
        cs->total += calls;
        if (strcmp(name, "evalsha") == 0 || strcmp(name, "eval") == 0 || strcmp(name, "fcall") == 0)
            cs->scripts += calls;
        if (strcmp(name, "ping") == 0)
            cs->ping += calls;
    }
    freeReplyObject(r);
    return 0;
}

int sys_redis_flushall(struct bench *b)
{
    redisReply *r = redisCommand(b->ctl, "FLUSHALL");
    int ok = r && r->type == REDIS_REPLY_STATUS;

    if (!ok)
        bench_error(b, "FLUSHALL failed");
    if (r)
        freeReplyObject(r);
    return ok ? 0 : -1;
}

uint64_t sys_redis_used_memory(struct bench *b)
{
    redisReply *r = info(b, "memory");
    unsigned long long v = 0;
    char *p;

    if (r == NULL)
        return 0;
    if ((p = strstr(r->str, "used_memory:")) != NULL)
        sscanf(p, "used_memory:%llu", &v);
    freeReplyObject(r);
    return v;
}

/* syscr + syscw: the kernel counts read, readv, pread and write, writev, pwrite, not
 * recv, send or their msg forms, nor epoll. */
static void proc_io(int pid, struct procstat *ps)
{
    char path[64], buf[256];
    unsigned long long r, w;
    int seen = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/io", pid);
    if ((f = fopen(path, "r")) == NULL)
        return;
    while (fgets(buf, sizeof(buf), f)) {
        if (sscanf(buf, "syscr: %llu", &r) == 1)
            seen |= 1;
        else if (sscanf(buf, "syscw: %llu", &w) == 1)
            seen |= 2;
    }
    fclose(f);
    if (seen == 3) {
        ps->rw_calls = r + w;
        ps->has_io = 1;
    }
}

int sys_procstat(int pid, struct procstat *ps)
{
    char path[64], buf[4096], *p;
    unsigned long long ut, st;
    FILE *f;
    size_t n;

    memset(ps, 0, sizeof(*ps));
    if (pid <= 0)
        return -1;
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* after "pid (comm)": state is field 3, utime 14, stime 15 */
    if ((p = strrchr(buf, ')')) == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    ps->user_ticks = ut;
    ps->sys_ticks = st;
    ps->cpu_ticks = ut + st;
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(buf, sizeof(buf), f))
        if (sscanf(buf, "VmRSS: %llu", &ut) == 1)
            ps->rss_kb = ut;
    fclose(f);
    proc_io(pid, ps);
    return 0;
}

uint64_t sys_busy_ticks(void)
{
    unsigned long long v[8] = { 0 };
    FILE *f = fopen("/proc/stat", "r");
    int n;

    if (f == NULL)
        return 0;
    /* cpu  user nice system idle iowait irq softirq steal */
    n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
               &v[7]);
    fclose(f);
    if (n < 8)
        return 0;
    /* irq and softirq time is left out: it is mostly our own loopback traffic, which the kernel
     * charges to no process */
    return v[0] + v[1] + v[2] + v[7];
}

double sys_cpu_pct(const struct procstat *a, const struct procstat *z, double secs)
{
    double hz = (double)sysconf(_SC_CLK_TCK);

    if (secs <= 0 || z->cpu_ticks < a->cpu_ticks)
        return 0;
    return 100.0 * (double)(z->cpu_ticks - a->cpu_ticks) / hz / secs;
}

double sys_ticks_us(uint64_t a, uint64_t z)
{
    if (z < a)
        return 0;
    return 1e6 * (double)(z - a) / (double)sysconf(_SC_CLK_TCK);
}

long sys_raise_nofile(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return (long)rl.rlim_cur;
}
