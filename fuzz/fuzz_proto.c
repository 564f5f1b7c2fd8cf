/* fuzz_proto.c - libFuzzer harness for proto/: the line splitter fed in chunks of varying size
 * (checked against a one-pass reference splitter), the request parser (checked by re-formatting
 * every parsed request and parsing it again), and the reply formatters and reply parser
 * (everything the formatters write must parse back to what was formatted).
 *
 * Input: byte 0 picks max-line, byte 1 seeds the chunk sizes, the rest is the byte stream a
 * client would send. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define FAIL(...) fail_at(__LINE__, __VA_ARGS__)

static void fail_at(int line, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

static void fail_at(int line, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "fuzz_proto.c:%d: ", line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

/* A small deterministic PRNG for chunk sizes (xorshift32). */
static uint32_t next_rand(uint32_t *s)
{
    uint32_t x = *s ? *s : 0x9e3779b9u;

    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *s = x;
}

static size_t pick_max(uint8_t b)
{
    static const size_t maxes[] = { 1, 2, 3, 8, 16, 64, 512, PROTO_LINE_DEFAULT };

    return maxes[b % (sizeof(maxes) / sizeof(maxes[0]))];
}

/* ---------------------------------------------------------------- requests */

static const char *const flag_names[] = { "shared", "all" };

