/* check_proto.c - unit tests of proto/: request parser, durations, line splitter, formatters, reply parser. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define ERRLEN 256

static char lbuf[16384];   /* the line the last parse() tokenised; req points into it */
static char errbuf[ERRLEN];

/* Parses a copy of line (the parser writes into its input). */
static enum proto_err parse(const char *line, struct proto_req *req)
{
    ck_assert_uint_lt(strlen(line), sizeof(lbuf));
    strcpy(lbuf, line);
    return proto_parse(lbuf, req, errbuf, sizeof(errbuf));
}

/* A string of n copies of c, in a static buffer. */
static const char *rep(char c, size_t n)
{
    static char s[1024];

    ck_assert_uint_lt(n, sizeof(s));
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...)
{
    static char s[8192];
    va_list ap;

    va_start(ap, f);
    vsnprintf(s, sizeof(s), f, ap);
    va_end(ap);
    return s;
}

/* ---------------------------------------------------------------- codes and names */

START_TEST(test_err_codes)
{
    static const char *const want[] = {NULL, "SYNTAX", "UNKNOWN", "TOOBIG", "NOAUTH", "NOSESSION",
                                       "NOTHELD", "WRONGTYPE", "MISMATCH", "DEADLOCK", "LIMIT",
                                       "BACKEND"};

    ck_assert_int_eq(sizeof(want) / sizeof(want[0]), PROTO_NERR);
    ck_assert_ptr_null(proto_err_code(PROTO_OK));
    for (int e = PROTO_OK + 1; e < PROTO_NERR; e++) {
        const char *code = proto_err_code((enum proto_err)e);
        ck_assert_ptr_nonnull(code);
        ck_assert_str_eq(code, want[e]);
        ck_assert_int_eq(proto_err_from_code(code), e);
    }
    ck_assert_ptr_null(proto_err_code(PROTO_NERR));
    ck_assert_ptr_null(proto_err_code((enum proto_err)-1));
    ck_assert_int_eq(proto_err_from_code("BOGUS"), PROTO_OK);
    ck_assert_int_eq(proto_err_from_code("syntax"), PROTO_OK);
    ck_assert_int_eq(proto_err_from_code(""), PROTO_OK);
    ck_assert_int_eq(proto_err_from_code(NULL), PROTO_OK);
}
END_TEST

START_TEST(test_verb_names)
{
    static const char *const want[] = {"HELLO", "PING", "QUIT", "AUTH", "LOCK", "UNLOCK", "ACQUIRE",
                                       "RELEASE", "LATCH", "COUNTDOWN", "AWAIT", "STATUS", "INFO",
                                       "LIST", "SESSIONS", "KILL", "FORCE"};
    /* the smallest valid request of each verb */
    static const char *const args[] = {"", "", "", " pw", " x", " x", " x limit=1",
                                       " x", " x count=1", " x", " x", " x", "",
                                       "", "", " 0123456789abcdef", " x"};
    struct proto_req req;

    ck_assert_int_eq(sizeof(want) / sizeof(want[0]), VERB_NVERBS);
    ck_assert_int_eq(sizeof(args) / sizeof(args[0]), VERB_NVERBS);
    for (int v = 0; v < VERB_NVERBS; v++) {
        ck_assert_str_eq(proto_verb_name((enum proto_verb)v), want[v]);
        ck_assert_int_eq(parse(fmt("%s%s", want[v], args[v]), &req), PROTO_OK);
        ck_assert_int_eq(req.verb, v);
    }
    ck_assert_ptr_null(proto_verb_name(VERB_NVERBS));
}
END_TEST

/* ---------------------------------------------------------------- durations */

START_TEST(test_duration_valid)
{
    static const struct {
        const char *s;
        int64_t ms;
    } ok[] = {
        {"0", 0},
        {"1", 1},
        {"1500", 1500},
        {"007", 7},
        {"5ms", 5},
        {"0s", 0},
        {"5s", 5000},
        {"2m", 120000},
        {"1h", 3600000},
        {"2147483647", 2147483647LL},
        {"2147483647ms", 2147483647LL},
        {"2147483s", 2147483000LL},
        {"35791m", 2147460000LL},
        {"596h", 2145600000LL},
    };
    int64_t ms;

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        ms = -7;
        ck_assert_msg(proto_duration(ok[i].s, 0, &ms) == 0, "'%s' rejected", ok[i].s);
        ck_assert_int_eq(ms, ok[i].ms);
    }
    ck_assert_int_eq(proto_duration("inf", 1, &ms), 0);
    ck_assert_int_eq(ms, PROTO_WAIT_INF);
}
END_TEST

START_TEST(test_duration_invalid)
{
    static const char *const bad[] = {
        "", "s", "ms", "m", "-1", "+1", " 5", "5 ", "5x", "5sec", "5S", "5M", "5mss", "1.5s",
        "0x10", "1e3", "2147483648", "2147483648ms", "2147484s", "35792m", "597h",
        "99999999999999999999999999", "18446744073709551617", "INF", "Inf", "infinity", "inf5",
        "5inf", "5 s", "5\ts",
    };
    int64_t ms = 42;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(proto_duration(bad[i], 1, &ms) == -1, "'%s' accepted", bad[i]);
        ck_assert_int_eq(ms, 42); /* untouched on failure */
    }
    ck_assert_int_eq(proto_duration("inf", 0, &ms), -1);
    ck_assert_int_eq(proto_duration(NULL, 1, &ms), -1);
    ck_assert_int_eq(ms, 42);
}
END_TEST

/* ---------------------------------------------------------------- framing */

START_TEST(test_empty_lines)
{
    static const char *const empty[] = {"", " ", "\t", "  \t  ", "\r", " \r"};
    struct proto_req req;

    for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
        ck_assert_int_eq(parse(empty[i], &req), PROTO_OK);
        ck_assert_int_eq(req.verb, VERB_NVERBS);
        ck_assert_str_eq(req.tag, "");
    }
}
END_TEST

