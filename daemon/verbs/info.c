/* info.c - the documents built from the counters and the daemon's state:
 * INFO and the admin /status (INFO with the effective config) as JSON, and
 * /metrics as Prometheus text. */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "batch.h"
#include "dict.h"
#include "dlockd.h"
#include "info.h"
#include "redis.h"

static const char *const outcome_names[OUT_COUNT] = { "ok", "busy", "timeout", "error" };

static json_t *info_doc(struct dlockd *d)
{
    json_t *requests = json_object(), *doc;
    char until[40];

    for (int v = 0; v < VERB_NVERBS; v++)
        json_object_set_new(requests, proto_verb_name((enum proto_verb)v), json_integer((json_int_t)d->stats.requests[v]));
    doc = json_pack("{s:s, s:s, s:I, s:i, s:I, s:I, s:I, s:s, s:s, s:s, s:b, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                    "version", PACKAGE_VERSION, "id", d->id, "uptime_ms", (json_int_t)(now_ms() - d->started),
                    "connections", d->nconns, "sessions", (json_int_t)dict_size(d->sessions), "holds",
                    (json_int_t)d->nholds, "waiters", (json_int_t)dict_size(d->waits), "backend",
                    redis_state(d->redis), "backend_addr", redis_addr(d->redis), "backend_error", redis_error(d->redis), "jeopardy",
                    redis_jeopardy(d->redis), "requests", requests,
                    "grants", (json_int_t)d->stats.grants, "busy", (json_int_t)d->stats.busy, "timeouts",
                    (json_int_t)d->stats.timeouts, "errors", (json_int_t)d->stats.errors, "expired_sessions",
                    (json_int_t)d->stats.expired_sessions, "lost", (json_int_t)d->stats.lost, "renewed",
                    (json_int_t)d->stats.renewed);
    json_object_set_new(doc, "gated_until", json_string(batch_gated_until(d, until, sizeof(until))));
    json_object_set_new(doc, "requests_held", json_integer((json_int_t)(d->nreqs + d->nqueued)));
    json_object_set_new(doc, "ack_rounds", json_integer((json_int_t)d->stats.ack_rounds));
    json_object_set_new(doc, "ack_refused", json_integer((json_int_t)d->stats.ack_refused));
    return doc;
}

static char *dump(json_t *doc)
{
    char *text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);

    json_decref(doc);
    return text;
}

char *info_json(struct dlockd *d)
{
    return dump(info_doc(d));
}

static void add_key(const char *key, const char *value, void *arg)
{
    json_object_set_new(arg, key, json_string(value));
}

char *info_status(struct dlockd *d)
{
    json_t *doc = info_doc(d), *cfg = json_object();

    config_each(&d->cfg, add_key, cfg);
    json_object_set_new(doc, "config", cfg);
    return dump(doc);
}

static void metric(struct evbuffer *out, const char *name, const char *type, const char *help, uint64_t v)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name, v);
}

static void metric_f(struct evbuffer *out, const char *name, const char *type, const char *help, double v)
{
    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.6f\n", name, help, name, type, name, v);
}

static void histogram(struct evbuffer *out, const char *name, const char *help, const struct histo *h,
                      const uint64_t *bounds)
{
    uint64_t cum = 0;

    evbuffer_add_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int i = 0; i < HISTO_BUCKETS; i++) {
        cum += h->counts[i];
        evbuffer_add_printf(out, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, (double)bounds[i] / 1e6, cum);
    }
    evbuffer_add_printf(out, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.6f\n%s_count %" PRIu64 "\n", name, h->n,
                        name, (double)h->sum_us / 1e6, name, h->n);
}

/* The number of entries of /proc/self/fd, less the one opendir uses; 0 when it cannot be read. */
static uint64_t open_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    uint64_t n = 0;

    if (dir == NULL)
        return 0;
    while ((e = readdir(dir)) != NULL)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n ? n - 1 : 0;
}

