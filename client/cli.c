/* cli.c - dlock, the command-line client of dlockd: the command line, and the status, info
 * and ping commands (run is in cli_run.c, the operator's commands in cli_admin.c). */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "cli.h"
#include "proto.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dlock [OPTIONS] run [--wait DUR] [--shared] [--semaphore LIMIT] NAME -- CMD [ARG ...]\n"
            "       dlock [OPTIONS] status NAME\n"
            "       dlock [OPTIONS] info\n"
            "       dlock [OPTIONS] ping\n"
            "       dlock [OPTIONS] ls [PATTERN] | sessions | kill SESSION | force NAME\n"
            "options: -a, --addr ADDR    dlockd address (HOST:PORT or unix:PATH; default $DLOCK_ADDR, else 127.0.0.1:7411)\n"
            "         -j, --json         output for scripts\n"
            "             --ttl DUR      session ttl      --name NAME   client name\n"
            "run:     -w, --wait DUR     wait at most DUR for the lock (default: no limit); -n = --wait 0\n"
            "         -s, --shared       shared (read) lock\n"
            "         -S, --semaphore N  take a permit of the semaphore NAME with limit N\n"
            "         -g, --grace DUR    after a lost lock, SIGKILL CMD this long after SIGTERM (default 5s)\n"
            "         -E, --conflict-exit-code N   exit status when the wait runs out (default 75)\n"
            "operator: -P, --adminpass PASS  the server's adminpass (default $DLOCK_ADMINPASS)\n"
            "         -l, --limit N      ls, sessions: entries at most (default 100, at most 1000)\n"
            "Durations: 500, 500ms, 2s, 1m; --wait also takes inf. See dlock(1).\n");
}