START_TEST(test_verb_case_and_separators)
{
    struct proto_req req;

    ck_assert_int_eq(parse("ping", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_PING);
    ck_assert_int_eq(parse("PiNg", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_PING);
    ck_assert_int_eq(parse("  \tlock\t a \t\tb  shared \t", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_LOCK);
    ck_assert_int_eq(req.nnames, 2);
    ck_assert_str_eq(req.names[0], "a");
    ck_assert_str_eq(req.names[1], "b");
    ck_assert_uint_eq(req.flags, PROTO_F_SHARED);
}
END_TEST

START_TEST(test_crlf)
{
    struct proto_req req;

    ck_assert_int_eq(parse("PING\r", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_PING);
    ck_assert_int_eq(parse("LOCK a shared\r", &req), PROTO_OK);
    ck_assert_uint_eq(req.flags, PROTO_F_SHARED);
    ck_assert_int_eq(parse("LOCK a wait=5s\r", &req), PROTO_OK);
    ck_assert_int_eq(req.wait_ms, 5000);
    ck_assert_int_eq(parse("STATUS abc\r", &req), PROTO_OK);
    ck_assert_str_eq(req.names[0], "abc");
    /* only a trailing '\r' is dropped; one inside the line is a control byte */
    ck_assert_int_eq(parse("PING\r x", &req), PROTO_ESYNTAX);
    ck_assert_str_eq(errbuf, "control byte 0x0d in request");
}
END_TEST

/* Control bytes and NULs: "LOCK x\0 shared" once ran as an exclusive LOCK x. */
START_TEST(test_control_bytes)
{
    static const char nul[] = "#t LOCK x\0 shared";
    struct proto_req req;
    char line[32];

    for (int b = 1; b < 0x20; b++) {
        if (b == '\t' || b == '\n')
            continue;
        ck_assert_int_eq(parse(fmt("#t LOCK x%c shared", b), &req), PROTO_ESYNTAX);
        ck_assert_str_eq(req.tag, "t");
        ck_assert_str_eq(errbuf, fmt("control byte 0x%02x in request", b));
    }
    ck_assert_int_eq(parse("LOCK\x7fx", &req), PROTO_ESYNTAX);
    ck_assert_int_eq(parse("\x01", &req), PROTO_ESYNTAX);
    ck_assert_int_eq(parse("LOCK\tx\tshared\r", &req), PROTO_OK);
    ck_assert_uint_eq(req.flags, PROTO_F_SHARED);
    ck_assert_int_eq(parse("AUTH p\xc3\xa4ss", &req), PROTO_OK); /* bytes above 0x7f are no control bytes */

    memcpy(line, nul, sizeof(nul));
    ck_assert_int_eq(proto_parse_len(line, sizeof(nul) - 1, &req, errbuf, sizeof(errbuf)), PROTO_ESYNTAX);
    ck_assert_str_eq(req.tag, "t");
    ck_assert_str_eq(errbuf, "NUL byte in request");
    memcpy(line, "\0PING", 6);
    ck_assert_int_eq(proto_parse_len(line, 5, &req, errbuf, sizeof(errbuf)), PROTO_ESYNTAX);
    memcpy(line, "LOCK x shared", 14);
    ck_assert_int_eq(proto_parse_len(line, 13, &req, errbuf, sizeof(errbuf)), PROTO_OK);
    ck_assert_uint_eq(req.flags, PROTO_F_SHARED);
}
END_TEST

START_TEST(test_unknown_verb)
{
    struct proto_req req;

    ck_assert_int_eq(parse("FROB", &req), PROTO_EUNKNOWN);
    ck_assert_str_eq(errbuf, "unknown verb 'FROB'");
    ck_assert_int_eq(parse("#t9 frob a b=c", &req), PROTO_EUNKNOWN);
    ck_assert_str_eq(errbuf, "unknown verb 'frob'");
    ck_assert_str_eq(req.tag, "t9");
    ck_assert_int_eq(parse("LOCKS a", &req), PROTO_EUNKNOWN);
    ck_assert_int_eq(parse("LOC a", &req), PROTO_EUNKNOWN);
    ck_assert_int_eq(parse("shared", &req), PROTO_EUNKNOWN);
    /* a long or binary verb is quoted short and printable */
    ck_assert_int_eq(parse(rep('Z', 500), &req), PROTO_EUNKNOWN);
    ck_assert_uint_lt(strlen(errbuf), 100);
    ck_assert_ptr_nonnull(strstr(errbuf, "...'"));
    ck_assert_int_eq(parse("F\x80\xff", &req), PROTO_EUNKNOWN);
    ck_assert_str_eq(errbuf, "unknown verb 'F?\?'");
}
END_TEST

START_TEST(test_tags)
{
    struct proto_req req;
    char line[128];

    ck_assert_int_eq(parse("#a PING", &req), PROTO_OK);
    ck_assert_str_eq(req.tag, "a");
    ck_assert_int_eq(req.verb, VERB_PING);
    ck_assert_int_eq(parse("#Az09_.- ping", &req), PROTO_OK);
    ck_assert_str_eq(req.tag, "Az09_.-");
    ck_assert_int_eq(parse("PING", &req), PROTO_OK);
    ck_assert_str_eq(req.tag, "");

    strcpy(line, fmt("#%s PING", rep('t', 32)));
    ck_assert_int_eq(parse(line, &req), PROTO_OK);
    ck_assert_str_eq(req.tag, rep('t', 32));

    strcpy(line, fmt("#%s PING", rep('t', 33)));
    ck_assert_int_eq(parse(line, &req), PROTO_ESYNTAX);
    ck_assert_str_eq(req.tag, "");
    ck_assert_ptr_nonnull(strstr(errbuf, "bad tag"));

    static const char *const bad[] = {"# PING", "#a!b PING", "#a/b PING", "#a=b PING", "#a#b PING",
                                      "#\x7f PING", "#\xc3\xa9 PING", "## PING"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(parse(bad[i], &req) == PROTO_ESYNTAX, "'%s' accepted", bad[i]);
        ck_assert_str_eq(req.tag, "");
    }
    /* a tag without a verb; the tag is known, so the error carries it */
    ck_assert_int_eq(parse("#a", &req), PROTO_ESYNTAX);
    ck_assert_str_eq(req.tag, "a");
    ck_assert_int_eq(parse("#a   ", &req), PROTO_ESYNTAX);
    ck_assert_str_eq(req.tag, "a");
    /* other errors keep the tag */
    ck_assert_int_eq(parse("#x LOCK a wait=zz", &req), PROTO_ESYNTAX);
    ck_assert_str_eq(req.tag, "x");
    /* a tag is only recognised first */
    ck_assert_int_eq(parse("PING #a", &req), PROTO_ESYNTAX);
    ck_assert_int_eq(parse("STATUS #a", &req), PROTO_OK);
    ck_assert_str_eq(req.names[0], "#a");
    ck_assert_str_eq(req.tag, "");
}
END_TEST

START_TEST(test_valid_name)
{
    char s[4];

    ck_assert_int_eq(proto_valid_name(rep('n', 200)), 1);
    ck_assert_int_eq(proto_valid_name(rep('n', 201)), 0);
    ck_assert_int_eq(proto_valid_name(rep('n', 1)), 1);
    ck_assert_int_eq(proto_valid_name(""), 0);
    ck_assert_int_eq(proto_valid_name(NULL), 0);
    ck_assert_int_eq(proto_valid_name("a=b"), 0);
    ck_assert_int_eq(proto_valid_name("="), 0);
    ck_assert_int_eq(proto_valid_name("a b"), 0);
    ck_assert_int_eq(proto_valid_name("a\tb"), 0);
    ck_assert_int_eq(proto_valid_name("a\x7f"), 0);
    ck_assert_int_eq(proto_valid_name("\x80"), 0);
    ck_assert_int_eq(proto_valid_name("\x1f"), 0);
    ck_assert_int_eq(proto_valid_name("!~{}#*:/\\\"'"), 1);
    /* every byte 0x21-0x7e except '=' is allowed */
    for (int c = 1; c < 256; c++) {
        s[0] = 'x';
        s[1] = (char)c;
        s[2] = '\0';
        ck_assert_int_eq(proto_valid_name(s), c >= 0x21 && c <= 0x7e && c != '=');
    }
    /* '}' first would make the hash tag of its keys empty ("{}...}:h"): one slot per key */
    ck_assert_int_eq(proto_valid_name("}"), 0);
    ck_assert_int_eq(proto_valid_name("}a"), 0);
    ck_assert_int_eq(proto_valid_name("a}"), 1);
    ck_assert_int_eq(proto_valid_name("{}"), 1);
}
END_TEST

START_TEST(test_names_in_requests)
{
    struct proto_req req;

    ck_assert_int_eq(parse(fmt("LOCK %s", rep('n', 200)), &req), PROTO_OK);
    ck_assert_uint_eq(strlen(req.names[0]), 200);
    ck_assert_int_eq(parse(fmt("LOCK %s", rep('n', 201)), &req), PROTO_ESYNTAX);
    ck_assert_ptr_nonnull(strstr(errbuf, "bad name"));
    ck_assert_int_eq(parse(fmt("LOCK a %s", rep('n', 201)), &req), PROTO_ESYNTAX);
    ck_assert_int_eq(parse("STATUS a\x7f", &req), PROTO_ESYNTAX);
    ck_assert_int_eq(parse("STATUS a\x80", &req), PROTO_ESYNTAX);
    ck_assert_str_eq(errbuf, "bad name 'a?'");
    ck_assert_int_eq(parse("LOCK a }b", &req), PROTO_ESYNTAX);
    ck_assert_str_eq(errbuf, "bad name '}b'");
    /* a first token with '=' is not taken as an option */
    ck_assert_int_eq(parse("LOCK wait=5s", &req), PROTO_ESYNTAX);
    ck_assert_str_eq(errbuf, "missing name before 'wait=5s'");
    ck_assert_int_eq(parse("STATUS a=b", &req), PROTO_ESYNTAX);
    /* the same name twice in one request */
    ck_assert_int_eq(parse("LOCK a b a", &req), PROTO_ESYNTAX);
    ck_assert_str_eq(errbuf, "duplicate name 'a'");
    ck_assert_int_eq(parse("UNLOCK a a", &req), PROTO_ESYNTAX);
}
END_TEST

START_TEST(test_name_limits)
{
    struct proto_req req;
    char names[2048];
    size_t n = 0;

    for (int i = 0; i < PROTO_MAX_NAMES; i++)
        n += (size_t)snprintf(names + n, sizeof(names) - n, " n%d", i);
    ck_assert_int_eq(PROTO_MAX_NAMES, 64);
    ck_assert_int_eq(parse(fmt("LOCK%s shared", names), &req), PROTO_OK);
    ck_assert_int_eq(req.nnames, 64);
    ck_assert_str_eq(req.names[0], "n0");
    ck_assert_str_eq(req.names[63], "n63");
    ck_assert_uint_eq(req.flags, PROTO_F_SHARED);
    ck_assert_int_eq(parse(fmt("UNLOCK%s", names), &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_UNLOCK);
    ck_assert_int_eq(req.nnames, 64);

    snprintf(names + n, sizeof(names) - n, " n64");
    ck_assert_int_eq(parse(fmt("LOCK%s shared", names), &req), PROTO_ESYNTAX);
    ck_assert_ptr_nonnull(strstr(errbuf, "too many names"));
    ck_assert_ptr_nonnull(strstr(errbuf, "'n64'"));
    ck_assert_int_eq(parse(fmt("UNLOCK%s", names), &req), PROTO_ESYNTAX);
}
END_TEST

/* ---------------------------------------------------------------- verbs */

/* A line and the error it must give (PROTO_OK: valid); msg, when set, must be the message. */
struct bad_case {
    const char *line;
    enum proto_err want;
    const char *msg;
};

static void check_cases(const struct bad_case *c, size_t n)
{
    struct proto_req req;

    for (size_t i = 0; i < n; i++) {
        enum proto_err e = parse(c[i].line, &req);
        ck_assert_msg(e == c[i].want, "'%s': got %d (%s), want %d", c[i].line, e, errbuf, c[i].want);
        if (e != PROTO_OK)
            ck_assert_msg(errbuf[0] != '\0', "'%s': no message", c[i].line);
        if (c[i].msg != NULL)
            ck_assert_str_eq(errbuf, c[i].msg);
    }
}

#define CHECK_CASES(c) check_cases(c, sizeof(c) / sizeof((c)[0]))

START_TEST(test_hello)
{
    struct proto_req req;

    ck_assert_int_eq(parse("HELLO", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_HELLO);
    ck_assert_uint_eq(req.has, 0);
    ck_assert_int_eq(req.nnames, 0);

    ck_assert_int_eq(parse("HELLO name=billing-7 ttl=30s session=9f1c2a7e0b3d secret=5be0c1 auth=s3=cr3t", &req),
                     PROTO_OK);
    ck_assert_uint_eq(req.has, PROTO_O_NAME | PROTO_O_TTL | PROTO_O_SESSION | PROTO_O_SECRET | PROTO_O_AUTH);
    ck_assert_str_eq(req.client_name, "billing-7");
    ck_assert_int_eq(req.ttl_ms, 30000);
    ck_assert_str_eq(req.session, "9f1c2a7e0b3d");
    ck_assert_str_eq(req.secret, "5be0c1");
    ck_assert_str_eq(req.auth, "s3=cr3t");

    ck_assert_int_eq(parse(fmt("HELLO name=%s", rep('c', 200)), &req), PROTO_OK);
    ck_assert_uint_eq(strlen(req.client_name), 200);

    static const struct bad_case c[] = {
        {"HELLO foo", PROTO_ESYNTAX, "unexpected argument 'foo'"},
        {"HELLO shared", PROTO_ESYNTAX, NULL},
        {"HELLO ttl=0", PROTO_ESYNTAX, "bad duration 'ttl=0'"},
        {"HELLO ttl=inf", PROTO_ESYNTAX, NULL},
        {"HELLO ttl=", PROTO_ESYNTAX, NULL},
        {"HELLO ttl=1s ttl=2s", PROTO_ESYNTAX, "duplicate option 'ttl'"},
        {"HELLO wait=1", PROTO_ESYNTAX, "HELLO does not take option 'wait'"},
        {"HELLO owner=x", PROTO_ESYNTAX, NULL},
        {"HELLO id=1", PROTO_ESYNTAX, NULL},
        {"HELLO name=", PROTO_ESYNTAX, "bad value 'name='"},
        {"HELLO session=", PROTO_ESYNTAX, NULL},
        {"HELLO auth=", PROTO_ESYNTAX, NULL},
        {"HELLO secret=", PROTO_ESYNTAX, NULL},
        {"HELLO secret=a secret=a", PROTO_ESYNTAX, "duplicate option 'secret'"},
        {"LOCK x secret=a", PROTO_ESYNTAX, "LOCK does not take option 'secret'"},
        {"HELLO foo=1", PROTO_ESYNTAX, "unknown option 'foo'"},
        {"HELLO TTL=1s", PROTO_ESYNTAX, "unknown option 'TTL'"},
        {"HELLO =1", PROTO_ESYNTAX, NULL},
        {"HELLO name=a\x7f", PROTO_ESYNTAX, NULL},
        {"HELLO ttl=1h", PROTO_OK, NULL},
    };
    CHECK_CASES(c);
    ck_assert_int_eq(parse(fmt("HELLO name=%s", rep('c', 201)), &req), PROTO_ESYNTAX);
    ck_assert_int_eq(parse(fmt("HELLO session=%s", rep('c', 201)), &req), PROTO_ESYNTAX);
}
END_TEST

START_TEST(test_ping_quit_info)
{
    struct proto_req req;

    ck_assert_int_eq(parse("PING", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_PING);
    ck_assert_int_eq(parse("QUIT", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_QUIT);
    ck_assert_int_eq(parse("#i INFO", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_INFO);
    ck_assert_str_eq(req.tag, "i");

    static const struct bad_case c[] = {
        {"PING x", PROTO_ESYNTAX, "unexpected argument 'x'"},
        {"QUIT now", PROTO_ESYNTAX, NULL},
        {"INFO all", PROTO_ESYNTAX, NULL},
        {"PING wait=1", PROTO_ESYNTAX, "PING does not take option 'wait'"},
        {"INFO id=3", PROTO_ESYNTAX, NULL},
        {"QUIT foo=1", PROTO_ESYNTAX, "unknown option 'foo'"},
    };
    CHECK_CASES(c);
}
END_TEST

START_TEST(test_auth)
{
    struct proto_req req;

    ck_assert_int_eq(parse("AUTH secret", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_AUTH);
    ck_assert_int_eq(req.nnames, 1);
    ck_assert_str_eq(req.names[0], "secret");
    /* the password is any token, even one with '=' or that looks like a flag */
    ck_assert_int_eq(parse("AUTH p=ss", &req), PROTO_OK);
    ck_assert_str_eq(req.names[0], "p=ss");
    ck_assert_int_eq(parse("AUTH shared", &req), PROTO_OK);
    ck_assert_str_eq(req.names[0], "shared");
    ck_assert_uint_eq(req.flags, 0);
    ck_assert_int_eq(parse(fmt("AUTH %s", rep('p', 300)), &req), PROTO_OK);

    static const struct bad_case c[] = {
        {"AUTH", PROTO_ESYNTAX, "missing argument"},
        {"AUTH a b", PROTO_ESYNTAX, "unexpected argument 'b'"},
        {"AUTH a wait=1", PROTO_ESYNTAX, NULL},
        {"AUTH a shared", PROTO_ESYNTAX, NULL},
    };
    CHECK_CASES(c);
}
END_TEST

START_TEST(test_lock)
{
    struct proto_req req;

    ck_assert_int_eq(parse("LOCK invoices", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_LOCK);
    ck_assert_int_eq(req.nnames, 1);
    ck_assert_str_eq(req.names[0], "invoices");
    ck_assert_uint_eq(req.flags, 0);
    ck_assert_uint_eq(req.has, 0);
    ck_assert_int_eq(req.wait_ms, 0);
    ck_assert_str_eq(req.owner, "");
    ck_assert_int_eq(req.permits, 1);
    ck_assert_int_eq(req.n, 1);

    ck_assert_int_eq(parse("#a LOCK reports ledger shared wait=5s lease=1m owner=t-17 id=r9", &req), PROTO_OK);
    ck_assert_str_eq(req.tag, "a");
    ck_assert_int_eq(req.nnames, 2);
    ck_assert_str_eq(req.names[0], "reports");
    ck_assert_str_eq(req.names[1], "ledger");
    ck_assert_uint_eq(req.flags, PROTO_F_SHARED);
    ck_assert_uint_eq(req.has, PROTO_O_WAIT | PROTO_O_LEASE | PROTO_O_OWNER | PROTO_O_ID);
    ck_assert_int_eq(req.wait_ms, 5000);
    ck_assert_int_eq(req.lease_ms, 60000);
    ck_assert_str_eq(req.owner, "t-17");
    ck_assert_str_eq(req.id, "r9");

    /* the first token is always a name */
    ck_assert_int_eq(parse("LOCK shared shared", &req), PROTO_OK);
    ck_assert_int_eq(req.nnames, 1);
    ck_assert_str_eq(req.names[0], "shared");
    ck_assert_uint_eq(req.flags, PROTO_F_SHARED);
    ck_assert_int_eq(parse("LOCK shared", &req), PROTO_OK);
    ck_assert_str_eq(req.names[0], "shared");
    ck_assert_uint_eq(req.flags, 0);
    /* "all" is not a flag of LOCK, so it is a name */
    ck_assert_int_eq(parse("LOCK a all", &req), PROTO_OK);
    ck_assert_int_eq(req.nnames, 2);
    ck_assert_str_eq(req.names[1], "all");
    /* flags may follow options */
    ck_assert_int_eq(parse("LOCK a wait=inf shared", &req), PROTO_OK);
    ck_assert_int_eq(req.wait_ms, PROTO_WAIT_INF);
    ck_assert_uint_eq(req.flags, PROTO_F_SHARED);
    /* owner may be empty, and is then given */
    ck_assert_int_eq(parse("LOCK a owner=", &req), PROTO_OK);
    ck_assert_uint_eq(req.has, PROTO_O_OWNER);
    ck_assert_str_eq(req.owner, "");
    ck_assert_int_eq(parse("LOCK a wait=0", &req), PROTO_OK);
    ck_assert_uint_eq(req.has, PROTO_O_WAIT);
    ck_assert_int_eq(parse(fmt("LOCK a owner=%s", rep('o', 200)), &req), PROTO_OK);
    ck_assert_uint_eq(strlen(req.owner), 200);
    /* flags and keys are lower case: SHARED is a name */
    ck_assert_int_eq(parse("LOCK a SHARED", &req), PROTO_OK);
    ck_assert_int_eq(req.nnames, 2);
    ck_assert_uint_eq(req.flags, 0);

    static const struct bad_case c[] = {
        {"LOCK", PROTO_ESYNTAX, "missing name"},
        {"LOCK a shared b", PROTO_ESYNTAX, "unexpected argument 'b'"},
        {"LOCK a wait=1 b", PROTO_ESYNTAX, "unexpected argument 'b'"},
        {"LOCK a shared shared", PROTO_ESYNTAX, "duplicate flag 'shared'"},
        {"LOCK a shared all", PROTO_ESYNTAX, NULL},
        {"LOCK a wait=5x", PROTO_ESYNTAX, "bad duration 'wait=5x'"},
        {"LOCK a wait=", PROTO_ESYNTAX, NULL},
        {"LOCK a wait=-1", PROTO_ESYNTAX, NULL},
        {"LOCK a wait=2147483648", PROTO_ESYNTAX, NULL},
        {"LOCK a wait=1 wait=2", PROTO_ESYNTAX, "duplicate option 'wait'"},
        {"LOCK a lease=inf", PROTO_ESYNTAX, "bad duration 'lease=inf'"},
        {"LOCK a lease=0", PROTO_ESYNTAX, NULL},
        {"LOCK a lease=0s", PROTO_ESYNTAX, NULL},
        {"LOCK a foo=1", PROTO_ESYNTAX, "unknown option 'foo'"},
        {"LOCK a WAIT=1", PROTO_ESYNTAX, "unknown option 'WAIT'"},
        {"LOCK a limit=1", PROTO_ESYNTAX, "LOCK does not take option 'limit'"},
        {"LOCK a ttl=1s", PROTO_ESYNTAX, NULL},
        {"LOCK a count=1", PROTO_ESYNTAX, NULL},
        {"LOCK a owner=x owner=y", PROTO_ESYNTAX, NULL},
        {"LOCK a owner=\x01", PROTO_ESYNTAX, NULL},
        {"LOCK a id=", PROTO_ESYNTAX, NULL},
        {"LOCK a lease=1 wait=1s owner=a=b", PROTO_OK, NULL},
    };
    CHECK_CASES(c);
    ck_assert_int_eq(parse(fmt("LOCK a owner=%s", rep('o', 201)), &req), PROTO_ESYNTAX);
    ck_assert_int_eq(parse(fmt("LOCK a id=%s", rep('i', 201)), &req), PROTO_ESYNTAX);
}
END_TEST

START_TEST(test_unlock)
{
    struct proto_req req;

    ck_assert_int_eq(parse("UNLOCK invoices all", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_UNLOCK);
    ck_assert_uint_eq(req.flags, PROTO_F_ALL);
    ck_assert_int_eq(parse("UNLOCK a b shared all owner=o id=7", &req), PROTO_OK);
    ck_assert_int_eq(req.nnames, 2);
    ck_assert_uint_eq(req.flags, PROTO_F_SHARED | PROTO_F_ALL);
    ck_assert_str_eq(req.owner, "o");
    ck_assert_str_eq(req.id, "7");
    ck_assert_int_eq(parse("UNLOCK all all", &req), PROTO_OK);
    ck_assert_int_eq(req.nnames, 1);
    ck_assert_str_eq(req.names[0], "all");
    ck_assert_uint_eq(req.flags, PROTO_F_ALL);

    static const struct bad_case c[] = {
        {"UNLOCK", PROTO_ESYNTAX, "missing name"},
        {"UNLOCK a wait=1", PROTO_ESYNTAX, "UNLOCK does not take option 'wait'"},
        {"UNLOCK a lease=1", PROTO_ESYNTAX, NULL},
        {"UNLOCK a all b", PROTO_ESYNTAX, NULL},
        {"UNLOCK a all all", PROTO_ESYNTAX, NULL},
    };
    CHECK_CASES(c);
}
END_TEST

START_TEST(test_acquire)
{
    struct proto_req req;

    ck_assert_int_eq(parse("ACQUIRE pool limit=3", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_ACQUIRE);
    ck_assert_int_eq(req.limit, 3);
    ck_assert_int_eq(req.permits, 1);
    ck_assert_uint_eq(req.has, PROTO_O_LIMIT);
    ck_assert_int_eq(parse("ACQUIRE pool permits=2 limit=2147483647 wait=1s lease=2s owner=o id=x", &req),
                     PROTO_OK);
    ck_assert_int_eq(req.limit, 2147483647LL);
    ck_assert_int_eq(req.permits, 2);
    ck_assert_int_eq(req.wait_ms, 1000);
    ck_assert_int_eq(req.lease_ms, 2000);
    ck_assert_uint_eq(req.has, PROTO_O_LIMIT | PROTO_O_PERMITS | PROTO_O_WAIT | PROTO_O_LEASE |
                                   PROTO_O_OWNER | PROTO_O_ID);

    static const struct bad_case c[] = {
        {"ACQUIRE pool", PROTO_ESYNTAX, "missing option 'limit'"},
        {"ACQUIRE limit=1", PROTO_ESYNTAX, NULL},
        {"ACQUIRE", PROTO_ESYNTAX, NULL},
        {"ACQUIRE pool limit=0", PROTO_ESYNTAX, "bad number 'limit=0'"},
        {"ACQUIRE pool limit=-1", PROTO_ESYNTAX, NULL},
        {"ACQUIRE pool limit=+1", PROTO_ESYNTAX, NULL},
        {"ACQUIRE pool limit=1x", PROTO_ESYNTAX, NULL},
        {"ACQUIRE pool limit=", PROTO_ESYNTAX, NULL},
        {"ACQUIRE pool limit=2147483648", PROTO_ESYNTAX, NULL},
        {"ACQUIRE pool limit=99999999999999999999999", PROTO_ESYNTAX, NULL},
        {"ACQUIRE pool limit=1 permits=0", PROTO_ESYNTAX, "bad number 'permits=0'"},
        {"ACQUIRE pool other limit=1", PROTO_ESYNTAX, "unexpected argument 'other'"},
        {"ACQUIRE pool limit=1 shared", PROTO_ESYNTAX, NULL},
        {"ACQUIRE pool limit=1 n=1", PROTO_ESYNTAX, NULL},
        {"ACQUIRE pool limit=1 limit=2", PROTO_ESYNTAX, NULL},
    };
    CHECK_CASES(c);
}
END_TEST

START_TEST(test_release)
{
    struct proto_req req;

    ck_assert_int_eq(parse("RELEASE pool", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_RELEASE);
    ck_assert_int_eq(req.permits, 1);
    ck_assert_uint_eq(req.has, 0);
    ck_assert_int_eq(parse("RELEASE pool permits=4 owner=o id=i", &req), PROTO_OK);
    ck_assert_int_eq(req.permits, 4);
    ck_assert_uint_eq(req.has, PROTO_O_PERMITS | PROTO_O_OWNER | PROTO_O_ID);

    static const struct bad_case c[] = {
        {"RELEASE", PROTO_ESYNTAX, "missing name"},
        {"RELEASE pool limit=1", PROTO_ESYNTAX, NULL},
        {"RELEASE pool permits=0", PROTO_ESYNTAX, NULL},
        {"RELEASE pool wait=1", PROTO_ESYNTAX, NULL},
        {"RELEASE a b", PROTO_ESYNTAX, NULL},
    };
    CHECK_CASES(c);
}
END_TEST

START_TEST(test_latch)
{
    struct proto_req req;

    ck_assert_int_eq(parse("LATCH start count=0", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_LATCH);
    ck_assert_int_eq(req.count, 0);
    ck_assert_uint_eq(req.has, PROTO_O_COUNT);
    ck_assert_int_eq(parse("LATCH start count=5 ttl=1h", &req), PROTO_OK);
    ck_assert_int_eq(req.count, 5);
    ck_assert_int_eq(req.ttl_ms, 3600000);

    static const struct bad_case c[] = {
        {"LATCH start", PROTO_ESYNTAX, "missing option 'count'"},
        {"LATCH start ttl=1s", PROTO_ESYNTAX, "missing option 'count'"},
        {"LATCH start count=x", PROTO_ESYNTAX, "bad number 'count=x'"},
        {"LATCH start count=-1", PROTO_ESYNTAX, NULL},
        {"LATCH start count=1 ttl=inf", PROTO_ESYNTAX, NULL},
        {"LATCH start count=1 ttl=0", PROTO_ESYNTAX, NULL},
        {"LATCH start count=1 wait=1", PROTO_ESYNTAX, NULL},
        {"LATCH count=1", PROTO_ESYNTAX, NULL},
    };
    CHECK_CASES(c);
}
END_TEST

START_TEST(test_countdown_await_status)
{
    struct proto_req req;

    ck_assert_int_eq(parse("COUNTDOWN start", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_COUNTDOWN);
    ck_assert_int_eq(req.n, 1);
    ck_assert_uint_eq(req.has, 0);
    ck_assert_int_eq(parse("COUNTDOWN start n=3", &req), PROTO_OK);
    ck_assert_int_eq(req.n, 3);
    ck_assert_uint_eq(req.has, PROTO_O_N);

    ck_assert_int_eq(parse("AWAIT start", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_AWAIT);
    ck_assert_int_eq(req.wait_ms, 0);
    ck_assert_int_eq(parse("AWAIT start wait=inf", &req), PROTO_OK);
    ck_assert_int_eq(req.wait_ms, PROTO_WAIT_INF);
    ck_assert_int_eq(parse("AWAIT start wait=250ms", &req), PROTO_OK);
    ck_assert_int_eq(req.wait_ms, 250);

    ck_assert_int_eq(parse("STATUS invoices", &req), PROTO_OK);
    ck_assert_int_eq(req.verb, VERB_STATUS);
    ck_assert_str_eq(req.names[0], "invoices");

    static const struct bad_case c[] = {
        {"COUNTDOWN", PROTO_ESYNTAX, "missing name"},
        {"COUNTDOWN start n=0", PROTO_ESYNTAX, "bad number 'n=0'"},
        {"COUNTDOWN start count=1", PROTO_ESYNTAX, NULL},
        {"COUNTDOWN a b", PROTO_ESYNTAX, NULL},
        {"AWAIT", PROTO_ESYNTAX, NULL},
        {"AWAIT start n=1", PROTO_ESYNTAX, NULL},
        {"AWAIT start wait=1y", PROTO_ESYNTAX, "bad duration 'wait=1y'"},
        {"STATUS", PROTO_ESYNTAX, "missing name"},
        {"STATUS a b", PROTO_ESYNTAX, "unexpected argument 'b'"},
        {"STATUS a wait=1", PROTO_ESYNTAX, "STATUS does not take option 'wait'"},
        {"STATUS a shared", PROTO_ESYNTAX, NULL},
    };
    CHECK_CASES(c);
}
END_TEST

START_TEST(test_err_buffer)
{
    struct proto_req req;
    char small[8];

    strcpy(lbuf, "LOCK a foo=1");
    ck_assert_int_eq(proto_parse(lbuf, &req, NULL, 0), PROTO_ESYNTAX);
    strcpy(lbuf, "LOCK a foo=1");
    memset(small, 'X', sizeof(small));
    ck_assert_int_eq(proto_parse(lbuf, &req, small, 5), PROTO_ESYNTAX);
    ck_assert_str_eq(small, "unkn"); /* cut, NUL-terminated, nothing written past errlen */
    ck_assert_int_eq(small[5], 'X');
    strcpy(lbuf, "PING");
    ck_assert_int_eq(proto_parse(lbuf, &req, small, sizeof(small)), PROTO_OK);
    ck_assert_str_eq(small, ""); /* cleared on success */
    /* a long bad token is quoted short */
    ck_assert_int_eq(parse(fmt("LOCK a wait=%s", rep('9', 900)), &req), PROTO_ESYNTAX);
    ck_assert_uint_lt(strlen(errbuf), 100);
    ck_assert_int_eq(strncmp(errbuf, "bad duration 'wait=999", 22), 0);
}
END_TEST

/* ---------------------------------------------------------------- line splitter */

START_TEST(test_lines_basic)
{
    struct proto_lines pl;
    char out[64];

    proto_lines_init(&pl, 64);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -1);
    ck_assert_int_eq(proto_lines_feed(&pl, "PING\nLOCK a\r\n\nPI", 16), 0);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 4);
    ck_assert_str_eq(out, "PING");
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 6);
    ck_assert_str_eq(out, "LOCK a");
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 0);
    ck_assert_str_eq(out, "");
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -1);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -1);
    ck_assert_int_eq(proto_lines_feed(&pl, "NG\r", 3), 0);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -1);
    ck_assert_int_eq(proto_lines_feed(&pl, "\n", 1), 0);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 4);
    ck_assert_str_eq(out, "PING");
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -1);
    ck_assert_uint_eq(pl.len, 0);
    /* only one '\r' before the '\n' is dropped; others stay */
    ck_assert_int_eq(proto_lines_feed(&pl, "a\rb\r\r\n", 6), 0);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 4);
    ck_assert_str_eq(out, "a\rb\r");
    proto_lines_free(&pl);
    ck_assert_ptr_null(pl.buf);
}
END_TEST

START_TEST(test_lines_max)
{
    struct proto_lines pl;
    char out[16];
    char line[64];

    /* exactly max bytes with the '\n': ok */
    proto_lines_init(&pl, 16);
    strcpy(line, fmt("%s\n", rep('a', 15)));
    proto_lines_feed(&pl, line, 16);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 15);
    ck_assert_str_eq(out, rep('a', 15));
    /* exactly max with "\r\n" */
    strcpy(line, fmt("%s\r\n", rep('b', 14)));
    proto_lines_feed(&pl, line, 16);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 14);
    ck_assert_str_eq(out, rep('b', 14));
    /* max + 1: too long, and stays so */
    strcpy(line, fmt("%s\n", rep('c', 16)));
    proto_lines_feed(&pl, line, 17);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -2);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -2);
    proto_lines_feed(&pl, "PING\n", 5);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -2);
    proto_lines_free(&pl);

    /* max + 1 with "\r\n" is too long too: the '\r' counts */
    proto_lines_init(&pl, 16);
    strcpy(line, fmt("%s\r\n", rep('d', 15)));
    proto_lines_feed(&pl, line, 17);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -2);
    proto_lines_free(&pl);

    /* no '\n' yet: max - 1 bytes may still become a line, max bytes cannot */
    proto_lines_init(&pl, 16);
    proto_lines_feed(&pl, rep('e', 15), 15);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -1);
    proto_lines_feed(&pl, "\n", 1);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 15);
    proto_lines_feed(&pl, rep('f', 15), 15);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -1);
    proto_lines_feed(&pl, "f", 1);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -2);
    proto_lines_free(&pl);

    /* far more than max without '\n', byte by byte: -2 as soon as max bytes are in */
    proto_lines_init(&pl, 16);
    for (int i = 0; i < 40; i++) {
        proto_lines_feed(&pl, "g", 1);
        ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), i + 1 >= 16 ? -2 : -1);
    }
    proto_lines_free(&pl);

    /* a good line, then a long one in the same chunk */
    proto_lines_init(&pl, 16);
    strcpy(line, fmt("ok\n%s\nPING\n", rep('h', 20)));
    proto_lines_feed(&pl, line, strlen(line));
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 2);
    ck_assert_str_eq(out, "ok");
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -2);
    proto_lines_free(&pl);
}
END_TEST