/* Prometheus' standard process_* metrics, from getrusage, getrlimit and /proc. */
static void process_metrics(struct dlockd *d, struct evbuffer *out)
{
    struct rusage ru;
    struct rlimit rl;
    struct timespec wall;
    unsigned long long vm = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

    if (f == NULL || fscanf(f, "%llu %llu", &vm, &rss) != 2)
        vm = rss = 0;
    if (f)
        fclose(f);
    getrusage(RUSAGE_SELF, &ru);
    clock_gettime(CLOCK_REALTIME, &wall);
    metric_f(out, "process_cpu_seconds_total", "counter", "User and system CPU time spent in seconds.",
             (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
    metric(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", rss * page);
    metric(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", vm * page);
    metric(out, "process_open_fds", "gauge", "Number of open file descriptors.", open_fds());
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        metric(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.", rl.rlim_cur);
    metric_f(out, "process_start_time_seconds", "gauge", "Start time of the process since the epoch in seconds.",
             (double)wall.tv_sec + wall.tv_nsec / 1e9 - (double)(now_ms() - d->started) / 1e3);
}

void info_metrics(struct dlockd *d, struct evbuffer *out)
{
    const struct stats *st = &d->stats;

    evbuffer_add_printf(out, "# HELP dlockd_build_info The version of this dlockd; always 1.\n"
                             "# TYPE dlockd_build_info gauge\ndlockd_build_info{version=\"%s\"} 1\n",
                        PACKAGE_VERSION);
    process_metrics(d, out);

    evbuffer_add_printf(out, "# HELP dlockd_requests_total Replies by verb and outcome.\n"
                             "# TYPE dlockd_requests_total counter\n");
    for (int v = 0; v <= VERB_NVERBS; v++)
        for (int o = 0; o < OUT_COUNT; o++)
            if (st->outcomes[v][o] || v < VERB_NVERBS)
                evbuffer_add_printf(out, "dlockd_requests_total{verb=\"%s\",outcome=\"%s\"} %" PRIu64 "\n",
                                    v < VERB_NVERBS ? proto_verb_name((enum proto_verb)v) : "none",
                                    outcome_names[o], st->outcomes[v][o]);
    metric(out, "dlockd_grants_total", "counter", "Holds granted, new or reentered.", st->grants);
    metric(out, "dlockd_timeouts_total", "counter", "Waits that ended in TIMEOUT.", st->timeouts);
    metric(out, "dlockd_renewals_total", "counter", "Renewal script calls.", st->renewals);
    metric(out, "dlockd_renewed_leases_total", "counter", "Leases renewed in Redis.", st->renewed);
    metric(out, "dlockd_ack_rounds_total", "counter", "Rounds of SET and WAIT for min-replicas-ack.", st->ack_rounds);
    metric(out, "dlockd_ack_refused_total", "counter", "Grants undone because too few replicas confirmed them.",
           st->ack_refused);
    metric(out, "dlockd_expired_sessions_total", "counter", "Sessions that expired.", st->expired_sessions);
    metric(out, "dlockd_lost_holds_total", "counter", "Holds lost while their session lived.", st->lost);
    metric(out, "dlockd_connections", "gauge", "Open client connections.", (uint64_t)d->nconns);
    metric(out, "dlockd_sessions", "gauge", "Live sessions.", dict_size(d->sessions));
    metric(out, "dlockd_holds", "gauge", "Holds of this daemon's sessions.", d->nholds);
    metric(out, "dlockd_waiters", "gauge", "Requests waiting or in flight.", dict_size(d->waits));
    metric(out, "dlockd_backend_up", "gauge", "1 when the Redis link is up.", (uint64_t)redis_up(d->redis));
    metric(out, "dlockd_backend_jeopardy", "gauge", "1 while holds cannot be renewed.",
           (uint64_t)redis_jeopardy(d->redis));
    metric(out, "dlockd_backend_reconnects_total", "counter", "Times the Redis link came up again after a loss.",
           redis_reconnects(d->redis));
    metric(out, "dlockd_uptime_seconds", "gauge", "Seconds since start.", (now_ms() - d->started) / 1000);
    histogram(out, "dlockd_backend_latency_seconds", "Redis round trip of a script call.", &st->backend,
              histo_bounds_us);
    histogram(out, "dlockd_handoff_latency_seconds",
              "From sending the script that freed a name to answering the waiter it granted.", &st->handoff,
              histo_bounds_us);
    histogram(out, "dlockd_wait_seconds", "From a LOCK or ACQUIRE arriving to its grant, immediate grants included.",
              &st->waited, histo_long_bounds_us);
    histogram(out, "dlockd_hold_seconds", "How long holds of this daemon's sessions were held when they ended.",
              &st->held, histo_long_bounds_us);
}
