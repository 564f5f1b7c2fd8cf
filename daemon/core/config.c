/* config.c - defaults, config file and command line, validated into a struct config. */
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "config.h"
#include "proto.h"

enum conf_type {
    CONF_ADDR, CONF_ADDR_LIST, CONF_OPT_ADDR, CONF_STR, CONF_DURATION, CONF_INT, CONF_OCTAL, CONF_BOOL,
    CONF_LEVEL, CONF_TARGET
};

#define LIVE 1    /* SIGHUP changes it at once */
#define RESTART 0 /* only a restart changes it */
#define SECRET 2  /* with LIVE or RESTART: its value is never shown (/status) */

#define MASK "********" /* shown instead of a secret that is set */

struct conf_key {
    const char *name;
    enum conf_type type;
    size_t offset;       /* of the field in struct config */
    size_t size;         /* bytes of the field */
    const char *deflt;   /* default, NULL for none */
    int64_t min, max;    /* bounds of numbers */
    int flags;           /* LIVE or RESTART, with SECRET */
};

#define FIELD(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)

#define DMAX PROTO_DURATION_MAX

static const struct conf_key keys[] = {
#define CONF_ROW(name, type, field, deflt, min, max, flags) { name, CONF_##type, FIELD(field), deflt, min, max, flags },
    CONFIG_KEYS(CONF_ROW)
#undef CONF_ROW
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))

int config_secret_eq(const char *want, const char *got)
{
    size_t wl = strlen(want), gl = strlen(got);
    unsigned char diff = wl != gl;

    for (size_t i = 0; i < gl; i++)
        diff |= (unsigned char)(got[i] ^ want[i % (wl ? wl : 1)]);
    return diff == 0;
}

int config_parse_addr(const char *s, struct addr *a)
{
    const char *colon;
    char *end;
    long port;

    memset(a, 0, sizeof(*a));
    if (strncmp(s, "unix:", 5) == 0) {
        if (s[5] == '\0' || strlen(s + 5) >= sizeof(a->path))
            return -1;
        a->is_unix = 1;
        strcpy(a->path, s + 5);
        return 0;
    }
    if ((colon = strrchr(s, ':')) == NULL || colon == s || (size_t)(colon - s) >= sizeof(a->host))
        return -1;
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || port < 1 || port > 65535)
        return -1;
    memcpy(a->host, s, (size_t)(colon - s));
    a->port = (int)port;
    return 0;
}

const char *config_addr_str(const struct addr *a, char *buf, size_t len)
{
    if (a->is_unix)
        snprintf(buf, len, "unix:%s", a->path);
    else
        snprintf(buf, len, "%s:%d", a->host, a->port);
    return buf;
}