START_TEST(test_lines_incremental_scan)
{
    struct proto_lines pl;
    char out[PROTO_LINE_DEFAULT];

    /* a line arriving byte by byte is scanned once: scanned keeps up with len */
    proto_lines_init(&pl, sizeof(out));
    for (int i = 0; i < 1000; i++) {
        proto_lines_feed(&pl, "x", 1);
        ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -1);
        ck_assert_uint_eq(pl.scanned, pl.len);
    }
    proto_lines_feed(&pl, "\n", 1);
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 1000);
    ck_assert_uint_eq(pl.scanned, 0);
    ck_assert_uint_eq(pl.len, 0);
    proto_lines_free(&pl);
}
END_TEST

START_TEST(test_lines_many)
{
    struct proto_lines pl;
    char out[64];
    enum { N = 1000000 }; /* linear: milliseconds; quadratic (moving the rest per line): hours */
    char *big = malloc((size_t)N * 9);
    size_t n = 0;

    ck_assert_ptr_nonnull(big);
    for (int i = 0; i < N; i++)
        n += (size_t)sprintf(big + n, "P%06d\n", i % 1000000);
    /* one huge chunk of many small lines: returning each must not move the rest */
    proto_lines_init(&pl, sizeof(out));
    ck_assert_int_eq(proto_lines_feed(&pl, big, n), 0);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), 7);
        if (i % 9973 == 0)
            ck_assert_str_eq(out, fmt("P%06d", i));
    }
    ck_assert_int_eq(proto_lines_next(&pl, out, sizeof(out)), -1);
    ck_assert_uint_eq(pl.len, 0);
    /* the buffer is reused: feeding the same again does not grow it */
    size_t cap = pl.cap;
    ck_assert_int_eq(proto_lines_feed(&pl, big, n), 0);
    ck_assert_uint_eq(pl.cap, cap);
    proto_lines_free(&pl);
    free(big);
}
END_TEST