/* Appends " key=val" to a line being built; returns -1 when it does not fit. */
static int append(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int append(char *buf, size_t cap, size_t *n, const char *fmt, ...)
{
    va_list ap;
    int m;

    va_start(ap, fmt);
    m = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (m < 0 || (size_t)m >= cap - *n)
        return -1;
    *n += (size_t)m;
    return 0;
}

/* Formats a parsed request back into a canonical line. Returns 0, or -1 when it is too long. */
static int format_req(const struct proto_req *r, char *buf, size_t cap)
{
    size_t n = 0;
    int rc = 0;

    if (r->tag[0])
        rc |= append(buf, cap, &n, "#%s ", r->tag);
    rc |= append(buf, cap, &n, "%s", proto_verb_name(r->verb));
    for (int i = 0; i < r->nnames && rc == 0; i++)
        rc |= append(buf, cap, &n, " %s", r->names[i]);
    for (unsigned i = 0; i < 2; i++)
        if (r->flags & (1u << i))
            rc |= append(buf, cap, &n, " %s", flag_names[i]);
    if (r->has & PROTO_O_WAIT) {
        if (r->wait_ms == PROTO_WAIT_INF)
            rc |= append(buf, cap, &n, " wait=inf");
        else
            rc |= append(buf, cap, &n, " wait=%lldms", (long long)r->wait_ms);
    }
    if (r->has & PROTO_O_LEASE)
        rc |= append(buf, cap, &n, " lease=%lld", (long long)r->lease_ms);
    if (r->has & PROTO_O_TTL)
        rc |= append(buf, cap, &n, " ttl=%lldms", (long long)r->ttl_ms);
    if (r->has & PROTO_O_OWNER)
        rc |= append(buf, cap, &n, " owner=%s", r->owner);
    if (r->has & PROTO_O_NAME)
        rc |= append(buf, cap, &n, " name=%s", r->client_name);
    if (r->has & PROTO_O_SESSION)
        rc |= append(buf, cap, &n, " session=%s", r->session);
    if (r->has & PROTO_O_SECRET)
        rc |= append(buf, cap, &n, " secret=%s", r->secret);
    if (r->has & PROTO_O_AUTH)
        rc |= append(buf, cap, &n, " auth=%s", r->auth);
    if (r->has & PROTO_O_ID)
        rc |= append(buf, cap, &n, " id=%s", r->id);
    if (r->has & PROTO_O_LIMIT)
        rc |= append(buf, cap, &n, " limit=%lld", (long long)r->limit);
    if (r->has & PROTO_O_PERMITS)
        rc |= append(buf, cap, &n, " permits=%lld", (long long)r->permits);
    if (r->has & PROTO_O_COUNT)
        rc |= append(buf, cap, &n, " count=%lld", (long long)r->count);
    if (r->has & PROTO_O_N)
        rc |= append(buf, cap, &n, " n=%lld", (long long)r->n);
    return rc;
}

static int str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

/* Fails unless two parsed requests say the same thing. */
static void same_req(const struct proto_req *a, const struct proto_req *b, const char *line)
{
    if (strcmp(a->tag, b->tag) || a->verb != b->verb || a->nnames != b->nnames || a->flags != b->flags ||
        a->has != b->has)
        FAIL("round trip changed the request's head: '%s'", line);
    for (int i = 0; i < a->nnames; i++)
        if (strcmp(a->names[i], b->names[i]) != 0)
            FAIL("round trip changed name %d: '%s'", i, line);
    if (a->wait_ms != b->wait_ms || a->lease_ms != b->lease_ms || a->ttl_ms != b->ttl_ms || a->limit != b->limit ||
        a->permits != b->permits || a->count != b->count || a->n != b->n)
        FAIL("round trip changed a number: '%s'", line);
    if (!str_eq(a->owner, b->owner) || !str_eq(a->client_name, b->client_name) || !str_eq(a->session, b->session) ||
        !str_eq(a->secret, b->secret) || !str_eq(a->auth, b->auth) || !str_eq(a->id, b->id))
        FAIL("round trip changed a string option: '%s'", line);
}

/* What must hold of every request the parser accepts. */
static void check_req(const struct proto_req *r, const char *line)
{
    if (r->verb < 0 || r->verb > VERB_NVERBS)
        FAIL("verb out of range: '%s'", line);
    if (r->nnames < 0 || r->nnames > PROTO_MAX_NAMES)
        FAIL("nnames %d: '%s'", r->nnames, line);
    if (strlen(r->tag) > PROTO_TAG_MAX)
        FAIL("tag too long: '%s'", line);
    for (int i = 0; i < r->nnames; i++) {
        if (r->verb != VERB_AUTH && !proto_valid_name(r->names[i]))
            FAIL("accepted a bad name '%s' in '%s'", r->names[i], line);
        for (int j = 0; j < i && r->verb != VERB_AUTH; j++)
            if (strcmp(r->names[i], r->names[j]) == 0)
                FAIL("accepted a duplicate name in '%s'", line);
    }
    if ((r->has & PROTO_O_WAIT) && r->wait_ms != PROTO_WAIT_INF && (r->wait_ms < 0 || r->wait_ms > PROTO_DURATION_MAX))
        FAIL("wait out of range: '%s'", line);
    if ((r->has & PROTO_O_LEASE) && (r->lease_ms < 1 || r->lease_ms > PROTO_DURATION_MAX))
        FAIL("lease out of range: '%s'", line);
    if ((r->has & PROTO_O_TTL) && (r->ttl_ms < 1 || r->ttl_ms > PROTO_DURATION_MAX))
        FAIL("ttl out of range: '%s'", line);
    if (r->verb == VERB_ACQUIRE && (!(r->has & PROTO_O_LIMIT) || r->limit < 1 || r->permits < 1))
        FAIL("ACQUIRE without a good limit/permits: '%s'", line);
    if (r->owner == NULL || strlen(r->owner) > PROTO_STR_MAX)
        FAIL("owner: '%s'", line);
}

/* Parses one line; on success re-formats and re-parses it; formats the reply or error the
 * daemon would send and parses that back. */
static void one_line(const char *line, size_t len)
{
    char *a = malloc(len + 1), *b, err[256], canon[8192], out[8192];
    struct proto_req ra, rb;
    struct proto_reply rep;
    enum proto_err e;
    int n;

    memcpy(a, line, len + 1);
    e = proto_parse(a, &ra, err, sizeof(err));
    if (e != PROTO_OK) {
        if (proto_err_code(e) == NULL)
            FAIL("parse returned code %d", (int)e);
        if (strlen(err) == 0)
            FAIL("error %s without a message: '%s'", proto_err_code(e), line);
        /* The daemon answers: "[#tag ]ERR CODE message". */
        n = proto_fmt_err(out, sizeof(out), ra.tag, e, "%s", err);
        if (n < 0)
            FAIL("error reply does not fit");
        if (out[n - 1] != '\n' || memchr(out, '\n', (size_t)n - 1) != NULL)
            FAIL("error reply is not one line: '%s'", out);
        out[n - 1] = '\0';
        if (proto_parse_reply(out, &rep) != 0 || rep.err != e || strcmp(rep.status, "ERR") != 0 ||
            strcmp(rep.tag, ra.tag) != 0)
            FAIL("error reply does not parse back: '%s'", out);
        free(a);
        return;
    }
    if (ra.verb == VERB_NVERBS) {
        free(a);
        return;
    }
    check_req(&ra, line);
    /* A canonical line that ends in '\r' (a raw password or auth= value that does) loses it
     * to the framing: "a trailing \r is dropped". */
    n = format_req(&ra, canon, sizeof(canon));
    if (n == 0 && canon[strlen(canon) - 1] != '\r') {
        b = strdup(canon);
        e = proto_parse(b, &rb, err, sizeof(err));
        if (e != PROTO_OK)
            FAIL("canonical form '%s' of '%s' does not parse: %s", canon, line, err);
        same_req(&ra, &rb, line);
        free(b);
    }
    /* A reply the daemon could give, with the request's tag and first name. */
    n = proto_fmt_reply(out, sizeof(out), ra.tag, "OK", "token=%lld count=%lld name=%s", (long long)ra.wait_ms,
                        (long long)ra.count, ra.nnames > 0 && ra.verb != VERB_AUTH ? ra.names[0] : "-");
    if (n < 0)
        FAIL("reply does not fit");
    out[n - 1] = '\0';
    if (proto_parse_reply(out, &rep) != 0 || strcmp(rep.tag, ra.tag) != 0 || strcmp(rep.status, "OK") != 0 ||
        rep.nkv != 3 || proto_reply_get(&rep, "name") == NULL)
        FAIL("reply '%s' does not parse back", out);
    if (ra.nnames > 0 && ra.verb != VERB_AUTH && strcmp(proto_reply_get(&rep, "name"), ra.names[0]) != 0)
        FAIL("reply '%s' lost the name", out);
    free(a);
}

/* ---------------------------------------------------------------- formatters on raw text */

/* Any text given to the formatters comes out as one line that parses with the right tag,
 * status and code. */
static void fmt_raw(const char *text, uint8_t pick)
{
    static const char *const tags[] = { "", "t", "a.b-c_9", "0123456789abcdef0123456789ABCDEF" };
    static const char *const status[] = { "OK", "BUSY", "TIMEOUT" };
    const char *tag = tags[pick % 4];
    enum proto_err e = (enum proto_err)(1 + pick % (PROTO_NERR - 1));
    struct proto_reply rep;
    char out[8192];
    int n;

    /* The reply parser on raw text: no crash, and a consistent result. */
    snprintf(out, sizeof(out), "%s", text);
    if (proto_parse_reply(out, &rep) == 0) {
        if (rep.status == NULL || rep.nkv < 0 || rep.nkv > PROTO_MAX_KV)
            FAIL("parsed reply without status");
        if (!rep.event && strcmp(rep.status, "ERR") == 0 && proto_err_code(rep.err) == NULL)
            FAIL("ERR reply without a known code");
    }
    if ((pick & 0x30) != 0)
        return; /* the formatters on one line in four: they cost the most */
    n = proto_fmt_err(out, sizeof(out), tag, e, "%s", text);
    if (n >= 0) {
        if (out[n - 1] != '\n' || memchr(out, '\n', (size_t)n - 1) != NULL || strlen(out) != (size_t)n)
            FAIL("ERR line is not one line");
        out[n - 1] = '\0';
        if (proto_parse_reply(out, &rep) != 0 || rep.err != e || strcmp(rep.tag, tag) != 0)
            FAIL("ERR line does not parse back: '%s'", out);
    }
    n = proto_fmt_reply(out, sizeof(out), tag, status[pick % 3], "%s", text);
    if (n >= 0) {
        if (out[n - 1] != '\n' || memchr(out, '\n', (size_t)n - 1) != NULL)
            FAIL("reply line is not one line");
        out[n - 1] = '\0';
        /* Free text may not be key=value pairs; when it parses, tag and status must be right. */
        if (proto_parse_reply(out, &rep) == 0 && (strcmp(rep.tag, tag) != 0 || strcmp(rep.status, status[pick % 3])))
            FAIL("reply line parses to another tag or status: '%s'", out);
    }
}

/* Durations: what parses formats back to the same value. */
static void duration(const char *tok)
{
    int64_t ms, again;
    char buf[64];

    if (proto_duration(tok, 1, &ms) != 0)
        return;
    if (ms == PROTO_WAIT_INF)
        return;
    if (ms < 0 || ms > PROTO_DURATION_MAX)
        FAIL("duration '%s' out of range: %lld", tok, (long long)ms);
    snprintf(buf, sizeof(buf), "%lldms", (long long)ms);
    if (proto_duration(buf, 0, &again) != 0 || again != ms)
        FAIL("duration %s does not round trip", buf);
}

/* Every token of a line, and the value of every key=value token, as a duration. */
static void durations(const char *line)
{
    char *copy = strdup(line), *save = NULL, *tok, *eq;

    for (tok = strtok_r(copy, " \t", &save); tok != NULL; tok = strtok_r(NULL, " \t", &save)) {
        duration(tok);
        if ((eq = strchr(tok, '=')) != NULL)
            duration(eq + 1);
    }
    free(copy);
}

/* ---------------------------------------------------------------- splitter */

/* The reference: the result of the i-th call of proto_lines_next on the whole stream. */
struct ref {
    const uint8_t *data;
    size_t len, pos, max;
    int dead; /* returned -2 */
};

/* Returns the next line's length and start (via *start), -1 for no complete line, -2 when dead. */
static long ref_next(struct ref *r, const uint8_t **start)
{
    const uint8_t *nl;
    size_t avail = r->len - r->pos, total, n;

    if (r->dead)
        return -2;
    nl = memchr(r->data + r->pos, '\n', avail);
    if (nl == NULL) {
        if (avail >= r->max) {
            r->dead = 1;
            return -2;
        }
        return -1;
    }
    total = (size_t)(nl - (r->data + r->pos)) + 1;
    if (total > r->max) {
        r->dead = 1;
        return -2;
    }
    n = total - 1;
    if (n > 0 && r->data[r->pos + n - 1] == '\r')
        n--;
    *start = r->data + r->pos;
    r->pos += total;
    return (long)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct proto_lines pl;
    struct ref ref;
    uint32_t seed;
    size_t max, fed = 0;
    char *out;

    if (size < 2)
        return 0;
    max = pick_max(data[0]);
    seed = (uint32_t)data[1] * 2654435761u + 1;
    data += 2;
    size -= 2;
    proto_lines_init(&pl, max);
    out = malloc(max + 1);
    ref = (struct ref){ data, 0, 0, max, 0 };
    while (fed < size || pl.len > 0) {
        uint32_t r = next_rand(&seed);
        size_t chunk = (r & 3) == 0 ? 1 : (r & 3) == 1 ? (r >> 8) % 8 + 1 : (r >> 8) % 300 + 1;
        long got;
        const uint8_t *start = NULL;

        if (chunk > size - fed)
            chunk = size - fed;
        if (proto_lines_feed(&pl, (const char *)data + fed, chunk) != 0)
            FAIL("feed failed");
        fed += chunk;
        ref.len = fed;
        while ((got = proto_lines_next(&pl, out, max + 1)) >= 0) {
            long want = ref_next(&ref, &start);
            if (want != got || memcmp(start, out, (size_t)got) != 0 || out[got] != '\0')
                FAIL("splitter returned %ld bytes where the reference has %ld (max %zu)", got, want, max);
            one_line(out, strlen(out)); /* a NUL ends what the parser sees, as in the daemon */
            if (r & 0x100)
                durations(out);
            fmt_raw(out, (uint8_t)(r >> 24));
        }
        if (got != ref_next(&ref, &start))
            FAIL("splitter says %ld where the reference says otherwise (max %zu)", got, max);
        if (got == -2 || fed == size)
            break;
    }
    free(out);
    proto_lines_free(&pl);
    return 0;
}