static const struct conf_key *find_key(const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

/* Adds an address to a repeatable key; the first one given replaces the default. */
static const char *add_addr(struct addr_list *l, const struct conf_key *k, const char *v)
{
    if (!l->given) {
        l->n = 0;
        l->given = k->deflt != v;
    }
    if (l->n == CONFIG_MAX_ADDRS)
        return "too many addresses";
    if (config_parse_addr(v, &l->addr[l->n]))
        return "expected HOST:PORT or unix:PATH";
    l->n++;
    return NULL;
}

/* Stores one value. Returns NULL, or the reason it is bad. */
static const char *set_value(struct config *cfg, const struct conf_key *k, const char *v)
{
    void *field = (char *)cfg + k->offset;
    int64_t n = 0;
    char *end;

    switch (k->type) {
    case CONF_ADDR:
        if (field == &cfg->redis)
            cfg->redis_given = v != k->deflt;
        return config_parse_addr(v, field) ? "expected HOST:PORT or unix:PATH" : NULL;
    case CONF_OPT_ADDR:
        cfg->admin_on = *v != '\0';
        if (!cfg->admin_on)
            return NULL;
        return config_parse_addr(v, field) ? "expected HOST:PORT, or nothing to turn it off" : NULL;
    case CONF_BOOL:
        if (strcmp(v, "yes") != 0 && strcmp(v, "no") != 0)
            return "expected yes or no";
        *(int64_t *)field = strcmp(v, "yes") == 0;
        return NULL;
    case CONF_TARGET:
        if (strcmp(v, "stderr") != 0 && strcmp(v, "syslog") != 0)
            return "expected stderr or syslog";
        *(int *)field = strcmp(v, "syslog") == 0;
        return NULL;
    case CONF_OCTAL:
        errno = 0;
        n = strtoll(v, &end, 8);
        if (errno || *end || end == v)
            return "expected an octal mode such as 0660";
        break;
    case CONF_ADDR_LIST:
        return add_addr(field, k, v);
    case CONF_STR:
        free(*(char **)field);
        *(char **)field = *v ? strdup(v) : NULL;
        return NULL;
    case CONF_DURATION:
        if (proto_duration(v, 0, &n))
            return "bad duration";
        break;
    case CONF_INT:
        errno = 0;
        n = strtoll(v, &end, 10);
        if (errno || *end || end == v)
            return "expected an integer";
        break;
    case CONF_LEVEL:
        return log_parse_level(v, field) ? "expected debug, info, notice, warn or error" : NULL;
    }
    if (n < k->min || n > k->max)
        return "out of range";
    *(int64_t *)field = n;
    return NULL;
}

static int fail(char *err, size_t errlen, const char *where, const char *key, const char *why)
{
    snprintf(err, errlen, "%s: %s: %s", where, key, why);
    return -1;
}

static int load_file(struct config *cfg, const char *file, char *err, size_t errlen)
{
    char line[4096], where[512];
    FILE *f = fopen(file, "r");
    int lineno = 0;

    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", file, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        char *key = line, *val, *end;
        const struct conf_key *k;
        const char *why;

        lineno++;
        snprintf(where, sizeof(where), "%s:%d", file, lineno);
        while (isspace((unsigned char)*key))
            key++;
        if (*key == '#' || *key == '\0')
            continue;
        for (val = key; *val && !isspace((unsigned char)*val); val++)
            ;
        if (*val)
            *val++ = '\0';
        while (isspace((unsigned char)*val))
            val++;
        for (end = val + strlen(val); end > val && isspace((unsigned char)end[-1]); end--)
            ;
        *end = '\0';
        if ((k = find_key(key)) == NULL) {
            fclose(f);
            return fail(err, errlen, where, key, "unknown key");
        }
        if ((why = set_value(cfg, k, val)) != NULL) {
            fclose(f);
            return fail(err, errlen, where, key, why);
        }
    }
    fclose(f);
    return 0;
}

static int load_args(struct config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 0; i < argc; i += 2) {
        const struct conf_key *k;
        const char *why;

        if (strncmp(argv[i], "--", 2) != 0 || (k = find_key(argv[i] + 2)) == NULL)
            return fail(err, errlen, "command line", argv[i], "unknown option");
        if (i + 1 == argc)
            return fail(err, errlen, "command line", argv[i], "needs a value");
        if ((why = set_value(cfg, k, argv[i + 1])) != NULL)
            return fail(err, errlen, "command line", argv[i], why);
    }
    return 0;
}

int config_loopback(const struct sockaddr *sa)
{
    const struct in6_addr *in6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;

    if (sa->sa_family == AF_UNIX)
        return 1;
    if (sa->sa_family == AF_INET)
        return ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24 == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(in6) || (IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127);
    return 0;
}

/* 1 when a is a TCP address given as a number outside loopback. A host
 * name is judged by the address it is bound to (server.c, admin.c): it is
 * not looked up here, where a reload must not wait for DNS. */
static int is_public(const struct addr *a)
{
    struct addrinfo hints, *res;
    int public;

    memset(&hints, 0, sizeof(hints));
    hints.ai_flags = AI_NUMERICHOST;
    hints.ai_socktype = SOCK_STREAM;
    if (a->is_unix || getaddrinfo(a->host, NULL, &hints, &res) != 0)
        return 0;
    public = !config_loopback(res->ai_addr);
    freeaddrinfo(res);
    return public;
}

