/* main.c - dlock-bench: runs one scenario against dlockd or straight against
 * Redis (dlockd's scripts or the recipe's) and prints one RESULT line of
 * key=value figures; `dlock-bench report` turns a file of such lines into the
 * table of medians and ratios. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "bench.h"

#define SETUP_LIMIT_S 240 /* a scenario that is not measuring by then is stuck */
#define ERRORS_MAX 1000   /* give up after this many errors */

static struct bench bench;
static const char *const target_names[] = { [T_DLOCKD] = "dlockd", [T_REDIS] = "redis", [T_RECIPE] = "recipe" };

uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void result_add(struct bench *b, const char *key, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->rlen + 2 >= sizeof(b->result))
        return;
    n = snprintf(b->result + b->rlen, sizeof(b->result) - b->rlen, " %s=", key);
    if (n > 0)
        b->rlen += (size_t)n;
    if (b->rlen >= sizeof(b->result)) {
        b->rlen = sizeof(b->result) - 1;
        return;
    }
    va_start(ap, fmt);
    n = vsnprintf(b->result + b->rlen, sizeof(b->result) - b->rlen, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->rlen += (size_t)n;
    if (b->rlen >= sizeof(b->result))
        b->rlen = sizeof(b->result) - 1;
}

void bench_error(struct bench *b, const char *fmt, ...)
{
    va_list ap;

    if (++b->errors <= 10) {
        fprintf(stderr, "dlock-bench: error: ");
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    } else if (b->errors == 11) {
        fprintf(stderr, "dlock-bench: more errors follow; counting them only\n");
    }
    if (b->errors >= ERRORS_MAX && !b->stopping) {
        fprintf(stderr, "dlock-bench: too many errors, giving up\n");
        b->stopping = 1;
        event_base_loopexit(b->base, NULL);
    }
}

void bench_note(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "dlock-bench: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int in_window(const struct bench *b, uint64_t t)
{
    return b->m_start && t >= b->m_start && (b->m_end == 0 || t < b->m_end);
}

struct later {
    struct bench *b;
    void (*fn)(struct bench *b);
};

static void on_later(evutil_socket_t fd, short what, void *arg)
{
    struct later l = *(struct later *)arg;

    (void)fd;
    (void)what;
    free(arg);
    if (!l.b->stopping)
        l.fn(l.b);
}

void after_ms(struct bench *b, double ms, void (*fn)(struct bench *b))
{
    struct later *l = malloc(sizeof(*l));
    struct timeval tv;

    if (l == NULL) {
        bench_error(b, "out of memory");
        return;
    }
    l->b = b;
    l->fn = fn;
    tv.tv_sec = (long)(ms / 1000);
    tv.tv_usec = (long)((ms - (double)tv.tv_sec * 1000) * 1000);
    event_base_once(b->base, -1, EV_TIMEOUT, on_later, l, &tv);
}

/* Setup that fails or hangs ends the run: no figures come from a broken run. */
static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    static int seconds;
    struct bench *b = arg;

    (void)fd;
    (void)what;
    seconds++;
    if (b->m_start == 0 && (b->errors > 0 || seconds > SETUP_LIMIT_S)) {
        bench_note("setup failed after %d s (%d of %d connections ready)", seconds, b->opened, b->ncl);
        b->errors++;
        b->stopping = 1;
        event_base_loopexit(b->base, NULL);
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: dlock-bench --scenario pairs|handoff|idle|scale|mixed --target dlockd|redis|recipe [options]\n"
            "       dlock-bench report [--sweep] RESULT-FILE\n"
            "  --dlockd HOST:PORT|unix:PATH  --redis HOST:PORT|unix:PATH  --dlockd-pid PID  --redis-pid PID\n"
            "  --conns N  --duration S  --warmup S  --rate PAIRS/S (open loop)  --hold MS\n"
            "  --sleep MS (direct Redis retry sleep)  --long-hold MS  --sessions N  --locks N\n"
            "  --heartbeat MS  --renew MS  --names N  --shared-pct P  --wait MS  --open-max N\n"
            "  --label 'k=v ...' (copied into the RESULT line)\n"
            "  the recipe target runs pairs, handoff and scale (it has no shared locks and no renewal)\n");
    exit(2);
}

static void parse_addr(const char *s, struct bench_addr *a)
{
    const char *colon = strrchr(s, ':');

    memset(a, 0, sizeof(*a));
    if (strncmp(s, "unix:", 5) == 0) {
        if (s[5] == '\0' || strlen(s + 5) >= sizeof(a->path))
            usage();
        snprintf(a->path, sizeof(a->path), "%s", s + 5);
        return;
    }
    if (colon == NULL || colon == s || (size_t)(colon - s) >= sizeof(a->host))
        usage();
    snprintf(a->host, sizeof(a->host), "%.*s", (int)(colon - s), s);
    a->port = atoi(colon + 1);
}

const char *bench_addr_str(const struct bench_addr *a, char *buf, size_t len)
{
    if (a->path[0])
        snprintf(buf, len, "unix:%s", a->path);
    else
        snprintf(buf, len, "%s:%d", a->host, a->port);
    return buf;
}

static void defaults(struct opts *o)
{
    memset(o, 0, sizeof(*o));
    parse_addr("127.0.0.1:7411", &o->dl);
    parse_addr("127.0.0.1:6379", &o->rd);
    o->conns = 1;
    o->duration = 3;
    o->warmup = 0.5;
    o->hold_ms = 1;
    o->sleep_ms = 100;
    o->long_hold_ms = 1000;
    o->sessions = 10000;
    o->locks = 10;
    o->heartbeat_ms = 3333;
    o->renew_ms = BENCH_LEASE_MS / 3;
    o->names = 100;
    o->shared_pct = 80;
    o->wait_ms = 30000;
    o->open_max = 256;
    o->label = "";
}

