/* report.c - `dlock-bench report`: reads the RESULT lines of a run, takes the
 * median of every figure over the rounds, and prints one Markdown table of
 * dlockd against direct Redis (its own scripts, or the recipe) with their
 * ratio and the issues' targets, then the uncontended pairs of the three side
 * by side; `--sweep` prints the open-loop latency-vs-load points for gnuplot. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_RECS 4096
#define MAX_KV 96

struct rec {
    int n;
    char *k[MAX_KV];
    char *v[MAX_KV];
};

static struct rec recs[MAX_RECS];
static int nrecs;

static const char *get(const struct rec *r, const char *key)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->k[i], key) == 0)
            return r->v[i];
    return NULL;
}

/* 1 when r has every key=value of the space-separated filter, and none of its !key. */
static int matches(const struct rec *r, const char *filter)
{
    char buf[256], *tok, *save = NULL;

    if (filter == NULL)
        return 1;
    snprintf(buf, sizeof(buf), "%s", filter);
    for (tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        const char *v;
        if (tok[0] == '!' && get(r, tok + 1) != NULL)
            return 0;
        if (eq == NULL)
            continue;
        *eq = '\0';
        if ((v = get(r, tok)) == NULL || strcmp(v, eq + 1) != 0)
            return 0;
    }
    return 1;
}

static int load(const char *path)
{
    char line[RESULT_MAX + 64];
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        perror(path);
        return -1;
    }
    while (fgets(line, sizeof(line), f) && nrecs < MAX_RECS) {
        struct rec *r = &recs[nrecs];
        char *tok, *save = NULL;
        if (strncmp(line, "RESULT ", 7) != 0)
            continue;
        for (tok = strtok_r(line + 7, " \n", &save); tok && r->n < MAX_KV; tok = strtok_r(NULL, " \n", &save)) {
            char *eq = strchr(tok, '=');
            if (eq == NULL)
                continue;
            *eq = '\0';
            r->k[r->n] = strdup(tok);
            r->v[r->n] = strdup(eq + 1);
            r->n++;
        }
        nrecs++;
    }
    fclose(f);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The median of metric over the records matching filter; NAN when none. */