/* ---------------------------------------------------------------- split at every byte */

/* The parse of one line, with its strings copied out so it can be compared with another. */
struct result {
    enum proto_err e;
    char err[ERRLEN];
    char text[8192]; /* tag, verb, names, strings, numbers, one after the other */
};

static void record(const char *line, struct result *r)
{
    struct proto_req req;
    char copy[8192];
    size_t n = 0;

    strcpy(copy, line);
    r->e = proto_parse(copy, &req, r->err, sizeof(r->err));
    n += (size_t)snprintf(r->text + n, sizeof(r->text) - n, "tag=%s verb=%d nnames=%d", req.tag, req.verb,
                          req.nnames);
    for (int i = 0; i < req.nnames && r->e == PROTO_OK; i++)
        n += (size_t)snprintf(r->text + n, sizeof(r->text) - n, " [%s]", req.names[i]);
    if (r->e == PROTO_OK)
        n += (size_t)snprintf(r->text + n, sizeof(r->text) - n,
                              " f=%u has=%u w=%lld l=%lld t=%lld lim=%lld p=%lld c=%lld n=%lld o=%s cn=%s s=%s a=%s id=%s",
                              req.flags, req.has, (long long)req.wait_ms, (long long)req.lease_ms,
                              (long long)req.ttl_ms, (long long)req.limit, (long long)req.permits,
                              (long long)req.count, (long long)req.n, req.owner,
                              req.client_name ? req.client_name : "-", req.session ? req.session : "-",
                              req.auth ? req.auth : "-", req.id ? req.id : "-");
}

