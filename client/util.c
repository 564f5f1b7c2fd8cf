/* util.c - libdlock helpers: monotonic time, owners, error codes, string building. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* The protocol's codes are the library's first codes, negated (dlock.h promises it). */
_Static_assert(DLOCK_ERR_SYNTAX == -(int)PROTO_ESYNTAX, "error codes mirror the protocol");
_Static_assert(DLOCK_ERR_BACKEND == -(int)PROTO_EBACKEND, "error codes mirror the protocol");
_Static_assert(PROTO_NERR <= 100, "protocol codes fit below the library's own");

int64_t dl_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dl_deadline_ts(int64_t ms, struct timespec *ts)
{
    ts->tv_sec = (time_t)(ms / 1000);
    ts->tv_nsec = (long)(ms % 1000) * 1000000;
}

int dl_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc;

    if (pthread_condattr_init(&a) != 0)
        return -1;
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc == 0 ? 0 : -1;
}

/* 1 when s is min..PROTO_STR_MAX bytes of 0x21-0x7E. */
static int printable(const char *s, size_t min)
{
    size_t n = 0;

    for (; s[n] != '\0'; n++)
        if (n >= PROTO_STR_MAX || (unsigned char)s[n] < 0x21 || (unsigned char)s[n] > 0x7e)
            return 0;
    return n >= min;
}

int dl_valid_owner(const char *s)
{
    return printable(s, 0);
}

int dl_valid_value(const char *s)
{
    return printable(s, 1);
}

const char *dl_thread_owner(void)
{
    /* tid for people reading STATUS; the sequence number because tids are reused. */
    static atomic_ulong seq;
    static _Thread_local char owner[48];

    if (owner[0] == '\0')
        snprintf(owner, sizeof(owner), "t%ld.%lu", (long)syscall(SYS_gettid), atomic_fetch_add(&seq, 1) + 1);
    return owner;
}

int dl_err_from_proto(enum proto_err e)
{
    if (e <= PROTO_OK || e >= PROTO_NERR)
        return DLOCK_ERR_PROTO;
    return -(int)e;
}

int dl_appendf(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    va_list ap;
    int n;

    for (;;) {
        size_t room = *cap - *len;

        va_start(ap, fmt);
        n = vsnprintf(*buf ? *buf + *len : NULL, *buf ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0)
            return -1;
        if (*buf && (size_t)n < room) {
            *len += (size_t)n;
            return 0;
        }
        size_t ncap = *cap ? *cap : 128;
        while (ncap < *len + (size_t)n + 1)
            ncap *= 2;
        char *nb = realloc(*buf, ncap);
        if (nb == NULL)
            return -1;
        *buf = nb;
        *cap = ncap;
    }
}

int dl_parse_ull(const char *s, unsigned long long *v)
{
    char *end;

    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    *v = strtoull(s, &end, 10);
    return (errno || *end != '\0') ? -1 : 0;
}

int dl_parse_int(const char *s, int *v)
{
    unsigned long long u;

    if (dl_parse_ull(s, &u) < 0 || u > 0x7fffffffULL)
        return -1;
    *v = (int)u;
    return 0;
}

const char *dlock_strerror(int err)
{
    switch (err) {
    case DLOCK_OK: return "success";
    case DLOCK_ERR_SYNTAX: return "malformed request (ERR SYNTAX)";
    case DLOCK_ERR_UNKNOWN: return "the server does not know this request (ERR UNKNOWN)";
    case DLOCK_ERR_TOOBIG: return "request too long (ERR TOOBIG)";
    case DLOCK_ERR_NOAUTH: return "authentication required or wrong password (ERR NOAUTH)";
    case DLOCK_ERR_NOSESSION: return "no such session (ERR NOSESSION)";
    case DLOCK_ERR_NOTHELD: return "not held (ERR NOTHELD)";
    case DLOCK_ERR_WRONGTYPE: return "the name is in use as another type (ERR WRONGTYPE)";
    case DLOCK_ERR_MISMATCH: return "semaphore limit differs from the one in force (ERR MISMATCH)";
    case DLOCK_ERR_DEADLOCK: return "the request can never be granted (ERR DEADLOCK)";
    case DLOCK_ERR_LIMIT: return "a server limit is reached (ERR LIMIT)";
    case DLOCK_ERR_BACKEND: return "the server cannot reach its backend (ERR BACKEND)";
    case DLOCK_ERR_BUSY: return "busy: held by someone else";
    case DLOCK_ERR_TIMEOUT: return "timed out waiting";
    case DLOCK_ERR_LOST: return "the hold was lost";
    case DLOCK_ERR_CONN: return "no connection to the server, or no reply in time";
    case DLOCK_ERR_INVAL: return "invalid argument";
    case DLOCK_ERR_NOMEM: return "out of memory";
    case DLOCK_ERR_PROTO: return "unexpected reply from the server";
    case DLOCK_ERR_CLOSED: return "the handle is being closed";
    case DLOCK_ERR_SYSTEM: return "system error";
    default: return "unknown error";
    }
}

const char *dlock_version(void)
{
    return PACKAGE_VERSION;
}

int dlock_owner(char *buf, size_t len)
{
    const char *o = dl_thread_owner();

    if (buf == NULL || len <= strlen(o))
        return DLOCK_ERR_INVAL;
    memcpy(buf, o, strlen(o) + 1);
    return 0;
}