static int validate(const struct config *cfg, char *err, size_t errlen)
{
    int unguarded = cfg->protected_mode && cfg->requirepass == NULL;

    for (int i = 0; i < cfg->listen.n; i++)
        if (unguarded && is_public(&cfg->listen.addr[i]))
            return fail(err, errlen, "config", "listen",
                        "a non-loopback address needs requirepass (or protected-mode no)");
    if (unguarded && cfg->admin_on && is_public(&cfg->admin))
        return fail(err, errlen, "config", "admin-listen",
                    "a non-loopback address needs requirepass (or protected-mode no)");
    if (strpbrk(cfg->key_prefix ? cfg->key_prefix : "", "{} \t") || cfg->key_prefix == NULL)
        return fail(err, errlen, "config", "key-prefix", "must be non-empty, without braces or spaces");
    if (cfg->sentinels.n > 0 && cfg->sentinel_master == NULL)
        return fail(err, errlen, "config", "sentinel", "needs sentinel-master, the name the sentinels know the master by");
    if (cfg->sentinel_master && cfg->sentinels.n == 0)
        return fail(err, errlen, "config", "sentinel-master", "needs at least one sentinel HOST:PORT");
    if (cfg->sentinel_master && strpbrk(cfg->sentinel_master, " \t"))
        return fail(err, errlen, "config", "sentinel-master", "must be without spaces");
    if (cfg->cluster.n > 0 && (cfg->redis_given || cfg->sentinels.n > 0))
        return fail(err, errlen, "config", "cluster", cfg->redis_given ? "excludes redis: the seeds name the nodes"
                                                                       : "excludes sentinel: a cluster fails over by itself");
    for (int i = 0; i < cfg->cluster.n; i++)
        if (cfg->cluster.addr[i].is_unix)
            return fail(err, errlen, "config", "cluster", "expected HOST:PORT: nodes name each other by TCP address");
    if (cfg->session_ttl_min > cfg->session_ttl_max)
        return fail(err, errlen, "config", "session-ttl-min", "greater than session-ttl-max");
    if (cfg->session_ttl < cfg->session_ttl_min || cfg->session_ttl > cfg->session_ttl_max)
        return fail(err, errlen, "config", "session-ttl", "outside session-ttl-min..session-ttl-max");
    return 0;
}

static int load(struct config *cfg, const char *file, int argc, char **argv, char *err, size_t errlen)
{
    if (file && (cfg->file = strdup(file)) == NULL)
        return fail(err, errlen, "config", file, "out of memory");
    for (size_t i = 0; i < NKEYS; i++)
        if (keys[i].deflt && set_value(cfg, &keys[i], keys[i].deflt))
            return fail(err, errlen, "default", keys[i].name, "bad default");
    if (file && load_file(cfg, file, err, errlen))
        return -1;
    if (load_args(cfg, argc, argv, err, errlen))
        return -1;
    return validate(cfg, err, errlen);
}

int config_load(struct config *cfg, const char *file, int argc, char **argv, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof(*cfg));
    if (load(cfg, file, argc, argv, err, errlen) == 0)
        return 0;
    config_free(cfg);
    return -1;
}

void config_free(struct config *cfg)
{
    free(cfg->redis_password);
    free(cfg->redis_user);
    free(cfg->sentinel_master);
    free(cfg->sentinel_password);
    free(cfg->key_prefix);
    free(cfg->requirepass);
    free(cfg->adminpass);
    free(cfg->file);
    cfg->redis_user = cfg->sentinel_master = cfg->sentinel_password = NULL;
    cfg->redis_password = cfg->key_prefix = cfg->requirepass = cfg->adminpass = cfg->file = NULL;
}