static const char *const split_requests[] = {
    "#t1 LOCK a b shared wait=5s lease=1m owner=x id=9\r\n",
    "HELLO ttl=30s name=billing-7 session=abc auth=pw\n",
    "ACQUIRE s limit=3 permits=2 wait=inf\n",
    "UNLOCK a all owner=\r\n",
    "LATCH l count=2 ttl=1h\n",
    "#x STATUS invoices\r\n",
    "FROB x\n",
    "LOCK a wait=5x\n",
    "#bad! PING\n",
    "\n",
    "\r\n",
    "\tPING \r\n",
};
#define NSPLIT (sizeof(split_requests) / sizeof(split_requests[0]))

/* Feeds data in the given chunk sizes (0-terminated list, rest in one) and returns the one line. */
static void feed_split(const char *data, size_t cut, int bytewise, struct result *r)
{
    struct proto_lines pl;
    char out[PROTO_LINE_DEFAULT];
    size_t len = strlen(data);
    long got = -1;
    int lines = 0;

    proto_lines_init(&pl, sizeof(out));
    for (size_t off = 0; off < len;) {
        size_t chunk = bytewise ? 1 : off == 0 ? cut : len - off;
        ck_assert_int_eq(proto_lines_feed(&pl, data + off, chunk), 0);
        off += chunk;
        long n;
        while ((n = proto_lines_next(&pl, out, sizeof(out))) >= 0) {
            ck_assert_msg(off == len, "line returned before its '\\n' arrived (cut %zu)", cut);
            got = n;
            lines++;
            record(out, r);
        }
        ck_assert_int_eq(n, -1);
    }
    ck_assert_int_eq(lines, 1);
    ck_assert_int_eq(got, (long)strlen(out));
    proto_lines_free(&pl);
}