void cli_msg(const struct cli *c, const char *event, const char *fmt, ...)
{
    char text[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (c->json) {
        json_t *o = json_pack("{s:s, s:s}", "event", event, "message", text);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;

        fprintf(stderr, "%s\n", s ? s : "{}");
        free(s);
        json_decref(o);
    } else {
        fprintf(stderr, "dlock: %s\n", text);
    }
}

dlock_t *cli_connect(const struct cli *c, dlock_event_cb cb, void *arg)
{
    dlock_options_t *o = dlock_options_new();
    const char *pw = getenv("DLOCK_PASSWORD");
    dlock_t *h = NULL;
    int rc = o ? 0 : DLOCK_ERR_NOMEM;

    if (rc == 0 && c->addr)
        rc = dlock_options_add_address(o, c->addr);
    if (rc == 0 && c->ttl_ms)
        rc = dlock_options_set_ttl(o, c->ttl_ms);
    if (rc == 0 && c->name)
        rc = dlock_options_set_name(o, c->name);
    if (rc == 0 && pw && *pw)
        rc = dlock_options_set_password(o, pw);
    if (rc == 0)
        rc = dlock_options_set_event_callback(o, cb, arg);
    if (rc == 0)
        rc = dlock_connect(&h, o);
    dlock_options_free(o);
    if (rc != 0) {
        const char *addr = c->addr ? c->addr : getenv("DLOCK_ADDR");
        cli_msg(c, "error", "cannot connect to %s: %s", addr && *addr ? addr : "127.0.0.1:7411", dlock_strerror(rc));
        return NULL;
    }
    return h;
}

/* ---------------------------------------------------------------- status, info, ping */

/* "1.2s", "350ms", "3m05s" for a number of milliseconds. */
static const char *human_ms(long long ms, char *buf, size_t len)
{
    if (ms < 1000)
        snprintf(buf, len, "%lldms", ms);
    else if (ms < 60000)
        snprintf(buf, len, "%.1fs", ms / 1000.0);
    else
        snprintf(buf, len, "%lldm%02llds", ms / 60000, (ms / 1000) % 60);
    return buf;
}

static void print_holder(json_t *hd)
{
    char t[32];
    const char *mode = json_string_value(json_object_get(hd, "mode"));
    json_t *permits = json_object_get(hd, "permits");

    if (permits)
        printf("  permits=%lld", (long long)json_integer_value(permits));
    else
        printf("  %-9s count=%lld", mode ? mode : "?", (long long)json_integer_value(json_object_get(hd, "count")));
    printf("  token=%lld  held %s  by %s (session %s, owner %s)\n",
           (long long)json_integer_value(json_object_get(hd, "token")),
           human_ms(json_integer_value(json_object_get(hd, "held_ms")), t, sizeof(t)),
           json_string_value(json_object_get(hd, "client")) ? json_string_value(json_object_get(hd, "client")) : "?",
           json_string_value(json_object_get(hd, "session")) ? json_string_value(json_object_get(hd, "session")) : "?",
           json_string_value(json_object_get(hd, "owner")) && *json_string_value(json_object_get(hd, "owner"))
               ? json_string_value(json_object_get(hd, "owner"))
               : "\"\"");
}

static void print_status(const char *name, json_t *st)
{
    const char *type = json_string_value(json_object_get(st, "type"));
    json_t *holders = json_object_get(st, "holders"), *hd;
    long long waiters = json_integer_value(json_object_get(st, "waiters"));
    size_t i, n = json_array_size(holders);

    if (type == NULL) {
        printf("%s: not in use\n", name);
    } else if (strcmp(type, "latch") == 0) {
        printf("%s: latch, count %lld\n", name, (long long)json_integer_value(json_object_get(st, "count")));
    } else if (strcmp(type, "semaphore") == 0) {
        printf("%s: semaphore, limit %lld, %lld free, %zu holder%s, %lld waiting\n", name,
               (long long)json_integer_value(json_object_get(st, "limit")),
               (long long)json_integer_value(json_object_get(st, "free")), n, n == 1 ? "" : "s", waiters);
    } else {
        printf("%s: %s, %zu holder%s, %lld waiting\n", name, type, n, n == 1 ? "" : "s", waiters);
    }
    json_array_foreach(holders, i, hd)
        print_holder(hd);
}

/* INFO as "key: value" lines; an object value as "k=v k=v". */
static void print_info(json_t *info)
{
    const char *key, *k2;
    json_t *v, *v2;

    json_object_foreach(info, key, v) {
        printf("%s:", key);
        if (json_is_object(v)) {
            json_object_foreach(v, k2, v2)
                printf(" %s=%lld", k2, (long long)json_integer_value(v2));
        } else if (json_is_string(v)) {
            printf(" %s", json_string_value(v));
        } else {
            char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            printf(" %s", s ? s : "?");
            free(s);
        }
        printf("\n");
    }
}

/* status NAME / info: the server's JSON, as it is or for people. */
static int cmd_json(const struct cli *c, const char *name)
{
    dlock_t *h = cli_connect(c, NULL, NULL);
    char *text = NULL;
    json_t *j;
    int rc;

    if (h == NULL)
        return CLI_EXIT_FAIL;
    rc = name ? dlock_status(h, name, &text) : dlock_info(h, &text);
    dlock_close(h);
    if (rc != 0) {
        cli_msg(c, "error", "%s%s%s: %s", name ? "status" : "info", name ? " " : "", name ? name : "",
                dlock_strerror(rc));
        return CLI_EXIT_FAIL;
    }
    if (c->json || (j = json_loads(text, 0, NULL)) == NULL) {
        printf("%s\n", text);
    } else {
        if (name)
            print_status(name, j);
        else
            print_info(j);
        json_decref(j);
    }
    free(text);
    return CLI_EXIT_OK;
}

static int cmd_ping(const struct cli *c)
{
    struct timespec t0, t1;
    dlock_t *h = cli_connect(c, NULL, NULL);
    double ms;
    int rc;

    if (h == NULL)
        return CLI_EXIT_FAIL;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = dlock_ping(h);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    dlock_close(h);
    if (rc != 0) {
        cli_msg(c, "error", "ping: %s", dlock_strerror(rc));
        return CLI_EXIT_FAIL;
    }
    ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (c->json)
        printf("{\"ok\":true,\"rtt_ms\":%.3f}\n", ms);
    else
        printf("PONG %.3f ms\n", ms);
    return CLI_EXIT_OK;
}

/* ---------------------------------------------------------------- the command line */

static int parse_dur(const char *s, int allow_inf, long long *ms)
{
    int64_t v;

    if (proto_duration(s, allow_inf, &v) < 0)
        return -1;
    *ms = v == PROTO_WAIT_INF ? DLOCK_WAIT_INF : v;
    return 0;
}

static int parse_int(const char *s, int min, int max, int *v)
{
    char *end;
    long n = strtol(s, &end, 10);

    if (*s == '\0' || *end != '\0' || n < min || n > max)
        return -1;
    *v = (int)n;
    return 0;
}

static const struct option longopts[] = {
    {"addr", required_argument, NULL, 'a'},  {"json", no_argument, NULL, 'j'},
    {"ttl", required_argument, NULL, 'T'},   {"name", required_argument, NULL, 'N'},
    {"wait", required_argument, NULL, 'w'},  {"nonblock", no_argument, NULL, 'n'},
    {"shared", no_argument, NULL, 's'},      {"semaphore", required_argument, NULL, 'S'},
    {"grace", required_argument, NULL, 'g'}, {"conflict-exit-code", required_argument, NULL, 'E'},
    {"adminpass", required_argument, NULL, 'P'}, {"limit", required_argument, NULL, 'l'},
    {"help", no_argument, NULL, 'h'},        {"version", no_argument, NULL, 'V'},
    {NULL, 0, NULL, 0},
};

/* Parses options up to the first operand. Returns 0, 1 for --help/--version done, or -1 on error. */
static int parse_opts(struct cli *c, int argc, char **argv)
{
    int ch;

    optind = 0; /* GNU: start afresh */
    while ((ch = getopt_long(argc, argv, "+a:jw:nsS:g:E:P:l:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'a': c->addr = optarg; break;
        case 'j': c->json = 1; break;
        case 'N': c->name = optarg; break;
        case 's': c->shared = 1; break;
        case 'n': c->wait_ms = 0; break;
        case 'T':
            if (parse_dur(optarg, 0, &c->ttl_ms) < 0 || c->ttl_ms <= 0)
                goto bad;
            break;
        case 'w':
            if (parse_dur(optarg, 1, &c->wait_ms) < 0)
                goto bad;
            break;
        case 'g':
            if (parse_dur(optarg, 0, &c->grace_ms) < 0)
                goto bad;
            break;
        case 'S':
            if (parse_int(optarg, 1, 1000000000, &c->limit) < 0)
                goto bad;
            break;
        case 'E':
            if (parse_int(optarg, 0, 255, &c->timeout_status) < 0)
                goto bad;
            break;
        case 'P': c->adminpass = optarg; break;
        case 'l':
            if (parse_int(optarg, 1, 1000, &c->limit_n) < 0)
                goto bad;
            break;
        case 'h': usage(stdout); return 1;
        case 'V': printf("dlock %s (libdlock %s)\n", PACKAGE_VERSION, dlock_version()); return 1;
        default: return -1;
        }
    }
    return 0;
bad:
    fprintf(stderr, "dlock: invalid value for %s: '%s'\n", argv[optind - 1], optarg);
    return -1;
}

int main(int argc, char **argv)
{
    struct cli c = {.wait_ms = DLOCK_WAIT_INF, .grace_ms = 5000, .timeout_status = CLI_EXIT_TIMEOUT, .limit_n = 100};
    const char *cmd;
    int rc, usage_status;

    if ((rc = parse_opts(&c, argc, argv)) != 0)
        return rc > 0 ? CLI_EXIT_OK : CLI_EXIT_USAGE;
    if (optind >= argc) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    cmd = argv[optind];
    argc -= optind;
    argv += optind;
    usage_status = strcmp(cmd, "run") == 0 ? CLI_EXIT_RUNFAIL : CLI_EXIT_USAGE;
    if ((rc = parse_opts(&c, argc, argv)) != 0) /* options after the command */
        return rc > 0 ? CLI_EXIT_OK : usage_status;
    argc -= optind;
    argv += optind;
    if (strcmp(cmd, "run") == 0 && argc >= 2) {
        char **rest = argv + 1;

        if (strcmp(rest[0], "--") == 0)
            rest++;
        if (*rest && proto_valid_name(argv[0]))
            return cli_run(&c, argv[0], rest);
    } else if (strcmp(cmd, "status") == 0 && argc == 1 && proto_valid_name(argv[0])) {
        return cmd_json(&c, argv[0]);
    } else if (strcmp(cmd, "info") == 0 && argc == 0) {
        return cmd_json(&c, NULL);
    } else if (strcmp(cmd, "ping") == 0 && argc == 0) {
        return cmd_ping(&c);
    } else if ((rc = cli_admin(&c, cmd, argc, argv)) >= 0) {
        return rc;
    }
    usage(stderr);
    return usage_status;
}
