/* proto.h - the dlockd text protocol: split, parse and format lines, with no I/O. */
#ifndef DLOCK_PROTO_H
#define DLOCK_PROTO_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_VERSION 1
#define PROTO_TAG_MAX 32         /* characters after '#' */
#define PROTO_NAME_MAX 200       /* bytes in a lock, semaphore or latch name */
#define PROTO_STR_MAX 200        /* bytes in owner=, name=, session=, id= values */
#define PROTO_MAX_NAMES 64       /* names in one request */
#define PROTO_MAX_KV 32          /* key=value pairs in one reply */
#define PROTO_LINE_DEFAULT 4096  /* default max-line */
#define PROTO_DURATION_MAX 2147483647LL
#define PROTO_WAIT_INF (-1)      /* wait_ms for wait=inf */

/* Error codes, in the order of the contract's table. */
enum proto_err {
    PROTO_OK = 0,
    PROTO_ESYNTAX,
    PROTO_EUNKNOWN,
    PROTO_ETOOBIG,
    PROTO_ENOAUTH,
    PROTO_ENOSESSION,
    PROTO_ENOTHELD,
    PROTO_EWRONGTYPE,
    PROTO_EMISMATCH,
    PROTO_EDEADLOCK,
    PROTO_ELIMIT,
    PROTO_EBACKEND,
    PROTO_NERR
};

enum proto_verb {
    VERB_HELLO,
    VERB_PING,
    VERB_QUIT,
    VERB_AUTH,
    VERB_LOCK,
    VERB_UNLOCK,
    VERB_ACQUIRE,
    VERB_RELEASE,
    VERB_LATCH,
    VERB_COUNTDOWN,
    VERB_AWAIT,
    VERB_STATUS,
    VERB_INFO,
    VERB_LIST,
    VERB_SESSIONS,
    VERB_KILL,
    VERB_FORCE,
    VERB_NVERBS
};

/* Flags: bare lower-case words after the names. */
#define PROTO_F_SHARED (1u << 0)
#define PROTO_F_ALL (1u << 1)

/* Options: key=value. `has` has the bit of every option present. */
#define PROTO_O_WAIT (1u << 0)
#define PROTO_O_LEASE (1u << 1)
#define PROTO_O_OWNER (1u << 2)
#define PROTO_O_TTL (1u << 3)
#define PROTO_O_NAME (1u << 4)
#define PROTO_O_SESSION (1u << 5)
#define PROTO_O_AUTH (1u << 6)
#define PROTO_O_LIMIT (1u << 7)
#define PROTO_O_PERMITS (1u << 8)
#define PROTO_O_COUNT (1u << 9)
#define PROTO_O_N (1u << 10)
#define PROTO_O_ID (1u << 11)
#define PROTO_O_SECRET (1u << 12)

/* A parsed request. String pointers point into the line given to proto_parse(). */
struct proto_req {
    char tag[PROTO_TAG_MAX + 1]; /* without '#'; "" when untagged */
    enum proto_verb verb;
    int nnames;                       /* positional arguments */
    const char *names[PROTO_MAX_NAMES]; /* names, or AUTH's password */
    unsigned flags;                   /* PROTO_F_* */
    unsigned has;                     /* PROTO_O_* present */
    int64_t wait_ms;                  /* 0 unless given; PROTO_WAIT_INF for inf */
    int64_t lease_ms;                 /* lease= */
    int64_t ttl_ms;                   /* ttl= */
    int64_t limit, permits, count, n; /* semaphore and latch numbers, >= 1 (n, count: >= 0 for count) */
    const char *owner;                /* "" unless owner= */
    const char *client_name;          /* name= of HELLO */
    const char *session;              /* session= of HELLO */
    const char *auth;                 /* auth= of HELLO */
    const char *secret;               /* secret= of HELLO */
    const char *id;                   /* id= request id */
};

/* Incremental line splitter for a byte stream (the client's and the tests'; conn.c has its own). */
struct proto_lines {
    char *buf;      /* bytes received; the pending ones start at buf + off */
    size_t off;     /* bytes at the front of buf already returned as lines */
    size_t len;     /* bytes pending (received, not yet returned as lines) */
    size_t cap;     /* allocated size of buf */
    size_t max;     /* max-line: a line with its terminator may not be longer */
    size_t scanned; /* pending bytes already known to hold no '\n' */
};