static void same(const struct result *a, const struct result *b, const char *req, size_t cut)
{
    ck_assert_msg(a->e == b->e, "%s cut %zu: error %d vs %d", req, cut, a->e, b->e);
    ck_assert_msg(strcmp(a->err, b->err) == 0, "%s cut %zu: '%s' vs '%s'", req, cut, a->err, b->err);
    ck_assert_msg(strcmp(a->text, b->text) == 0, "%s cut %zu: '%s' vs '%s'", req, cut, a->text, b->text);
}

START_TEST(test_split_every_byte)
{
    static struct result want, got;
    const char *data = split_requests[_i];
    size_t len = strlen(data);
    char line[512];

    /* the reference: the line without its terminator, parsed directly */
    memcpy(line, data, len - 1);
    line[len - 1] = '\0';
    record(line, &want);
    for (size_t cut = 1; cut < len; cut++) {
        feed_split(data, cut, 0, &got);
        same(&want, &got, data, cut);
    }
    feed_split(data, len, 0, &got);
    same(&want, &got, data, len);
    feed_split(data, 0, 1, &got);
    same(&want, &got, data, 0);
}
END_TEST

/* The reference results of the split requests, checked once so the split test compares against truth. */
START_TEST(test_split_references)
{
    static struct result r;

    record("#t1 LOCK a b shared wait=5s lease=1m owner=x id=9\r", &r);
    ck_assert_int_eq(r.e, PROTO_OK);
    ck_assert_ptr_nonnull(strstr(r.text, "tag=t1 verb=4 nnames=2 [a] [b] f=1 "));
    ck_assert_ptr_nonnull(strstr(r.text, " w=5000 l=60000 "));
    record("FROB x", &r);
    ck_assert_int_eq(r.e, PROTO_EUNKNOWN);
    record("LOCK a wait=5x", &r);
    ck_assert_str_eq(r.err, "bad duration 'wait=5x'");
    record("\tPING \r", &r);
    ck_assert_int_eq(r.e, PROTO_OK);
    ck_assert_ptr_nonnull(strstr(r.text, "verb=1 "));
}
END_TEST

