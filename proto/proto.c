/* proto.c - splits, parses and formats dlockd protocol lines; no I/O, shared by daemon, client and tests. */
#include "proto.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ECHO_MAX 48 /* bytes of a bad token quoted back in an error message */

/* ---------------------------------------------------------------- tables */

static const char *const err_codes[PROTO_NERR] = {
    [PROTO_OK] = NULL,
    [PROTO_ESYNTAX] = "SYNTAX",
    [PROTO_EUNKNOWN] = "UNKNOWN",
    [PROTO_ETOOBIG] = "TOOBIG",
    [PROTO_ENOAUTH] = "NOAUTH",
    [PROTO_ENOSESSION] = "NOSESSION",
    [PROTO_ENOTHELD] = "NOTHELD",
    [PROTO_EWRONGTYPE] = "WRONGTYPE",
    [PROTO_EMISMATCH] = "MISMATCH",
    [PROTO_EDEADLOCK] = "DEADLOCK",
    [PROTO_ELIMIT] = "LIMIT",
    [PROTO_EBACKEND] = "BACKEND",
};

/* What a verb accepts. Positional tokens are names, except for AUTH (raw). */
struct verb_spec {
    const char *name;  /* upper case, as in the contract */
    int min_pos;       /* positional tokens at least */
    int max_pos;       /* positional tokens at most */
    int raw_pos;       /* 1: positionals are not names (AUTH's password) */
    unsigned flags;    /* PROTO_F_* the verb takes */
    unsigned opts;     /* PROTO_O_* the verb takes */
    unsigned required; /* PROTO_O_* that must be given */
};

#define O_LOCKER (PROTO_O_OWNER | PROTO_O_ID)

static const struct verb_spec verbs[VERB_NVERBS] = {
    [VERB_HELLO] = {"HELLO", 0, 0, 0, 0,
                    PROTO_O_TTL | PROTO_O_NAME | PROTO_O_SESSION | PROTO_O_SECRET | PROTO_O_AUTH, 0},
    [VERB_PING] = {"PING", 0, 0, 0, 0, 0, 0},
    [VERB_QUIT] = {"QUIT", 0, 0, 0, 0, 0, 0},
    [VERB_AUTH] = {"AUTH", 1, 1, 1, 0, 0, 0},
    [VERB_LOCK] = {"LOCK", 1, PROTO_MAX_NAMES, 0, PROTO_F_SHARED,
                   PROTO_O_WAIT | PROTO_O_LEASE | O_LOCKER, 0},
    [VERB_UNLOCK] = {"UNLOCK", 1, PROTO_MAX_NAMES, 0, PROTO_F_SHARED | PROTO_F_ALL, O_LOCKER, 0},
    [VERB_ACQUIRE] = {"ACQUIRE", 1, 1, 0, 0,
                      PROTO_O_LIMIT | PROTO_O_PERMITS | PROTO_O_WAIT | PROTO_O_LEASE | O_LOCKER,
                      PROTO_O_LIMIT},
    [VERB_RELEASE] = {"RELEASE", 1, 1, 0, 0, PROTO_O_PERMITS | O_LOCKER, 0},
    [VERB_LATCH] = {"LATCH", 1, 1, 0, 0, PROTO_O_COUNT | PROTO_O_TTL, PROTO_O_COUNT},
    [VERB_COUNTDOWN] = {"COUNTDOWN", 1, 1, 0, 0, PROTO_O_N, 0},
    [VERB_AWAIT] = {"AWAIT", 1, 1, 0, 0, PROTO_O_WAIT, 0},
    [VERB_STATUS] = {"STATUS", 1, 1, 0, 0, 0, 0},
    [VERB_INFO] = {"INFO", 0, 0, 0, 0, 0, 0},
    [VERB_LIST] = {"LIST", 0, 1, 0, 0, PROTO_O_LIMIT, 0},
    [VERB_SESSIONS] = {"SESSIONS", 0, 0, 0, 0, PROTO_O_LIMIT, 0},
    [VERB_KILL] = {"KILL", 1, 1, 0, 0, 0, 0},
    [VERB_FORCE] = {"FORCE", 1, 1, 0, 0, 0, 0},
};

