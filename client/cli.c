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

#define REACH_TIMEOUT_MS 2000 /* to find out why an address did not answer */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: dlock [OPTIONS] run [RUN-OPTIONS] NAME... -- CMD [ARG ...]\n"
            "       dlock [OPTIONS] run [RUN-OPTIONS] -c 'SHELL COMMAND' NAME...\n"
            "       dlock [OPTIONS] run [RUN-OPTIONS] NAME [-c 'SHELL COMMAND' | CMD [ARG ...]]\n"
            "       dlock [OPTIONS] status NAME\n"
            "       dlock [OPTIONS] info\n"
            "       dlock [OPTIONS] ping\n"
            "       dlock [OPTIONS] ls [PATTERN] | sessions | kill SESSION | force NAME\n"
            "options: -a, --addr ADDR    dlockd address (HOST:PORT or unix:PATH; default $DLOCK_ADDR, else 127.0.0.1:7411)\n"
            "         -j, --json         output for scripts\n"
            "             --ttl DUR      session ttl      --name NAME   client name\n"
            "run:     -w, --wait DUR     wait at most DUR for the lock (default: no limit; a bare number is seconds); -n = --wait 0\n"
            "         -c, --command CMD  run CMD with /bin/sh -c\n"
            "         -v, --verbose      tell who holds the lock and the place in the queue while waiting\n"
            "         -s, --shared       shared (read) lock\n"
            "         -S, --semaphore N  take a permit of the semaphore NAME with limit N\n"
            "         -g, --grace DUR    after a lost lock, SIGKILL CMD this long after SIGTERM (default 5s)\n"
            "         -E, --conflict-exit-code N   exit status when the wait runs out (default 75)\n"
            "operator: -P, --adminpass PASS  the server's adminpass (default $DLOCK_ADMINPASS)\n"
            "         -l, --limit N      ls, sessions: entries at most (default 100, at most 1000)\n"
            "Several NAMEs are taken all or nothing. Durations: 500ms, 2s, 1m (500 is 500ms, except for --wait);\n"
            "--wait also takes inf. Temporary failures exit 75. See dlock(1).\n");
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

int cli_temporary(int rc)
{
    return rc == DLOCK_ERR_CONN || rc == DLOCK_ERR_BACKEND;
}