START_TEST(test_split_stream)
{
    /* all requests back to back, fed byte by byte and in 2-, 3- and 7-byte chunks */
    static const size_t steps[] = {1, 2, 3, 7, 64};
    static struct result want, got;
    char all[4096] = "";
    char out[PROTO_LINE_DEFAULT];

    for (size_t i = 0; i < NSPLIT; i++)
        strcat(all, split_requests[i]);
    for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
        struct proto_lines pl;
        size_t len = strlen(all), k = 0;
        long n;

        proto_lines_init(&pl, sizeof(out));
        for (size_t off = 0; off < len; off += steps[s]) {
            size_t chunk = off + steps[s] <= len ? steps[s] : len - off;
            proto_lines_feed(&pl, all + off, chunk);
            while ((n = proto_lines_next(&pl, out, sizeof(out))) >= 0) {
                char line[512];
                size_t rl = strlen(split_requests[k]);
                ck_assert_uint_lt(k, NSPLIT);
                memcpy(line, split_requests[k], rl - 1);
                line[rl - 1] = '\0';
                record(line, &want);
                record(out, &got);
                same(&want, &got, split_requests[k], steps[s]);
                k++;
            }
        }
        ck_assert_uint_eq(k, NSPLIT);
        proto_lines_free(&pl);
    }
}
END_TEST

/* ---------------------------------------------------------------- formatters */

/* The formatter's return is the length of what it wrote, which must be want. */
#define ck_fmt(call, want)                                                                         \
    do {                                                                                           \
        int n_ = (call);                                                                           \
        ck_assert_str_eq(buf, want);                                                               \
        ck_assert_int_eq(n_, (int)strlen(want));                                                   \
    } while (0)

START_TEST(test_fmt_reply)
{
    char buf[128];

    ck_fmt(proto_fmt_reply(buf, sizeof(buf), NULL, "OK", NULL), "OK\n");
    ck_fmt(proto_fmt_reply(buf, sizeof(buf), "", "OK", NULL), "OK\n");
    ck_fmt(proto_fmt_reply(buf, sizeof(buf), "a", "OK", "token=%d count=%d", 3, 1), "#a OK token=3 count=1\n");
    ck_fmt(proto_fmt_reply(buf, sizeof(buf), NULL, "BUSY", "holder=%s ttl=%d", "x", 5), "BUSY holder=x ttl=5\n");
    ck_fmt(proto_fmt_reply(buf, sizeof(buf), "q", "TIMEOUT", NULL), "#q TIMEOUT\n");
    ck_fmt(proto_fmt_reply(buf, sizeof(buf), "a", "* LOST", "%s token=%d reason=%s", "n", 5, "lease"),
           "#a * LOST n token=5 reason=lease\n");
    /* empty text: no trailing space */
    ck_fmt(proto_fmt_reply(buf, sizeof(buf), NULL, "OK", "%s", ""), "OK\n");
    /* a newline in the text cannot split the reply */
    ck_fmt(proto_fmt_reply(buf, sizeof(buf), NULL, "OK", "%s", "a\nb\rc"), "OK a b c\n");
    ck_fmt(proto_fmt_reply(buf, sizeof(buf), NULL, "OK", "{\"json\":%d}", 1), "OK {\"json\":1}\n");
}
END_TEST

START_TEST(test_fmt_fit)
{
    char buf[64];

    /* "#a OK x=1\n" is 10 bytes and needs 11 with the NUL */
    memset(buf, 'Z', sizeof(buf));
    ck_assert_int_eq(proto_fmt_reply(buf, 11, "a", "OK", "x=%d", 1), 10);
    ck_assert_str_eq(buf, "#a OK x=1\n");
    ck_assert_int_eq(buf[11], 'Z');
    for (size_t cap = 0; cap <= 10; cap++) {
        memset(buf, 'Z', sizeof(buf));
        ck_assert_msg(proto_fmt_reply(buf, cap, "a", "OK", "x=%d", 1) == -1, "fits in %zu", cap);
        ck_assert_int_eq(buf[cap], 'Z'); /* nothing written past cap */
    }
    ck_assert_int_eq(proto_fmt_reply(buf, 3, NULL, "OK", NULL), -1);
    ck_assert_int_eq(proto_fmt_reply(buf, 4, NULL, "OK", NULL), 3);
    ck_assert_int_eq(proto_fmt_reply(NULL, 0, NULL, "OK", NULL), -1);

    /* "ERR LIMIT too many\n" is 19 bytes */
    ck_assert_int_eq(proto_fmt_err(buf, 20, NULL, PROTO_ELIMIT, "too %s", "many"), 19);
    ck_assert_str_eq(buf, "ERR LIMIT too many\n");
    for (size_t cap = 0; cap < 20; cap++) {
        memset(buf, 'Z', sizeof(buf));
        ck_assert_int_eq(proto_fmt_err(buf, cap, NULL, PROTO_ELIMIT, "too %s", "many"), -1);
        ck_assert_int_eq(buf[cap], 'Z');
    }
}
END_TEST

START_TEST(test_fmt_err)
{
    char buf[128];

    ck_fmt(proto_fmt_err(buf, sizeof(buf), NULL, PROTO_EUNKNOWN, "unknown verb '%s'", "FROB"),
           "ERR UNKNOWN unknown verb 'FROB'\n");
    ck_fmt(proto_fmt_err(buf, sizeof(buf), "a", PROTO_ENOTHELD, "not held"), "#a ERR NOTHELD not held\n");
    ck_fmt(proto_fmt_err(buf, sizeof(buf), NULL, PROTO_EBACKEND, NULL), "ERR BACKEND\n");
    ck_assert_int_eq(proto_fmt_err(buf, sizeof(buf), NULL, PROTO_OK, "x"), -1);
    ck_assert_int_eq(proto_fmt_err(buf, sizeof(buf), NULL, PROTO_NERR, "x"), -1);
}
END_TEST

/* Every error code survives formatting and parsing back. */
START_TEST(test_fmt_err_roundtrip)
{
    char buf[128];
    struct proto_reply r;

    for (int e = PROTO_OK + 1; e < PROTO_NERR; e++) {
        int n = proto_fmt_err(buf, sizeof(buf), "t", (enum proto_err)e, "text %d here", e);
        ck_assert_int_gt(n, 0);
        ck_assert_int_eq(buf[n - 1], '\n');
        buf[n - 1] = '\0';
        ck_assert_int_eq(proto_parse_reply(buf, &r), 0);
        ck_assert_str_eq(r.tag, "t");
        ck_assert_str_eq(r.status, "ERR");
        ck_assert_int_eq(r.err, e);
        ck_assert_str_eq(r.text, fmt("text %d here", e));
    }
}
END_TEST

/* ---------------------------------------------------------------- reply parser */

static int preply(const char *line, struct proto_reply *r)
{
    strcpy(lbuf, line);
    return proto_parse_reply(lbuf, r);
}

START_TEST(test_reply_ok)
{
    struct proto_reply r;

    ck_assert_int_eq(preply("#a OK token=3 count=1", &r), 0);
    ck_assert_str_eq(r.tag, "a");
    ck_assert_int_eq(r.event, 0);
    ck_assert_str_eq(r.status, "OK");
    ck_assert_int_eq(r.nkv, 2);
    ck_assert_str_eq(r.keys[0], "token");
    ck_assert_str_eq(proto_reply_get(&r, "token"), "3");
    ck_assert_str_eq(proto_reply_get(&r, "count"), "1");
    ck_assert_ptr_null(proto_reply_get(&r, "held"));
    ck_assert_ptr_null(r.text);
    ck_assert_ptr_null(r.arg);

    ck_assert_int_eq(preply("OK", &r), 0);
    ck_assert_str_eq(r.status, "OK");
    ck_assert_str_eq(r.tag, "");
    ck_assert_int_eq(r.nkv, 0);

    ck_assert_int_eq(preply("OK session=9f1c2a7e0b3d ttl=30000 proto=1 server=dlockd/0.1.0 resumed=0\r", &r), 0);
    ck_assert_int_eq(r.nkv, 5);
    ck_assert_str_eq(proto_reply_get(&r, "server"), "dlockd/0.1.0");
    ck_assert_str_eq(proto_reply_get(&r, "resumed"), "0");

    ck_assert_int_eq(preply("OK tokens=1,2 counts=1,1 empty=", &r), 0);
    ck_assert_str_eq(proto_reply_get(&r, "tokens"), "1,2");
    ck_assert_str_eq(proto_reply_get(&r, "empty"), "");

    ck_assert_int_eq(preply("BUSY holder=x ttl=5", &r), 0);
    ck_assert_str_eq(r.status, "BUSY");
    ck_assert_str_eq(proto_reply_get(&r, "holder"), "x");
    ck_assert_str_eq(proto_reply_get(&r, "ttl"), "5");

    ck_assert_int_eq(preply("#w TIMEOUT", &r), 0);
    ck_assert_str_eq(r.status, "TIMEOUT");
    ck_assert_str_eq(r.tag, "w");
}
END_TEST

