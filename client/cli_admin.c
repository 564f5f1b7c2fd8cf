/* cli_admin.c - dlock ls, sessions, kill and force: the operator verbs over a connection of their own,
 * authenticated with the admin password (--adminpass, else $DLOCK_ADMINPASS). */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "proto.h"

#define ADMIN_REPLY_MAX (4 << 20) /* bytes of one reply line: LIST of 1000 long names fits */
#define ADMIN_TIMEOUT_S 10        /* seconds a connect, send or reply may take */

/* Connects to one address, HOST:PORT or unix:PATH. Returns the socket, or -1. */
static int dial_one(const char *addr)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
    struct timeval tv = {ADMIN_TIMEOUT_S, 0};
    char host[256];
    const char *colon = strrchr(addr, ':');
    int fd = -1;

    if (strncmp(addr, "unix:", 5) == 0) {
        struct sockaddr_un sun = {.sun_family = AF_UNIX};

        if (strlen(addr + 5) >= sizeof(sun.sun_path) || (fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0)
            return -1;
        memcpy(sun.sun_path, addr + 5, strlen(addr + 5) + 1);
        if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
            close(fd);
            return -1;
        }
    } else {
        if (colon == NULL || (size_t)(colon - addr) >= sizeof(host))
            return -1;
        snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
        if (host[0] == '[' && host[strlen(host) - 1] == ']') {
            memmove(host, host + 1, strlen(host));
            host[strlen(host) - 1] = '\0';
        }
        if (getaddrinfo(host, colon + 1, &hints, &res) != 0)
            return -1;
        for (ai = res; ai && fd < 0; ai = ai->ai_next) {
            if ((fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol)) < 0)
                continue;
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
                close(fd);
                fd = -1;
            }
        }
        freeaddrinfo(res);
    }
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    return fd;
}

/* Connects to the first address of the comma-separated list that answers. Returns the socket, or -1. */
static int dial(const char *list)
{
    char *copy = strdup(list), *save = NULL;
    int fd = -1;

    for (char *a = copy ? strtok_r(copy, ",", &save) : NULL; a && fd < 0; a = strtok_r(NULL, ",", &save))
        fd = dial_one(a);
    free(copy);
    return fd;
}

/* Sends one line. Returns 0, or -1. */
static int send_line(int fd, const char *line)
{
    size_t len = strlen(line);

    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, line + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            return -1;
        off += (size_t)n;
    }
    return send(fd, "\n", 1, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

/* Reads the next reply line (events are skipped) into a malloc'd string; NULL when none came. */
static char *read_reply(int fd, struct proto_lines *pl)
{
    char buf[65536], *line = malloc(ADMIN_REPLY_MAX + 1);
    long n;

    while (line) {
        if ((n = proto_lines_next(pl, line, ADMIN_REPLY_MAX + 1)) >= 0) {
            if (line[0] != '*')
                return line;
            continue;
        }
        ssize_t got = n == -1 ? recv(fd, buf, sizeof(buf), 0) : -1;
        if (got <= 0 || proto_lines_feed(pl, buf, (size_t)got) < 0)
            break;
    }
    free(line);
    return NULL;
}

/* The admin password: --adminpass, else $DLOCK_ADMINPASS; NULL for none. */
static const char *adminpass(const struct cli *c)
{
    const char *pw = c->adminpass ? c->adminpass : getenv("DLOCK_ADMINPASS");

    return pw && *pw ? pw : NULL;
}

/* AUTH with the admin password on fd. Returns 0, or -1 after saying why not. */
static int authenticate(const struct cli *c, int fd, struct proto_lines *pl, const char *pw)
{
    char *auth = NULL, *line = NULL;
    int ok;

    ok = asprintf(&auth, "AUTH %s", pw) >= 0 && send_line(fd, auth) == 0 && (line = read_reply(fd, pl)) != NULL &&
         strcmp(line, "OK") == 0;
    if (!ok)
        cli_msg(c, "error", "the admin password was refused%s%s", line ? ": " : "", line ? line : "");
    free(auth);
    free(line);
    return ok ? 0 : -1;
}

/* Sends request on fd and returns its OK reply parsed into r (pointing into the returned
 * string, which the caller frees); NULL after saying why not. */
static char *exchange(const struct cli *c, int fd, struct proto_lines *pl, const char *request, struct proto_reply *r)
{
    char *line = NULL;

    if (send_line(fd, request) < 0 || (line = read_reply(fd, pl)) == NULL) {
        cli_msg(c, "error", "no reply from the server");
        return NULL;
    }
    if (proto_parse_reply(line, r) == 0 && r->err == PROTO_OK && strcmp(r->status, "OK") == 0)
        return line;
    cli_msg(c, "error", "%s%s", r->text ? r->text : line,
            r->err == PROTO_ENOAUTH ? " (the operator verbs need the admin password: --adminpass or $DLOCK_ADMINPASS)"
                                    : "");
    free(line);
    return NULL;
}

/* Connects, authenticates when a password is known, and returns the reply to request (see exchange). */
static char *ask(const struct cli *c, const char *request, struct proto_reply *r)
{
    const char *addr = c->addr ? c->addr : getenv("DLOCK_ADDR"), *pw = adminpass(c);
    struct proto_lines pl;
    char *line = NULL;
    int fd;

    if (addr == NULL || *addr == '\0')
        addr = "127.0.0.1:7411";
    if ((fd = dial(addr)) < 0) {
        cli_msg(c, "error", "cannot connect to %s", addr);
        return NULL;
    }
    proto_lines_init(&pl, ADMIN_REPLY_MAX + 1);
    if (pw == NULL || authenticate(c, fd, &pl, pw) == 0)
        line = exchange(c, fd, &pl, request, r);
    proto_lines_free(&pl);
    close(fd);
    return line;
}

static long long num(json_t *o, const char *key)
{
    return (long long)json_integer_value(json_object_get(o, key));
}

static const char *str(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));

    return s ? s : "";
}