dlock_t *cli_connect(const struct cli *c, dlock_event_cb cb, void *arg, int *err)
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
    *err = rc;
    if (rc != 0) {
        const char *addr = c->addr ? c->addr : getenv("DLOCK_ADDR");
        char why[2048];

        addr = addr && *addr ? addr : "127.0.0.1:7411";
        if (rc == DLOCK_ERR_CONN)
            cli_why_unreachable(addr, REACH_TIMEOUT_MS, why, sizeof(why));
        else
            snprintf(why, sizeof(why), "%s: %s", addr, dlock_strerror(rc));
        cli_msg(c, "error", "cannot connect to dlockd: %s", why);
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
    char *text = NULL;
    json_t *j;
    int rc;
    dlock_t *h = cli_connect(c, NULL, NULL, &rc);

    if (h == NULL)
        return cli_temporary(rc) ? CLI_EXIT_TEMPFAIL : CLI_EXIT_FAIL;
    rc = name ? dlock_status(h, name, &text) : dlock_info(h, &text);
    dlock_close(h);
    if (rc != 0) {
        cli_msg(c, "error", "%s%s%s: %s", name ? "status" : "info", name ? " " : "", name ? name : "",
                dlock_strerror(rc));
        return cli_temporary(rc) ? CLI_EXIT_TEMPFAIL : CLI_EXIT_FAIL;
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

/* The backend state, address and error from INFO into state, addr and why ("" when up), and when the
 * failover gate opens into gated ("" when open); -1 when INFO fails. */
static int backend_state(dlock_t *h, char *state, size_t slen, char *addr, size_t alen, char *why, size_t wlen,
                         char *gated, size_t glen)
{
    char *text = NULL;
    const char *s;
    json_t *j;
    int rc = dlock_info(h, &text);

    if (rc != 0)
        return rc;
    j = json_loads(text, 0, NULL);
    free(text);
    if (json_unpack(j, "{s:s}", "backend", &s) < 0)
        s = "unknown";
    snprintf(state, slen, "%s", s);
    if (json_unpack(j, "{s:s}", "backend_addr", &s) < 0)
        s = "";
    snprintf(addr, alen, "%s", s);
    if (json_unpack(j, "{s:s}", "backend_error", &s) < 0)
        s = "";
    snprintf(why, wlen, "%s", s);
    if (json_unpack(j, "{s:s}", "gated_until", &s) < 0)
        s = "";
    snprintf(gated, glen, "%s", s);
    json_decref(j);
    return 0;
}

/* ping: the round trip, and the backend state; exit 75 unless the backend is up and the gate open. */
static int cmd_ping(const struct cli *c)
{
    struct timespec t0, t1;
    char state[32], addr[300], why[512], gated[64];
    double ms;
    int rc;
    dlock_t *h = cli_connect(c, NULL, NULL, &rc);

    if (h == NULL)
        return cli_temporary(rc) ? CLI_EXIT_TEMPFAIL : CLI_EXIT_FAIL;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = dlock_ping(h);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == 0)
        rc = backend_state(h, state, sizeof(state), addr, sizeof(addr), why, sizeof(why), gated, sizeof(gated));
    dlock_close(h);
    if (rc != 0) {
        cli_msg(c, "error", "ping: %s", dlock_strerror(rc));
        return cli_temporary(rc) ? CLI_EXIT_TEMPFAIL : CLI_EXIT_FAIL;
    }
    ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (c->json) {
        json_t *o = json_pack("{s:b, s:f, s:s, s:s, s:s, s:s}", "ok", 1, "rtt_ms", ms, "backend", state,
                              "backend_addr", addr, "backend_error", why, "gated_until", gated);
        char *s = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) : NULL;

        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(o);
    } else {
        printf("PONG %.3f ms, backend %s%s%s%s%s%s%s\n", ms, state, addr[0] ? " at " : "", addr, why[0] ? ": " : "",
               why, gated[0] ? ", gated until " : "", gated);
    }
    return strcmp(state, "up") == 0 && gated[0] == '\0' ? CLI_EXIT_OK : CLI_EXIT_TEMPFAIL;
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

/* --wait: as parse_dur, but a bare number is seconds (as flock -w), with up to 3 decimals. */
static int parse_wait(const char *s, long long *ms)
{
    size_t digits = strspn(s, "0123456789"), frac = 0;
    char buf[32];

    if (digits == 0 || digits > 9)
        return parse_dur(s, 1, ms);
    if (s[digits] == '.') {
        frac = strspn(s + digits + 1, "0123456789");
        if (frac == 0 || frac > 3 || s[digits + 1 + frac] != '\0')
            return -1;
    } else if (s[digits] != '\0') {
        return parse_dur(s, 1, ms);
    }
    snprintf(buf, sizeof(buf), "%.*s%.*s%.*s", (int)digits, s, (int)frac, s + digits + 1, (int)(3 - frac), "000");
    return parse_dur(buf, 1, ms);
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
    {"command", required_argument, NULL, 'c'}, {"verbose", no_argument, NULL, 'v'},
    {NULL, 0, NULL, 0},
};

/* Parses options up to the first operand. Returns 0, 1 for --help/--version done, or -1 on error. */
static int parse_opts(struct cli *c, int argc, char **argv)
{
    int ch;

    optind = 0; /* GNU: start afresh */
    while ((ch = getopt_long(argc, argv, "+a:jw:nsS:g:E:P:l:hVc:v", longopts, NULL)) != -1) {
        switch (ch) {
        case 'a': c->addr = optarg; break;
        case 'j': c->json = 1; break;
        case 'N': c->name = optarg; break;
        case 's': c->shared = 1; break;
        case 'n': c->wait_ms = 0; break;
        case 'c': c->command = optarg; break;
        case 'v': c->verbose = 1; break;
        case 'T':
            if (parse_dur(optarg, 0, &c->ttl_ms) < 0 || c->ttl_ms <= 0)
                goto bad;
            break;
        case 'w':
            if (parse_wait(optarg, &c->wait_ms) < 0)
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

/* The NAMEs and CMD of run: "NAME... -- CMD ARG...", "NAME... -c CMD", "-c CMD given, NAME...", or
 * "NAME CMD ARG...". Returns the number of names (0 when malformed); *cmd is NULL with -c. */
static int split_run(struct cli *c, int argc, char **argv, char ***cmd)
{
    int n = 0;

    *cmd = NULL;
    while (n < argc && strcmp(argv[n], "--") != 0 && strcmp(argv[n], "-c") != 0 && strcmp(argv[n], "--command") != 0)
        n++;
    if (n < argc && strcmp(argv[n], "--") == 0) {
        *cmd = argv + n + 1;
        return c->command == NULL && n + 1 < argc ? n : 0;
    }
    if (n < argc) { /* flock's NAME -c CMD */
        if (c->command != NULL || n + 2 != argc)
            return 0;
        c->command = argv[n + 1];
        return n;
    }
    if (c->command != NULL)
        return n;
    *cmd = argv + 1;
    return argc >= 2 ? 1 : 0;
}

static int run_operands(struct cli *c, int argc, char **argv)
{
    static char *shell[] = {"/bin/sh", "-c", NULL, NULL};
    char **cmd;
    int n = split_run(c, argc, argv, &cmd);

    for (int i = 0; i < n; i++)
        if (!proto_valid_name(argv[i])) {
            fprintf(stderr, "dlock: invalid lock name '%s'\n", argv[i]);
            return CLI_EXIT_RUNFAIL;
        }
    if (n == 0 || n > CLI_MAX_NAMES || (n > 1 && c->limit > 0)) {
        usage(stderr);
        return CLI_EXIT_RUNFAIL;
    }
    if (cmd == NULL) {
        shell[2] = (char *)c->command;
        cmd = shell;
    }
    return cli_run(c, (const char *const *)argv, n, cmd);
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
    if (strcmp(cmd, "run") == 0) {
        return run_operands(&c, argc, argv);
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