START_TEST(test_reply_json)
{
    struct proto_reply r;

    ck_assert_int_eq(preply("OK {\"json\":1}", &r), 0);
    ck_assert_str_eq(r.status, "OK");
    ck_assert_str_eq(r.text, "{\"json\":1}");
    ck_assert_int_eq(r.nkv, 0);
    /* spaces and '=' inside the JSON are not split */
    ck_assert_int_eq(preply("#s OK {\"name\":\"a b=c\", \"holders\":[]}\r", &r), 0);
    ck_assert_str_eq(r.tag, "s");
    ck_assert_str_eq(r.text, "{\"name\":\"a b=c\", \"holders\":[]}");
    ck_assert_int_eq(r.nkv, 0);
}
END_TEST

START_TEST(test_reply_err)
{
    struct proto_reply r;

    ck_assert_int_eq(preply("ERR NOTHELD not held", &r), 0);
    ck_assert_str_eq(r.status, "ERR");
    ck_assert_int_eq(r.err, PROTO_ENOTHELD);
    ck_assert_str_eq(r.text, "not held");
    ck_assert_int_eq(preply("#q ERR SYNTAX bad duration 'wait=5x'", &r), 0);
    ck_assert_str_eq(r.tag, "q");
    ck_assert_int_eq(r.err, PROTO_ESYNTAX);
    ck_assert_str_eq(r.text, "bad duration 'wait=5x'");
    ck_assert_int_eq(r.nkv, 0);
    ck_assert_int_eq(preply("ERR LIMIT", &r), 0);
    ck_assert_int_eq(r.err, PROTO_ELIMIT);
    ck_assert_str_eq(r.text, "");
    ck_assert_int_eq(preply("ERR UNKNOWN unknown verb 'FROB'\r", &r), 0);
    ck_assert_int_eq(r.err, PROTO_EUNKNOWN);
    ck_assert_str_eq(r.text, "unknown verb 'FROB'");
}
END_TEST

START_TEST(test_reply_events)
{
    struct proto_reply r;

    ck_assert_int_eq(preply("* LOST name token=5 reason=lease", &r), 0);
    ck_assert_int_eq(r.event, 1);
    ck_assert_str_eq(r.status, "LOST");
    ck_assert_str_eq(r.arg, "name");
    ck_assert_int_eq(r.nkv, 2);
    ck_assert_str_eq(proto_reply_get(&r, "token"), "5");
    ck_assert_str_eq(proto_reply_get(&r, "reason"), "lease");
    ck_assert_str_eq(r.tag, "");

    ck_assert_int_eq(preply("* JEOPARDY", &r), 0);
    ck_assert_int_eq(r.event, 1);
    ck_assert_str_eq(r.status, "JEOPARDY");
    ck_assert_ptr_null(r.arg);
    ck_assert_int_eq(r.nkv, 0);

    ck_assert_int_eq(preply("* SAFE\r", &r), 0);
    ck_assert_str_eq(r.status, "SAFE");

    ck_assert_int_eq(preply("* BYE reason=expired", &r), 0);
    ck_assert_int_eq(r.event, 1);
    ck_assert_str_eq(r.status, "BYE");
    ck_assert_ptr_null(r.arg);
    ck_assert_str_eq(proto_reply_get(&r, "reason"), "expired");

    /* an ERR-looking event is an event, not an error reply */
    ck_assert_int_eq(preply("* ERR x", &r), 0);
    ck_assert_int_eq(r.event, 1);
    ck_assert_int_eq(r.err, PROTO_OK);
}
END_TEST

START_TEST(test_reply_invalid)
{
    static const char *const bad[] = {
        "", "   ", "HELLO", "ok", "Ok token=1", "*", "* lost x", "* LOST1", "#bad! OK", "# OK", "#a",
        "ERR", "ERR BOGUS text", "ERR syntax x", "OK a b", "OK token=1 name", "OK =x", "PING",
    };
    struct proto_reply r;
    char line[4096];
    size_t n = 0;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(preply(bad[i], &r) == -1, "'%s' accepted", bad[i]);
    /* PROTO_MAX_KV pairs fit, one more does not */
    n += (size_t)snprintf(line + n, sizeof(line) - n, "OK");
    for (int i = 0; i < PROTO_MAX_KV; i++)
        n += (size_t)snprintf(line + n, sizeof(line) - n, " k%d=%d", i, i);
    ck_assert_int_eq(preply(line, &r), 0);
    ck_assert_int_eq(r.nkv, PROTO_MAX_KV);
    ck_assert_str_eq(proto_reply_get(&r, "k31"), "31");
    snprintf(line + n, sizeof(line) - n, " k32=32");
    ck_assert_int_eq(preply(line, &r), -1);
}
END_TEST

/* A reply formatted by proto_fmt_reply parses back to what was formatted. */
START_TEST(test_reply_roundtrip)
{
    char buf[128];
    struct proto_reply r;
    int n = proto_fmt_reply(buf, sizeof(buf), "tag-1", "OK", "token=%lld held=%d free=%d", 1795312345678901LL, 2, 1);

    ck_assert_int_gt(n, 0);
    buf[n - 1] = '\0';
    ck_assert_int_eq(proto_parse_reply(buf, &r), 0);
    ck_assert_str_eq(r.tag, "tag-1");
    ck_assert_str_eq(r.status, "OK");
    ck_assert_str_eq(proto_reply_get(&r, "token"), "1795312345678901");
    ck_assert_str_eq(proto_reply_get(&r, "held"), "2");
    ck_assert_str_eq(proto_reply_get(&r, "free"), "1");
}
END_TEST

/* ---------------------------------------------------------------- suite */

static Suite *proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *tc;

    tc = tcase_create("codes");
    tcase_add_test(tc, test_err_codes);
    tcase_add_test(tc, test_verb_names);
    suite_add_tcase(s, tc);

    tc = tcase_create("duration");
    tcase_add_test(tc, test_duration_valid);
    tcase_add_test(tc, test_duration_invalid);
    suite_add_tcase(s, tc);

    tc = tcase_create("framing");
    tcase_add_test(tc, test_empty_lines);
    tcase_add_test(tc, test_verb_case_and_separators);
    tcase_add_test(tc, test_crlf);
    tcase_add_test(tc, test_control_bytes);
    tcase_add_test(tc, test_unknown_verb);
    tcase_add_test(tc, test_tags);
    tcase_add_test(tc, test_valid_name);
    tcase_add_test(tc, test_names_in_requests);
    tcase_add_test(tc, test_name_limits);
    tcase_add_test(tc, test_err_buffer);
    suite_add_tcase(s, tc);

    tc = tcase_create("verbs");
    tcase_add_test(tc, test_hello);
    tcase_add_test(tc, test_ping_quit_info);
    tcase_add_test(tc, test_auth);
    tcase_add_test(tc, test_lock);
    tcase_add_test(tc, test_unlock);
    tcase_add_test(tc, test_acquire);
    tcase_add_test(tc, test_release);
    tcase_add_test(tc, test_latch);
    tcase_add_test(tc, test_countdown_await_status);
    suite_add_tcase(s, tc);

    tc = tcase_create("lines");
    tcase_add_test(tc, test_lines_basic);
    tcase_add_test(tc, test_lines_max);
    tcase_add_test(tc, test_lines_incremental_scan);
    tcase_add_test(tc, test_split_references);
    tcase_add_loop_test(tc, test_split_every_byte, 0, (int)NSPLIT);
    tcase_add_test(tc, test_split_stream);
    suite_add_tcase(s, tc);

    /* its own case, with a timeout that a splitter quadratic in the buffered bytes cannot meet */
    tc = tcase_create("lines_linear");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_lines_many);
    suite_add_tcase(s, tc);

    tc = tcase_create("format");
    tcase_add_test(tc, test_fmt_reply);
    tcase_add_test(tc, test_fmt_fit);
    tcase_add_test(tc, test_fmt_err);
    tcase_add_test(tc, test_fmt_err_roundtrip);
    suite_add_tcase(s, tc);

    tc = tcase_create("reply");
    tcase_add_test(tc, test_reply_ok);
    tcase_add_test(tc, test_reply_json);
    tcase_add_test(tc, test_reply_err);
    tcase_add_test(tc, test_reply_events);
    tcase_add_test(tc, test_reply_invalid);
    tcase_add_test(tc, test_reply_roundtrip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(proto_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