static void print_names(json_t *doc)
{
    json_t *e;
    size_t i;

    printf("%-32s %-10s %8s %8s\n", "NAME", "TYPE", "HOLDERS", "WAITERS");
    json_array_foreach(json_object_get(doc, "names"), i, e)
        printf("%-32s %-10s %8lld %8lld\n", str(e, "name"), str(e, "type"), num(e, "holders"), num(e, "waiters"));
}

static void print_sessions(json_t *doc)
{
    json_t *e;
    size_t i;

    printf("%-16s %-24s %-24s %9s %6s %6s\n", "SESSION", "CLIENT", "PEER", "TTL_MS", "HOLDS", "WAITS");
    json_array_foreach(json_object_get(doc, "sessions"), i, e)
        printf("%-16s %-24s %-24s %9lld %6lld %6lld\n", str(e, "session"), str(e, "client"),
               *str(e, "peer") ? str(e, "peer") : "(detached)", num(e, "ttl_ms"), num(e, "holds"), num(e, "waits"));
}

/* ls and sessions: a JSON document, as it is or as a table. */
static int census(const struct cli *c, const char *request, void (*print)(json_t *doc))
{
    struct proto_reply r;
    char *line = ask(c, request, &r);
    json_t *doc;

    if (line == NULL)
        return CLI_EXIT_FAIL;
    if (c->json || (doc = json_loads(r.text, 0, NULL)) == NULL) {
        printf("%s\n", r.text ? r.text : "");
    } else {
        print(doc);
        if (num(doc, "more"))
            cli_msg(c, "more", "more than %d entries: narrow the pattern or raise --limit", c->limit_n);
        json_decref(doc);
    }
    free(line);
    return CLI_EXIT_OK;
}

/* kill and force. */
static int act(const struct cli *c, const char *verb, const char *arg)
{
    struct proto_reply r;
    char request[512], *line;
    const char *count;

    snprintf(request, sizeof(request), "%s %s", verb, arg);
    if ((line = ask(c, request, &r)) == NULL)
        return CLI_EXIT_FAIL;
    count = proto_reply_get(&r, "count");
    if (c->json)
        printf("{\"ok\":true%s%s}\n", count ? ",\"count\":" : "", count ? count : "");
    else if (count)
        printf("%s: %s hold%s freed\n", arg, count, strcmp(count, "1") == 0 ? "" : "s");
    else
        printf("session %s ended\n", arg);
    free(line);
    return CLI_EXIT_OK;
}

int cli_admin(const struct cli *c, const char *cmd, int argc, char **argv)
{
    char request[512];

    if (strcmp(cmd, "ls") == 0 && argc <= 1 && (argc == 0 || proto_valid_name(argv[0]))) {
        snprintf(request, sizeof(request), "LIST%s%s limit=%d", argc ? " " : "", argc ? argv[0] : "", c->limit_n);
        return census(c, request, print_names);
    }
    if (strcmp(cmd, "sessions") == 0 && argc == 0) {
        snprintf(request, sizeof(request), "SESSIONS limit=%d", c->limit_n);
        return census(c, request, print_sessions);
    }
    if (strcmp(cmd, "kill") == 0 && argc == 1 && proto_valid_name(argv[0]))
        return act(c, "KILL", argv[0]);
    if (strcmp(cmd, "force") == 0 && argc == 1 && proto_valid_name(argv[0]))
        return act(c, "FORCE", argv[0]);
    return -1;
}