static const struct {
    const char *name;
    unsigned bit;
} flags[] = {
    {"shared", PROTO_F_SHARED},
    {"all", PROTO_F_ALL},
};

enum opt_type {
    OPT_WAIT, /* duration, inf allowed, 0 allowed */
    OPT_DUR,  /* duration > 0, no inf */
    OPT_INT,  /* decimal integer >= min */
    OPT_STR,  /* printable string of at most PROTO_STR_MAX bytes */
    OPT_RAW,  /* any non-empty token (a password, a secret): never quoted back */
};

struct opt_spec {
    const char *key;    /* lower case, before '=' */
    unsigned bit;       /* PROTO_O_* */
    enum opt_type type;
    int64_t min;        /* OPT_INT: smallest value; OPT_STR: 0 if it may be empty */
    size_t off;         /* where the value goes in struct proto_req */
};

#define AT(field) offsetof(struct proto_req, field)

static const struct opt_spec opts[] = {
    {"wait", PROTO_O_WAIT, OPT_WAIT, 0, AT(wait_ms)},
    {"lease", PROTO_O_LEASE, OPT_DUR, 1, AT(lease_ms)},
    {"ttl", PROTO_O_TTL, OPT_DUR, 1, AT(ttl_ms)},
    {"owner", PROTO_O_OWNER, OPT_STR, 0, AT(owner)},
    {"name", PROTO_O_NAME, OPT_STR, 1, AT(client_name)},
    {"session", PROTO_O_SESSION, OPT_STR, 1, AT(session)},
    {"auth", PROTO_O_AUTH, OPT_RAW, 1, AT(auth)},
    {"secret", PROTO_O_SECRET, OPT_RAW, 1, AT(secret)},
    {"id", PROTO_O_ID, OPT_STR, 1, AT(id)},
    {"limit", PROTO_O_LIMIT, OPT_INT, 1, AT(limit)},
    {"permits", PROTO_O_PERMITS, OPT_INT, 1, AT(permits)},
    {"count", PROTO_O_COUNT, OPT_INT, 0, AT(count)},
    {"n", PROTO_O_N, OPT_INT, 1, AT(n)},
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---------------------------------------------------------------- codes and names */

const char *proto_err_code(enum proto_err e)
{
    if ((int)e < 0 || e >= PROTO_NERR)
        return NULL;
    return err_codes[e];
}

enum proto_err proto_err_from_code(const char *code)
{
    if (code == NULL)
        return PROTO_OK;
    for (int e = PROTO_OK + 1; e < PROTO_NERR; e++)
        if (strcmp(err_codes[e], code) == 0)
            return (enum proto_err)e;
    return PROTO_OK;
}

const char *proto_verb_name(enum proto_verb v)
{
    if ((int)v < 0 || v >= VERB_NVERBS)
        return NULL;
    return verbs[v].name;
}

/* ---------------------------------------------------------------- tokens */

static int is_sep(char c)
{
    return c == ' ' || c == '\t';
}

static int is_printable(unsigned char c)
{
    return c >= 0x21 && c <= 0x7e;
}

/* Returns the next token of *cur, NUL-terminated in place, or NULL at the end. */
static char *next_token(char **cur)
{
    char *p = *cur;

    while (is_sep(*p))
        p++;
    if (*p == '\0') {
        *cur = p;
        return NULL;
    }
    char *tok = p;
    while (*p != '\0' && !is_sep(*p))
        p++;
    if (*p != '\0')
        *p++ = '\0';
    *cur = p;
    return tok;
}

static void drop_cr(char *line)
{
    size_t len = strlen(line);

    if (len > 0 && line[len - 1] == '\r')
        line[len - 1] = '\0';
}

/* The first control byte of line other than TAB, or 0 when there is none. */
static unsigned char control_byte(const char *line)
{
    for (const unsigned char *p = (const unsigned char *)line; *p != '\0'; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            return *p;
    return 0;
}

/* 1 when s (after the '#') is 1-32 characters of [A-Za-z0-9_.-]. */
static int valid_tag(const char *s)
{
    size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-");

    return n >= 1 && n <= PROTO_TAG_MAX && s[n] == '\0';
}

int proto_valid_name(const char *s)
{
    size_t n = 0;

    if (s == NULL || s[0] == '}')
        return 0;
    for (; s[n] != '\0'; n++)
        if (n >= PROTO_NAME_MAX || !is_printable((unsigned char)s[n]) || s[n] == '=')
            return 0;
    return n >= 1;
}

/* 1 when s is 0..max bytes of 0x21-0x7E. */
static int valid_str(const char *s, size_t max)
{
    size_t n = 0;

    for (; s[n] != '\0'; n++)
        if (n >= max || !is_printable((unsigned char)s[n]))
            return 0;
    return 1;
}

/* ---------------------------------------------------------------- numbers */

/*
 * Reads the decimal digits at *s into *v, stopping at the first non-digit.
 * Fails on no digits or a value above max (checked before it can overflow).
 */
static int read_digits(const char **s, int64_t max, int64_t *v)
{
    const char *p = *s;
    int64_t x = 0;

    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        int d = *p - '0';
        if (x > (max - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *s = p;
    *v = x;
    return 0;
}

/* Decimal integer, no sign, at most 2^31-1. */
static int parse_int(const char *s, int64_t *v)
{
    return read_digits(&s, PROTO_DURATION_MAX, v) == 0 && *s == '\0' ? 0 : -1;
}

static const struct {
    const char *suffix;
    int64_t ms;
} units[] = {
    {"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 60 * 60 * 1000},
};

int proto_duration(const char *s, int allow_inf, int64_t *ms)
{
    int64_t v;

    if (s == NULL)
        return -1;
    if (strcmp(s, "inf") == 0) {
        if (!allow_inf)
            return -1;
        *ms = PROTO_WAIT_INF;
        return 0;
    }
    if (read_digits(&s, PROTO_DURATION_MAX, &v) < 0)
        return -1;
    for (size_t i = 0; i < NELEM(units); i++) {
        if (strcmp(s, units[i].suffix) != 0)
            continue;
        if (v > PROTO_DURATION_MAX / units[i].ms)
            return -1;
        *ms = v * units[i].ms;
        return 0;
    }
    return -1;
}

/* ---------------------------------------------------------------- request parser */

struct parse {
    struct proto_req *req;
    const struct verb_spec *vs;
    char *err;      /* caller's message buffer, may be NULL */
    size_t errlen;
    int named;      /* 1 once the names are over (a flag or option was seen) */
};

/*
 * Copies tok into out to quote it in a message: bytes outside 0x20-0x7E
 * become '?' (the message goes back on the wire), and a token longer than
 * ECHO_MAX is cut and ends in "...".
 */
static const char *echo(const char *tok, char out[ECHO_MAX + 4])
{
    size_t n = 0;

    for (; tok[n] != '\0' && n < ECHO_MAX; n++)
        out[n] = (unsigned char)tok[n] >= 0x20 && (unsigned char)tok[n] < 0x7f ? tok[n] : '?';
    strcpy(out + n, tok[n] != '\0' ? "..." : "");
    return out;
}

static enum proto_err fail(struct parse *p, enum proto_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum proto_err fail(struct parse *p, enum proto_err e, const char *fmt, ...)
{
    va_list ap;

    if (p->err != NULL && p->errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(p->err, p->errlen, fmt, ap);
        va_end(ap);
    }
    return e;
}

/* Fails with "<what> '<token>'". */
static enum proto_err fail_tok(struct parse *p, const char *what, const char *tok)
{
    char buf[ECHO_MAX + 4];

    return fail(p, PROTO_ESYNTAX, "%s '%s'", what, echo(tok, buf));
}

static void req_init(struct proto_req *req)
{
    memset(req, 0, sizeof(*req));
    req->verb = VERB_NVERBS;
    req->owner = "";
    req->permits = 1;
    req->n = 1;
}

static const struct verb_spec *find_verb(const char *s, enum proto_verb *v)
{
    for (int i = 0; i < VERB_NVERBS; i++) {
        if (strcasecmp(verbs[i].name, s) == 0) {
            *v = (enum proto_verb)i;
            return &verbs[i];
        }
    }
    return NULL;
}

static unsigned find_flag(const char *s)
{
    for (size_t i = 0; i < NELEM(flags); i++)
        if (strcmp(flags[i].name, s) == 0)
            return flags[i].bit;
    return 0;
}

static const struct opt_spec *find_opt(const char *key)
{
    for (size_t i = 0; i < NELEM(opts); i++)
        if (strcmp(opts[i].key, key) == 0)
            return &opts[i];
    return NULL;
}

/* Checks val against the option's type and stores it into the request. */
static enum proto_err store_opt(struct parse *p, const struct opt_spec *o, const char *val, const char *tok)
{
    char *field = (char *)p->req + o->off;
    int64_t v;

    switch (o->type) {
    case OPT_WAIT:
    case OPT_DUR:
        if (proto_duration(val, o->type == OPT_WAIT, &v) < 0 || (v != PROTO_WAIT_INF && v < o->min))
            return fail_tok(p, "bad duration", tok);
        memcpy(field, &v, sizeof(v));
        return PROTO_OK;
    case OPT_INT:
        if (parse_int(val, &v) < 0 || v < o->min)
            return fail_tok(p, "bad number", tok);
        memcpy(field, &v, sizeof(v));
        return PROTO_OK;
    case OPT_STR:
        if ((o->min > 0 && *val == '\0') || !valid_str(val, PROTO_STR_MAX))
            return fail_tok(p, "bad value", tok);
        break;
    case OPT_RAW:
        if (*val == '\0')
            return fail_tok(p, "bad value", tok);
        break;
    }
    memcpy(field, &val, sizeof(val));
    return PROTO_OK;
}

/* A key=value token; eq points at its first '='. */
static enum proto_err parse_option(struct parse *p, char *tok, char *eq)
{
    const struct opt_spec *o;
    enum proto_err e;

    *eq = '\0';
    o = find_opt(tok);
    if (o == NULL)
        e = fail_tok(p, "unknown option", tok);
    else if (!(p->vs->opts & o->bit))
        e = fail(p, PROTO_ESYNTAX, "%s does not take option '%s'", p->vs->name, o->key);
    else
        e = PROTO_OK;
    *eq = '=';
    if (e != PROTO_OK)
        return e;
    if (p->req->has & o->bit)
        return fail(p, PROTO_ESYNTAX, "duplicate option '%s'", o->key);
    if ((e = store_opt(p, o, eq + 1, tok)) != PROTO_OK)
        return e;
    p->req->has |= o->bit;
    p->named = 1;
    return PROTO_OK;
}

static enum proto_err add_positional(struct parse *p, char *tok)
{
    struct proto_req *req = p->req;
    char buf[ECHO_MAX + 4];

    if (req->nnames >= p->vs->max_pos && p->vs->max_pos <= 1)
        return fail_tok(p, "unexpected argument", tok);
    if (req->nnames >= p->vs->max_pos)
        return fail(p, PROTO_ESYNTAX, "too many names (at most %d) at '%s'", p->vs->max_pos, echo(tok, buf));
    if (!p->vs->raw_pos) {
        if (strchr(tok, '=') != NULL)
            return fail_tok(p, "missing name before", tok);
        if (!proto_valid_name(tok))
            return fail_tok(p, "bad name", tok);
        /* The same name twice would make an all-or-nothing request ambiguous. */
        for (int i = 0; i < req->nnames; i++)
            if (strcmp(req->names[i], tok) == 0)
                return fail_tok(p, "duplicate name", tok);
    }
    req->names[req->nnames++] = tok;
    return PROTO_OK;
}

/* A bare word: a flag of the verb, else a name while names are still allowed. */
static enum proto_err parse_bare(struct parse *p, char *tok)
{
    unsigned bit = find_flag(tok) & p->vs->flags;

    if (bit == 0) {
        if (p->named)
            return fail_tok(p, "unexpected argument", tok);
        return add_positional(p, tok);
    }
    if (p->req->flags & bit)
        return fail_tok(p, "duplicate flag", tok);
    p->req->flags |= bit;
    p->named = 1;
    return PROTO_OK;
}

static enum proto_err parse_arg(struct parse *p, char *tok, int first)
{
    char *eq;

    /* The first token after the verb is always a positional, even "shared" or "a=b",
     * unless the positional is optional (LIST's pattern). */
    if (first && p->vs->min_pos > 0)
        return add_positional(p, tok);
    if ((eq = strchr(tok, '=')) != NULL)
        return parse_option(p, tok, eq);
    return parse_bare(p, tok);
}

static enum proto_err check_complete(struct parse *p)
{
    if (p->req->nnames < p->vs->min_pos)
        return fail(p, PROTO_ESYNTAX, "missing %s", p->vs->raw_pos ? "argument" : "name");
    unsigned missing = p->vs->required & ~p->req->has;
    for (size_t i = 0; missing != 0 && i < NELEM(opts); i++)
        if (missing & opts[i].bit)
            return fail(p, PROTO_ESYNTAX, "missing option '%s'", opts[i].key);
    return PROTO_OK;
}

/* Reads the optional #TAG and the verb. *tok is the first token; on return the verb token. */
static enum proto_err parse_head(struct parse *p, char **cur, char **tok)
{
    char buf[ECHO_MAX + 4];

    if ((*tok)[0] == '#') {
        if (!valid_tag(*tok + 1))
            return fail_tok(p, "bad tag", *tok);
        memcpy(p->req->tag, *tok + 1, strlen(*tok + 1) + 1);
        if ((*tok = next_token(cur)) == NULL)
            return fail(p, PROTO_ESYNTAX, "missing verb");
    }
    p->vs = find_verb(*tok, &p->req->verb);
    if (p->vs == NULL)
        return fail(p, PROTO_EUNKNOWN, "unknown verb '%s'", echo(*tok, buf));
    return PROTO_OK;
}

enum proto_err proto_parse(char *line, struct proto_req *req, char *err, size_t errlen)
{
    struct parse p = {req, NULL, err, errlen, 0};
    char *cur = line;
    char *tok;
    enum proto_err e;
    unsigned char bad;

    req_init(req);
    if (err != NULL && errlen > 0)
        err[0] = '\0';
    drop_cr(line);
    bad = control_byte(line);
    if ((tok = next_token(&cur)) == NULL)
        return PROTO_OK;
    e = parse_head(&p, &cur, &tok);
    /* After the head, so that the error carries the tag when there is one. */
    if (bad != 0)
        return fail(&p, PROTO_ESYNTAX, "control byte 0x%02x in request", bad);
    if (e != PROTO_OK)
        return e;
    for (int first = 1; (tok = next_token(&cur)) != NULL; first = 0)
        if ((e = parse_arg(&p, tok, first)) != PROTO_OK)
            return e;
    return check_complete(&p);
}

enum proto_err proto_parse_len(char *line, size_t len, struct proto_req *req, char *err, size_t errlen)
{
    int nul = memchr(line, '\0', len) != NULL;
    enum proto_err e = proto_parse(line, req, err, errlen);

    /* A C string ends at the NUL: what follows it would be lost, not refused. */
    if (nul && err != NULL && errlen > 0)
        snprintf(err, errlen, "NUL byte in request");
    return nul ? PROTO_ESYNTAX : e;
}

/* ---------------------------------------------------------------- line splitter */

void proto_lines_init(struct proto_lines *pl, size_t max)
{
    memset(pl, 0, sizeof(*pl));
    pl->max = max;
}

void proto_lines_free(struct proto_lines *pl)
{
    free(pl->buf);
    memset(pl, 0, sizeof(*pl));
}

/* Makes room for more bytes after the pending ones, dropping returned lines first. */
static int lines_reserve(struct proto_lines *pl, size_t more)
{
    if (pl->off > 0) {
        memmove(pl->buf, pl->buf + pl->off, pl->len);
        pl->off = 0;
    }
    if (more > SIZE_MAX / 2 - pl->len)
        return -1;
    if (pl->len + more <= pl->cap)
        return 0;
    size_t cap = pl->cap > 0 ? pl->cap : 256;
    while (cap < pl->len + more)
        cap *= 2;
    char *buf = realloc(pl->buf, cap);
    if (buf == NULL)
        return -1;
    pl->buf = buf;
    pl->cap = cap;
    return 0;
}

int proto_lines_feed(struct proto_lines *pl, const char *data, size_t len)
{
    if (len == 0)
        return 0;
    if (lines_reserve(pl, len) < 0)
        return -1;
    memcpy(pl->buf + pl->len, data, len);
    pl->len += len;
    return 0;
}

long proto_lines_next(struct proto_lines *pl, char *out, size_t outcap)
{
    char *start, *nl = NULL;

    if (pl->len == 0)
        return pl->max == 0 ? -2 : -1;
    start = pl->buf + pl->off;
    if (pl->len > pl->scanned)
        nl = memchr(start + pl->scanned, '\n', pl->len - pl->scanned);
    if (nl == NULL) {
        pl->scanned = pl->len;
        /* max bytes without '\n' can never become a line of at most max bytes. */
        return pl->len >= pl->max ? -2 : -1;
    }
    size_t total = (size_t)(nl - start) + 1; /* with the '\n' */
    if (total > pl->max) {
        pl->scanned = (size_t)(nl - start);
        return -2;
    }
    size_t n = total - 1;
    if (n > 0 && start[n - 1] == '\r')
        n--;
    if (n + 1 > outcap)
        return -2;
    memcpy(out, start, n);
    out[n] = '\0';
    pl->off += total;
    pl->len -= total;
    pl->scanned = 0;
    if (pl->len == 0)
        pl->off = 0;
    return (long)n;
}

/* ---------------------------------------------------------------- formatters */

/* Appends s at *n; -1 when it does not fit with room for a NUL. */
static int put(char *buf, size_t cap, size_t *n, const char *s)
{
    size_t len = strlen(s);

    if (len >= cap - *n)
        return -1;
    memcpy(buf + *n, s, len + 1);
    *n += len;
    return 0;
}

/* Formats "[#tag ]word1[ word2][ text]\n"; a newline inside text becomes a space. */
static int fmt_line(char *buf, size_t cap, const char *tag, const char *word1, const char *word2,
                    const char *fmt, va_list ap)
{
    size_t n = 0;

    if (buf == NULL || cap == 0)
        return -1;
    if (tag != NULL && *tag != '\0' && (put(buf, cap, &n, "#") < 0 || put(buf, cap, &n, tag) < 0 ||
                                        put(buf, cap, &n, " ") < 0))
        return -1;
    if (put(buf, cap, &n, word1) < 0)
        return -1;
    if (word2 != NULL && (put(buf, cap, &n, " ") < 0 || put(buf, cap, &n, word2) < 0))
        return -1;
    if (fmt != NULL && *fmt != '\0') {
        if (put(buf, cap, &n, " ") < 0)
            return -1;
        int m = vsnprintf(buf + n, cap - n, fmt, ap);
        if (m < 0 || (size_t)m >= cap - n)
            return -1;
        for (char *c = buf + n; *c != '\0'; c++)
            if (*c == '\n' || *c == '\r')
                *c = ' ';
        n = m == 0 ? n - 1 : n + (size_t)m;
    }
    buf[n] = '\0';
    if (put(buf, cap, &n, "\n") < 0)
        return -1;
    return (int)n;
}

int proto_vfmt_reply(char *buf, size_t cap, const char *tag, const char *status, const char *fmt, va_list ap)
{
    return fmt_line(buf, cap, tag, status, NULL, fmt, ap);
}

int proto_fmt_reply(char *buf, size_t cap, const char *tag, const char *status, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = proto_vfmt_reply(buf, cap, tag, status, fmt, ap);
    va_end(ap);
    return n;
}

int proto_vfmt_err(char *buf, size_t cap, const char *tag, enum proto_err e, const char *fmt, va_list ap)
{
    const char *code = proto_err_code(e);

    if (code == NULL)
        return -1;
    return fmt_line(buf, cap, tag, "ERR", code, fmt, ap);
}

int proto_fmt_err(char *buf, size_t cap, const char *tag, enum proto_err e, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = proto_vfmt_err(buf, cap, tag, e, fmt, ap);
    va_end(ap);
    return n;
}

/* ---------------------------------------------------------------- reply parser */

static int is_status(const char *s)
{
    return strcmp(s, "OK") == 0 || strcmp(s, "BUSY") == 0 || strcmp(s, "TIMEOUT") == 0 ||
           strcmp(s, "ERR") == 0;
}

/* An event word: one or more upper-case letters. */
static int is_event_word(const char *s)
{
    size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ");

    return n > 0 && s[n] == '\0';
}

static char *skip_sep(char *p)
{
    while (is_sep(*p))
        p++;
    return p;
}

/* The rest of the line, without separators at either end. */
static char *rest_of_line(char *cur)
{
    char *s = skip_sep(cur);
    size_t len = strlen(s);

    while (len > 0 && is_sep(s[len - 1]))
        s[--len] = '\0';
    return s;
}

/* "ERR CODE text": an unknown CODE makes the line no reply of this protocol version. */
static int parse_err_reply(struct proto_reply *r, char *cur)
{
    char *code = next_token(&cur);

    if (code == NULL || (r->err = proto_err_from_code(code)) == PROTO_OK)
        return -1;
    r->text = rest_of_line(cur);
    return 0;
}

/* [arg] key=value ...: one bare word is allowed, before the pairs. */
static int parse_kvs(struct proto_reply *r, char *cur)
{
    char *tok;

    while ((tok = next_token(&cur)) != NULL) {
        char *eq = strchr(tok, '=');
        if (eq == NULL) {
            if (r->arg != NULL || r->nkv > 0)
                return -1;
            r->arg = tok;
            continue;
        }
        if (eq == tok || r->nkv >= PROTO_MAX_KV)
            return -1;
        *eq = '\0';
        r->keys[r->nkv] = tok;
        r->vals[r->nkv++] = eq + 1;
    }
    return 0;
}

int proto_parse_reply(char *line, struct proto_reply *r)
{
    char *cur = line;
    char *tok;

    memset(r, 0, sizeof(*r));
    drop_cr(line);
    if ((tok = next_token(&cur)) == NULL)
        return -1;
    if (tok[0] == '#') {
        if (!valid_tag(tok + 1))
            return -1;
        memcpy(r->tag, tok + 1, strlen(tok + 1) + 1);
        if ((tok = next_token(&cur)) == NULL)
            return -1;
    }
    if (strcmp(tok, "*") == 0) {
        r->event = 1;
        if ((tok = next_token(&cur)) == NULL || !is_event_word(tok))
            return -1;
    } else if (!is_status(tok)) {
        return -1;
    }
    r->status = tok;
    if (!r->event && strcmp(tok, "ERR") == 0)
        return parse_err_reply(r, cur);
    if (*skip_sep(cur) == '{') {
        r->text = rest_of_line(cur);
        return 0;
    }
    return parse_kvs(r, cur);
}

const char *proto_reply_get(const struct proto_reply *r, const char *key)
{
    for (int i = 0; i < r->nkv; i++)
        if (strcmp(r->keys[i], key) == 0)
            return r->vals[i];
    return NULL;
}