static int same_str(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

/* 1 when key k has the same value in a and b. */
static int same(const struct conf_key *k, const struct config *a, const struct config *b)
{
    const void *fa = (const char *)a + k->offset, *fb = (const char *)b + k->offset;

    switch (k->type) {
    case CONF_ADDR_LIST: {
        const struct addr_list *la = fa, *lb = fb;
        return la->n == lb->n && memcmp(la->addr, lb->addr, sizeof(la->addr[0]) * (size_t)la->n) == 0;
    }
    case CONF_STR:
        return same_str(*(char *const *)fa, *(char *const *)fb);
    case CONF_OPT_ADDR:
        return a->admin_on == b->admin_on && memcmp(fa, fb, k->size) == 0;
    default:
        return memcmp(fa, fb, k->size) == 0;
    }
}

void config_apply_live(struct config *cur, struct config *fresh, char *restart, size_t len)
{
    size_t used = 0;

    restart[0] = '\0';
    for (size_t i = 0; i < NKEYS; i++) {
        const struct conf_key *k = &keys[i];
        void *fc = (char *)cur + k->offset, *ff = (char *)fresh + k->offset;

        if (same(k, cur, fresh))
            continue;
        if (!(k->flags & LIVE)) {
            used += (size_t)snprintf(restart + used, used < len ? len - used : 0, "%s%s", used ? ", " : "", k->name);
            continue;
        }
        if (k->type == CONF_STR) {
            char *tmp = *(char **)fc;
            *(char **)fc = *(char **)ff;
            *(char **)ff = tmp; /* freed with fresh */
        } else {
            memcpy(fc, ff, k->size);
        }
    }
}

/* ms as the largest unit that divides it: "1h", "30s", "500ms", "0". */
static void format_duration(int64_t ms, char *buf, size_t len)
{
    if (ms != 0 && ms % 3600000 == 0)
        snprintf(buf, len, "%lldh", (long long)(ms / 3600000));
    else if (ms != 0 && ms % 60000 == 0)
        snprintf(buf, len, "%lldm", (long long)(ms / 60000));
    else if (ms != 0 && ms % 1000 == 0)
        snprintf(buf, len, "%llds", (long long)(ms / 1000));
    else
        snprintf(buf, len, "%lld%s", (long long)ms, ms ? "ms" : "");
}

static void format_list(const struct addr_list *l, char *buf, size_t len)
{
    char one[300];
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < l->n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                                 config_addr_str(&l->addr[i], one, sizeof(one)));
}

/* The value of k in cfg as a config file would give it; "" for none. */
static void format_value(const struct config *cfg, const struct conf_key *k, char *buf, size_t len)
{
    const void *field = (const char *)cfg + k->offset;
    const char *str;

    switch (k->type) {
    case CONF_ADDR: config_addr_str(field, buf, len); break;
    case CONF_ADDR_LIST: format_list(field, buf, len); break;
    case CONF_OPT_ADDR:
        if (cfg->admin_on)
            config_addr_str(field, buf, len);
        else
            snprintf(buf, len, "%s", "");
        break;
    case CONF_STR:
        str = *(char *const *)field;
        snprintf(buf, len, "%s", str == NULL ? "" : (k->flags & SECRET) ? MASK : str);
        break;
    case CONF_DURATION: format_duration(*(const int64_t *)field, buf, len); break;
    case CONF_INT: snprintf(buf, len, "%lld", (long long)*(const int64_t *)field); break;
    case CONF_OCTAL: snprintf(buf, len, "%04llo", (unsigned long long)*(const int64_t *)field); break;
    case CONF_BOOL: snprintf(buf, len, "%s", *(const int64_t *)field ? "yes" : "no"); break;
    case CONF_LEVEL: snprintf(buf, len, "%s", log_level_name(*(const enum log_level *)field)); break;
    case CONF_TARGET: snprintf(buf, len, "%s", *(const int *)field ? "syslog" : "stderr"); break;
    }
}

void config_each(const struct config *cfg, config_each_cb *fn, void *arg)
{
    char value[CONFIG_VALUE_MAX];

    for (size_t i = 0; i < NKEYS; i++) {
        format_value(cfg, &keys[i], value, sizeof(value));
        fn(keys[i].name, value, arg);
    }
}

void config_help(FILE *f)
{
    fprintf(f, "config keys (in CONFIG-FILE as 'key value', on the command line as '--key value'):\n");
    for (size_t i = 0; i < NKEYS; i++)
        fprintf(f, "  %-22s default %-16s %s\n", keys[i].name,
                keys[i].deflt && *keys[i].deflt ? keys[i].deflt : "(none)",
                keys[i].flags & LIVE ? "SIGHUP applies it" : "needs a restart");
}