static enum target parse_target(const char *s)
{
    for (size_t i = 0; i < sizeof(target_names) / sizeof(target_names[0]); i++)
        if (strcmp(target_names[i], s) == 0)
            return (enum target)i;
    usage();
    return T_DLOCKD;
}

static void parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        { "target", 1, 0, 't' },     { "scenario", 1, 0, 's' },  { "dlockd", 1, 0, 'D' },
        { "redis", 1, 0, 'R' },      { "dlockd-pid", 1, 0, 'P' }, { "redis-pid", 1, 0, 'Q' },
        { "conns", 1, 0, 'c' },      { "duration", 1, 0, 'd' },  { "warmup", 1, 0, 'w' },
        { "rate", 1, 0, 'r' },       { "hold", 1, 0, 'H' },      { "sleep", 1, 0, 'z' },
        { "long-hold", 1, 0, 'L' },  { "sessions", 1, 0, 'S' },  { "locks", 1, 0, 'l' },
        { "heartbeat", 1, 0, 'b' },  { "renew", 1, 0, 'n' },     { "names", 1, 0, 'N' },
        { "shared-pct", 1, 0, 'p' }, { "wait", 1, 0, 'W' },      { "open-max", 1, 0, 'o' },
        { "label", 1, 0, 'x' },      { "help", 0, 0, 'h' },      { 0, 0, 0, 0 }
    };
    int ch;

    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 't': o->target = parse_target(optarg); break;
        case 's': o->scenario = optarg; break;
        case 'D': parse_addr(optarg, &o->dl); break;
        case 'R': parse_addr(optarg, &o->rd); break;
        case 'P': o->dlockd_pid = atoi(optarg); break;
        case 'Q': o->redis_pid = atoi(optarg); break;
        case 'c': o->conns = atoi(optarg); break;
        case 'd': o->duration = atof(optarg); break;
        case 'w': o->warmup = atof(optarg); break;
        case 'r': o->rate = atof(optarg); break;
        case 'H': o->hold_ms = atoi(optarg); break;
        case 'z': o->sleep_ms = atoi(optarg); break;
        case 'L': o->long_hold_ms = atoi(optarg); break;
        case 'S': o->sessions = atoi(optarg); break;
        case 'l': o->locks = atoi(optarg); break;
        case 'b': o->heartbeat_ms = atoi(optarg); break;
        case 'n': o->renew_ms = atoi(optarg); break;
        case 'N': o->names = atoi(optarg); break;
        case 'p': o->shared_pct = atoi(optarg); break;
        case 'W': o->wait_ms = atoi(optarg); break;
        case 'o': o->open_max = atoi(optarg); break;
        case 'x': o->label = optarg; break;
        default: usage();
        }
    }
    if (optind != argc || o->scenario == NULL || o->conns < 1 || o->duration <= 0 || o->open_max < 1)
        usage();
}

static void random_hex(char *buf, size_t nhex)
{
    unsigned char raw[16];

    if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
        memset(raw, 0x5a, sizeof(raw));
    for (size_t i = 0; i < nhex && i / 2 < sizeof(raw); i++)
        buf[i] = "0123456789abcdef"[(raw[i / 2] >> ((i % 2) * 4)) & 15];
    buf[nhex] = '\0';
}

/* The scenario called name, if target can run it. */
static int (*scenario(const char *name, enum target t))(struct bench *)
{
    static const struct {
        const char *name;
        int (*fn)(struct bench *);
        int recipe; /* the recipe can run it: exclusive locks, no renewal */
    } table[] = {
        { "pairs", scen_pairs, 1 }, { "handoff", scen_handoff, 1 }, { "idle", scen_idle, 0 },
        { "scale", scen_scale, 1 }, { "mixed", scen_mixed, 0 },
    };

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcmp(table[i].name, name) == 0 && (t != T_RECIPE || table[i].recipe))
            return table[i].fn;
    return NULL;
}

int main(int argc, char **argv)
{
    struct bench *b = &bench;
    struct event_config *cfg;
    struct event *watchdog;
    struct timeval sec = { 1, 0 };
    int (*fn)(struct bench *);

    if (argc > 1 && strcmp(argv[1], "report") == 0)
        return report_main(argc - 1, argv + 1);
    defaults(&b->o);
    parse(argc, argv, &b->o);
    if ((fn = scenario(b->o.scenario, b->o.target)) == NULL)
        usage();
    sys_raise_nofile();
    random_hex(b->run, 8);
    random_hex(b->daemon_id, 16);
    srandom((unsigned)now_ns());
    cfg = event_config_new();
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    b->base = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (b->base == NULL || sys_redis_connect(b) != 0)
        return 1;
    if (b->o.target != T_DLOCKD && sys_load_scripts(b) != 0)
        return 1;
    watchdog = event_new(b->base, -1, EV_PERSIST, on_watchdog, b);
    event_add(watchdog, &sec);
    if (fn(b) != 0)
        return 1;
    event_base_dispatch(b->base);
    b->stopping = 1;
    printf("RESULT sc=%s target=%s%s%s%s errors=%llu\n", b->o.scenario,
           target_names[b->o.target], b->o.label[0] ? " " : "", b->o.label, b->result,
           (unsigned long long)b->errors);
    fflush(stdout);
    /* thousands of connections: let exit() close them */
    return b->errors ? 3 : 0;
}