static double median(const char *filter, const char *metric, int *count)
{
    double v[MAX_RECS];
    int n = 0;

    for (int i = 0; i < nrecs; i++) {
        const char *s;
        if (matches(&recs[i], filter) && (s = get(&recs[i], metric)) != NULL)
            v[n++] = atof(s);
    }
    if (count)
        *count = n;
    if (n == 0)
        return NAN;
    qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * The median over the rounds of dlockd/direct, each dlockd run against the
 * direct run of the same round (they ran back to back, so load from outside
 * the benchmark hits both alike). NAN when no round has both.
 */
static double paired_ratio(const char *fa, const char *fb, const char *metric)
{
    double v[MAX_RECS];
    int n = 0;

    for (int i = 0; i < nrecs; i++) {
        const char *ra = get(&recs[i], "round"), *sa = get(&recs[i], metric);
        if (ra == NULL || sa == NULL || !matches(&recs[i], fa))
            continue;
        for (int j = 0; j < nrecs; j++) {
            const char *rb = get(&recs[j], "round"), *sb = get(&recs[j], metric);
            if (rb && sb && strcmp(ra, rb) == 0 && matches(&recs[j], fb) && atof(sb) != 0) {
                v[n++] = atof(sa) / atof(sb);
                break;
            }
        }
    }
    if (n == 0)
        return NAN;
    qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* How a row's target is judged. */
enum check {
    C_NONE,
    C_RATIO_GE,  /* dlockd/direct >= x */
    C_RATIO_LE,  /* dlockd/direct <= x */
    C_A_LE,      /* dlockd value <= x */
    C_A_LT,      /* dlockd value < x */
    C_A_GE,      /* dlockd value >= x */
};

struct row {
    const char *title;
    const char *both;   /* filter for both sides */
    const char *a, *b;  /* extra filters of the dlockd and the direct side */
    const char *metric;
    const char *unit;
    enum check check;
    double x;
    const char *target; /* the target as the issue states it */
};

/* Filters of the runs. The pair runs at log-level info or with clients on a unix
 * socket carry variant=info or variant=unix; the others carry no variant. */
#define A_DL "target=dlockd !variant"
#define B_RD "target=redis !variant"
#define B_RC "target=recipe !variant"
#define A_INFO "target=dlockd variant=info"
#define A_UNIX "target=dlockd variant=unix"
#define B_RC_UNIX "target=recipe variant=unix"
#define PAIRS(c, chk, x, tgt)                                                                                      \
    { "1. uncontended, " #c " conn: pairs/s", "sc=pairs rate=0 conns=" #c, A_DL, B_RD, "pairs_s", "1/s", chk, x,    \
      tgt },                                                                                                       \
    { "1. uncontended, " #c " conn: pair p50", "sc=pairs rate=0 conns=" #c, A_DL, B_RD, "p50_us", "us", C_NONE, 0,  \
      "" },                                                                                                        \
    { "1. uncontended, " #c " conn: pair p99", "sc=pairs rate=0 conns=" #c, A_DL, B_RD, "p99_us", "us", C_NONE, 0,  \
      "" },                                                                                                        \
    { "1. uncontended, " #c " conn: pair p99.9", "sc=pairs rate=0 conns=" #c, A_DL, B_RD, "p999_us", "us", C_NONE,  \
      0, "" }

/* pairs against the recipe (issue 13): pairs/s and Redis CPU per pair judged as ratios, dlockd's CPU per pair;
 * and dlockd's pairs/s at log-level info, its audit log on, against notice (issue 22) */
#define RECIPE(c, px, ptgt, cx, ctgt)                                                                              \
    { "1. uncontended, " #c " conn vs recipe: pairs/s", "sc=pairs rate=0 conns=" #c, A_DL, B_RC, "pairs_s", "1/s", \
      C_RATIO_GE, px, ptgt },                                                                                      \
    { "1. uncontended, " #c " conn vs recipe: pair p50", "sc=pairs rate=0 conns=" #c, A_DL, B_RC, "p50_us", "us",  \
      C_NONE, 0, "" },                                                                                             \
    { "1. uncontended, " #c " conn vs recipe: Redis CPU/pair", "sc=pairs rate=0 conns=" #c, A_DL, B_RC,            \
      "redis_us_pair", "us", C_RATIO_LE, cx, ctgt },                                                               \
    { "1. uncontended, " #c " conn vs recipe: Redis cmds/pair", "sc=pairs rate=0 conns=" #c, A_DL, B_RC,           \
      "cmds_per_pair", "cmds", C_NONE, 0, "" },                                                                    \
    { "1. uncontended, " #c " conn: Redis CPU/pair", "sc=pairs rate=0 conns=" #c, A_DL, B_RD, "redis_us_pair",     \
      "us", C_NONE, 0, "" },                                                                                       \
    { "1. uncontended, " #c " conn: dlockd CPU/pair", "sc=pairs rate=0 conns=" #c, A_DL, B_RD, "dlockd_us_pair",   \
      "us", C_A_LE, 12, "<= 12 us" },                                                                              \
    { "1. uncontended, " #c " conn: pairs/s at log-level info vs notice", "sc=pairs rate=0 conns=" #c, A_INFO,     \
      A_DL, "pairs_s", "1/s", C_RATIO_GE, 0.9, ">= 0.9x" }

/* handoff rows against one spin recipe r; p99chk/p99x/p99tgt judge its p99, waitchk the commands while waiting */
#define HANDOFF(r, label, p99chk, p99x, p99tgt, waitchk, waittgt)                                                 \
    { "2. handoff vs " label ": p50", "sc=handoff", "recipe=queue", "recipe=" r, "p50_us", "us", C_NONE, 0, "" },   \
    { "2. handoff vs " label ": p99", "sc=handoff", "recipe=queue", "recipe=" r, "p99_us", "us", p99chk, p99x,     \
      p99tgt },                                                                                                    \
    { "2. handoff vs " label ": script calls/handoff", "sc=handoff", "recipe=queue", "recipe=" r, "scripts_per_handoff", \
      "calls", C_NONE, 0, "" },                                                                                    \
    { "2. handoff vs " label ": Redis cmds/handoff", "sc=handoff", "recipe=queue", "recipe=" r, "cmds_per_handoff",  \
      "cmds", C_NONE, 0, "" },                                                                                     \
    { "2. handoff vs " label ": BUSY tries/handoff", "sc=handoff", "recipe=queue", "recipe=" r, "busy_per_handoff", \
      "tries", C_NONE, 0, "" },                                                                                    \
    { "2. handoff vs " label ": Redis cmds while N-1 wait", "sc=handoff", "recipe=queue", "recipe=" r, "wait_cmds", \
      "cmds", waitchk, 0, waittgt }

static const struct row rows[] = {
    PAIRS(1, C_RATIO_GE, 0.5, ">= 0.5x"),
    RECIPE(1, 0.6, ">= 0.6x", 1.0, "<= 1.0x"),
    PAIRS(10, C_NONE, 0, ""),
    RECIPE(10, 0.6, ">= 0.6x", 1.0, "<= 1.0x"),
    PAIRS(50, C_RATIO_GE, 1.0, ">= 1.0x"),
    RECIPE(50, 1.0, ">= 1.0x", 0.5, "<= 0.5x"),
    PAIRS(200, C_RATIO_GE, 1.0, ">= 1.0x"),
    RECIPE(200, 1.0, ">= 1.0x", 0.5, "<= 0.5x"),
    HANDOFF("spin100", "spin 100 ms", C_RATIO_LE, 0.02, "50x better", C_A_LE, "zero"),
    HANDOFF("spin1", "spin 1 ms", C_A_LE, 1000, "<= 1 ms", C_NONE, ""),
    { "2. handoff: handoffs/s (queue | spin 100 ms)", "sc=handoff", "recipe=queue", "recipe=spin100", "handoffs_s",
      "1/s", C_NONE, 0, "" },
    { "2. handoff: handoffs/s (queue | spin 1 ms)", "sc=handoff", "recipe=queue", "recipe=spin1", "handoffs_s", "1/s",
      C_NONE, 0, "" },
    { "3. idle holds: dlockd CPU", "sc=idle", A_DL, B_RD, "dlockd_cpu", "% core", C_A_LT, 5, "< 5%" },
    { "3. idle holds: redis-server CPU", "sc=idle", A_DL, B_RD, "redis_cpu", "% core", C_NONE, 0, "" },
    { "3. idle holds: script calls/s (renewal)", "sc=idle", A_DL, B_RD, "scripts_s", "1/s", C_NONE, 0, "" },
    { "3. idle holds: Redis cmds/s (renewal, in scripts too)", "sc=idle", A_DL, B_RD, "cmds_s", "1/s", C_NONE, 0, "" },
    { "3. idle holds: holds per script call per period", "sc=idle", A_DL, B_RD, "holds_per_script", "holds", C_A_GE, 50,
      ">= 50" },
    { "3. idle holds: Redis cmds per hold per period", "sc=idle", A_DL, B_RD, "cmds_per_hold_period", "cmds",
      C_A_LE, 0.02, "<= 1/50" },
    { "3. idle holds: dlockd RSS per session", "sc=idle", A_DL, B_RD, "rss_session_B", "B", C_A_LE, 1024,
      "<= 1 KiB" },
    { "3. idle holds: dlockd RSS per hold", "sc=idle", A_DL, B_RD, "rss_hold_B", "B", C_A_LE, 256, "<= 256 B" },
    { "3. idle holds: Redis memory per hold", "sc=idle", A_DL, B_RD, "redis_mem_hold_B", "B", C_NONE, 0, "" },
    { "4. scale: probe pair p50", "sc=scale", A_DL, B_RD, "p50_us", "us", C_NONE, 0, "" },
    { "4. scale: probe pair p99", "sc=scale", A_DL, B_RD, "p99_us", "us", C_NONE, 0, "" },
    { "4. scale: probe pair p99.9", "sc=scale", A_DL, B_RD, "p999_us", "us", C_NONE, 0, "" },
    { "4. scale: heartbeats/s", "sc=scale", A_DL, B_RD, "heartbeats_s", "1/s", C_NONE, 0, "" },
    { "4. scale: dlockd CPU", "sc=scale", A_DL, B_RD, "dlockd_cpu", "% core", C_NONE, 0, "" },
    { "4. scale: redis-server CPU", "sc=scale", A_DL, B_RD, "redis_cpu", "% core", C_NONE, 0, "" },
    { "5. mixed 80/20: grants/s", "sc=mixed", A_DL, B_RD, "grants_s", "1/s", C_NONE, 0, "" },
    { "5. mixed 80/20: grant p50", "sc=mixed", A_DL, B_RD, "p50_us", "us", C_NONE, 0, "" },
    { "5. mixed 80/20: grant p99", "sc=mixed", A_DL, B_RD, "p99_us", "us", C_NONE, 0, "" },
    { "5. mixed 80/20: exclusive grant p99", "sc=mixed", A_DL, B_RD, "x_p99_us", "us", C_NONE, 0, "" },
    { "5. mixed 80/20: shared grant p99", "sc=mixed", A_DL, B_RD, "s_p99_us", "us", C_NONE, 0, "" },
    { "5. mixed 80/20: script calls/grant", "sc=mixed", A_DL, B_RD, "scripts_per_grant", "calls", C_NONE, 0, "" },
    { "5. mixed 80/20: BUSY tries/grant", "sc=mixed", A_DL, B_RD, "busy_per_grant", "tries", C_NONE, 0, "" },
};

static void fmt(char *buf, size_t len, double v)
{
    if (isnan(v))
        snprintf(buf, len, "-");
    else if (v != 0 && fabs(v) < 0.1)
        snprintf(buf, len, "%.4f", v);
    else if (fabs(v) < 100)
        snprintf(buf, len, "%.2f", v);
    else
        snprintf(buf, len, "%.0f", v);
}

static const char *judge(const struct row *r, double a, double ratio)
{
    int ok;

    switch (r->check) {
    case C_RATIO_GE: ok = ratio >= r->x; break;
    case C_RATIO_LE: ok = ratio <= r->x; break;
    case C_A_LE: ok = a <= r->x; break;
    case C_A_LT: ok = a < r->x; break;
    case C_A_GE: ok = a >= r->x; break;
    default: return "";
    }
    if ((r->check == C_RATIO_GE || r->check == C_RATIO_LE) ? isnan(ratio) : isnan(a))
        return "no data";
    return ok ? "met" : "MISSED";
}

/* How much CPU other processes took while the runs measured. */
static void noise(void)
{
    double v[MAX_RECS];
    int n = 0;

    for (int i = 0; i < nrecs; i++) {
        const char *s = get(&recs[i], "other_cpu");
        if (s)
            v[n++] = atof(s);
    }
    if (n == 0)
        return;
    qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
    printf("CPU used by processes outside the benchmark during the %d measured windows: median %.1f%%, "
           "max %.1f%% of one core.\n",
           n, n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v[n - 1]);
}

static void table(void)
{
    int missed = 0;

    printf("| scenario / figure | unit | dlockd | direct Redis | dlockd/direct | target | |\n");
    printf("|---|---|---:|---:|---:|---|---|\n");
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        char fa[256], fb[256], sa[32], sb[32], sr[32];
        int na, nb;
        double a, b, ratio;
        const char *verdict;

        snprintf(fa, sizeof(fa), "%s %s", r->both, r->a);
        snprintf(fb, sizeof(fb), "%s %s", r->both, r->b);
        a = median(fa, r->metric, &na);
        b = median(fb, r->metric, &nb);
        /* a variant that did not run (the smoke run, older results) leaves no row */
        if (na == 0 && (nb == 0 || strstr(r->a, "variant=") != NULL))
            continue;
        ratio = paired_ratio(fa, fb, r->metric);
        fmt(sa, sizeof(sa), a);
        fmt(sb, sizeof(sb), b);
        fmt(sr, sizeof(sr), ratio);
        verdict = judge(r, a, ratio);
        missed += strcmp(verdict, "MISSED") == 0;
        printf("| %s | %s | %s | %s | %s | %s | %s |\n", r->title, r->unit, sa, sb, sr, r->target, verdict);
    }
    printf("\nMedians over the rounds of this run; dlockd and direct Redis runs alternate, and the ratio is the\n"
           "median of each round's dlockd/direct. Direct Redis runs dlockd's own scripts, or the recipe in the\n"
           "rows that say \"vs recipe\"; in the rows \"at log-level info vs notice\" the two sides are dlockd at\n"
           "info and at notice. %d target(s) missed.\n", missed);
}

/* A column of the per-connection tables of the pairs: the median of metric
 * over the closed-loop pair runs matching filter, or, with over set, the
 * paired ratio of those runs to the runs matching over. */
struct col {
    const char *head;
    const char *filter;
    const char *metric;
    const char *over;
};

static const struct col rate_cols[] = {
    { "pairs/s dlockd", A_DL, "pairs_s", NULL },
    { "own scripts", B_RD, "pairs_s", NULL },
    { "recipe", B_RC, "pairs_s", NULL },
    { "dlockd/recipe", A_DL, "pairs_s", B_RC },
    { "dlockd/own scripts", A_DL, "pairs_s", B_RD },
    { "dlockd at info", A_INFO, "pairs_s", NULL },
    { "info/notice", A_INFO, "pairs_s", A_DL },
    { "dlockd on unix socket", A_UNIX, "pairs_s", NULL },
    { "unix/TCP", A_UNIX, "pairs_s", A_DL },
    { "recipe on unix socket", B_RC_UNIX, "pairs_s", NULL },
    { "unix/TCP", B_RC_UNIX, "pairs_s", B_RC },
};

static const struct col cpu_cols[] = {
    { "Redis CPU/pair dlockd", A_DL, "redis_us_pair", NULL },
    { "user", A_DL, "redis_user_us_pair", NULL },
    { "sys", A_DL, "redis_sys_us_pair", NULL },
    { "own scripts", B_RD, "redis_us_pair", NULL },
    { "user", B_RD, "redis_user_us_pair", NULL },
    { "sys", B_RD, "redis_sys_us_pair", NULL },
    { "recipe", B_RC, "redis_us_pair", NULL },
    { "user", B_RC, "redis_user_us_pair", NULL },
    { "sys", B_RC, "redis_sys_us_pair", NULL },
    { "dlockd/recipe", A_DL, "redis_us_pair", B_RC },
    { "dlockd CPU/pair", A_DL, "dlockd_us_pair", NULL },
    { "user", A_DL, "dlockd_user_us_pair", NULL },
    { "sys", A_DL, "dlockd_sys_us_pair", NULL },
    { "at info", A_INFO, "dlockd_us_pair", NULL },
    { "on unix socket", A_UNIX, "dlockd_us_pair", NULL },
};

static const struct col count_cols[] = {
    { "Redis cmds/pair dlockd", A_DL, "cmds_per_pair", NULL },
    { "own scripts", B_RD, "cmds_per_pair", NULL },
    { "recipe", B_RC, "cmds_per_pair", NULL },
    { "script calls/pair dlockd", A_DL, "scripts_per_pair", NULL },
    { "own scripts", B_RD, "scripts_per_pair", NULL },
    { "recipe", B_RC, "scripts_per_pair", NULL },
    { "dlockd read+write calls/pair", A_DL, "dlockd_rw_calls_pair", NULL },
    { "at info", A_INFO, "dlockd_rw_calls_pair", NULL },
    { "on unix socket", A_UNIX, "dlockd_rw_calls_pair", NULL },
};

/* Connection counts of the closed-loop pair runs against the recipe, ascending. */
static int recipe_conns(int *conns, int max)
{
    int n = 0;

    for (int i = 0; i < nrecs; i++) {
        const char *s = get(&recs[i], "conns");
        int c, seen = 0;
        if (s == NULL || !matches(&recs[i], "sc=pairs rate=0 target=recipe"))
            continue;
        c = atoi(s);
        for (int j = 0; j < n; j++)
            seen |= conns[j] == c;
        if (!seen && n < max)
            conns[n++] = c;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && conns[j - 1] > conns[j]; j--) {
            int t = conns[j];
            conns[j] = conns[j - 1];
            conns[j - 1] = t;
        }
    return n;
}

/* One row per connection count, one column per col. */
static void pairs_table(const struct col *cols, size_t ncols, const int *conns, int n)
{
    printf("| conns |");
    for (size_t j = 0; j < ncols; j++)
        printf(" %s |", cols[j].head);
    printf("\n|---:|");
    for (size_t j = 0; j < ncols; j++)
        printf("---:|");
    printf("\n");
    for (int i = 0; i < n; i++) {
        printf("| %d |", conns[i]);
        for (size_t j = 0; j < ncols; j++) {
            char fa[128], fb[128], v[32];
            snprintf(fa, sizeof(fa), "sc=pairs rate=0 conns=%d %s", conns[i], cols[j].filter);
            snprintf(fb, sizeof(fb), "sc=pairs rate=0 conns=%d %s", conns[i], cols[j].over ? cols[j].over : "");
            fmt(v, sizeof(v), cols[j].over ? paired_ratio(fa, fb, cols[j].metric) : median(fa, cols[j].metric, NULL));
            printf(" %s |", v);
        }
        printf("\n");
    }
}

/* Uncontended pairs of dlockd, its own scripts and the recipe side by side (the layout of issue 13),
 * with dlockd at log-level info and clients on unix sockets (issue 22). */
static void recipe_tables(void)
{
    int conns[32], n = recipe_conns(conns, 32);

    if (n == 0)
        return;
    printf("\nUncontended LOCK+UNLOCK pairs, closed loop: dlockd (log-level notice, clients over TCP), its own\n"
           "scripts called straight, and the recipe; dlockd at log-level info (an audit line per grant and\n"
           "release); dlockd with its clients on its unix socket (dlockd to Redis still TCP), and the recipe on\n"
           "Redis's unix socket. Ratios pair the runs of a round.\n\n");
    pairs_table(rate_cols, sizeof(rate_cols) / sizeof(rate_cols[0]), conns, n);
    printf("\nCPU per pair in us, utime + stime of /proc/PID/stat over the window, and user and sys apart:\n"
           "redis-server's with each client, dlockd's at notice over TCP, at info, and on the unix socket.\n\n");
    pairs_table(cpu_cols, sizeof(cpu_cols) / sizeof(cpu_cols[0]), conns, n);
    printf("\nPer pair: Redis commands (those in scripts too) and script calls from INFO commandstats; dlockd's\n"
           "read+write calls, syscr + syscw of /proc/PID/io: read, readv, write and writev, that is the calls\n"
           "on its Redis link and its log, not the recv and send of its client sockets nor epoll\n"
           "(make bench-counts counts every call, with strace).\n\n");
    pairs_table(count_cols, sizeof(count_cols) / sizeof(count_cols[0]), conns, n);
}

/* Open-loop points: offered rate, then achieved pairs/s, p50 and p99 of each side. */
static int sweep(void)
{
    double rates[256];
    int n = 0;

    for (int i = 0; i < nrecs; i++) {
        const char *s = get(&recs[i], "rate"), *sw = get(&recs[i], "sweep");
        double r;
        int seen = 0;
        if (s == NULL || sw == NULL || (r = atof(s)) <= 0)
            continue;
        for (int j = 0; j < n; j++)
            seen |= rates[j] == r;
        if (!seen && n < 256)
            rates[n++] = r;
    }
    qsort(rates, (size_t)n, sizeof(rates[0]), cmp_double);
    printf("# offered dlockd_achieved dlockd_p50_ms dlockd_p99_ms redis_achieved redis_p50_ms redis_p99_ms\n");
    for (int i = 0; i < n; i++) {
        char fa[128], fb[128];
        snprintf(fa, sizeof(fa), "sc=pairs sweep=1 rate=%.0f target=dlockd", rates[i]);
        snprintf(fb, sizeof(fb), "sc=pairs sweep=1 rate=%.0f target=redis", rates[i]);
        printf("%.0f %.1f %.3f %.3f %.1f %.3f %.3f\n", rates[i], median(fa, "pairs_s", NULL),
               median(fa, "p50_us", NULL) / 1e3, median(fa, "p99_us", NULL) / 1e3, median(fb, "pairs_s", NULL),
               median(fb, "p50_us", NULL) / 1e3, median(fb, "p99_us", NULL) / 1e3);
    }
    return 0;
}

int report_main(int argc, char **argv)
{
    int want_sweep = 0;
    const char *path = NULL;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sweep") == 0)
            want_sweep = 1;
        else
            path = argv[i];
    }
    if (path == NULL) {
        fprintf(stderr, "usage: dlock-bench report [--sweep] RESULT-FILE\n");
        return 2;
    }
    if (load(path) != 0)
        return 1;
    if (want_sweep)
        return sweep();
    table();
    recipe_tables();
    printf("\n");
    noise();
    return 0;
}