/* A parsed reply or event line. Pointers point into the line. */
struct proto_reply {
    char tag[PROTO_TAG_MAX + 1]; /* "" when untagged */
    int event;                   /* 1 for a '*' event line */
    const char *status;          /* OK BUSY TIMEOUT ERR, or the event word (LOST ...) */
    enum proto_err err;          /* for ERR: the code */
    const char *text;            /* for ERR: the human text; for OK {json}: the JSON */
    const char *arg;             /* first bare word after the event word (LOST's name) */
    int nkv;
    const char *keys[PROTO_MAX_KV];
    const char *vals[PROTO_MAX_KV];
};

/* "SYNTAX", "UNKNOWN", ...; NULL for PROTO_OK or out of range. */
const char *proto_err_code(enum proto_err e);
/* The code for a name such as "NOTHELD", or PROTO_OK when unknown. */
enum proto_err proto_err_from_code(const char *code);
/* "HELLO", "LOCK", ... */
const char *proto_verb_name(enum proto_verb v);

/*
 * Parses a duration: an integer with optional suffix ms, s, m or h, up to
 * PROTO_DURATION_MAX ms; "inf" when allow_inf (gives PROTO_WAIT_INF).
 * Returns 0 and sets *ms, or -1.
 */
int proto_duration(const char *s, int allow_inf, int64_t *ms);

/*
 * 1 when s is a valid name (1-200 bytes of 0x21-0x7E, no '=', not starting
 * with '}', which would leave its keys' hash tag empty), else 0.
 */
int proto_valid_name(const char *s);

/*
 * Parses one request line (without its terminator; a trailing '\r' is
 * dropped). Tokenises in place, so the line is modified and req points into
 * it. Returns PROTO_OK, or an error code with a human message in err.
 * A control byte other than TAB (0x00-0x1F, 0x7F) is PROTO_ESYNTAX.
 * A malformed tag leaves req->tag empty (the error is answered untagged);
 * for other errors the tag is set. An empty line returns PROTO_OK with
 * verb = VERB_NVERBS (to be ignored).
 */
enum proto_err proto_parse(char *line, struct proto_req *req, char *err, size_t errlen);
/* proto_parse for a line of len bytes (line[len] is '\0') that may hold NUL bytes: any is PROTO_ESYNTAX. */
enum proto_err proto_parse_len(char *line, size_t len, struct proto_req *req, char *err, size_t errlen);

/* Initialises a splitter for lines of at most max bytes with terminator. */
void proto_lines_init(struct proto_lines *pl, size_t max);
void proto_lines_free(struct proto_lines *pl);
/* Appends received bytes. Returns 0, or -1 on allocation failure. */
int proto_lines_feed(struct proto_lines *pl, const char *data, size_t len);
/*
 * Takes the next complete line: copies it without "\n" (and without a
 * trailing "\r") NUL-terminated into out (size outcap >= max). Returns
 * the line length, -1 when no complete line is buffered, -2 when the
 * buffered line is longer than max, or max bytes arrived without a '\n'
 * (the stream is then unusable: -2 again on every later call).
 */
long proto_lines_next(struct proto_lines *pl, char *out, size_t outcap);

/*
 * Formats "[#tag ]STATUS[ fmt...]\n" into buf. Returns the length written,
 * or -1 when it does not fit. tag may be NULL or "".
 */
int proto_fmt_reply(char *buf, size_t cap, const char *tag, const char *status, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int proto_vfmt_reply(char *buf, size_t cap, const char *tag, const char *status, const char *fmt, va_list ap);
/* Formats "[#tag ]ERR CODE text\n". */
int proto_fmt_err(char *buf, size_t cap, const char *tag, enum proto_err e, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int proto_vfmt_err(char *buf, size_t cap, const char *tag, enum proto_err e, const char *fmt, va_list ap);

/*
 * Parses a reply or event line (without terminator) in place. Returns 0,
 * or -1 when the line is not a reply.
 */
int proto_parse_reply(char *line, struct proto_reply *r);
/* The value of key in a parsed reply, or NULL. */
const char *proto_reply_get(const struct proto_reply *r, const char *key);

#endif
