/* log.c - leveled logging to stderr, one line per event; once the event loop
 * runs, the lines of one turn of it go out in one write, at its end. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <syslog.h>
#include <time.h>

#include <event2/event.h>

#include "log.h"

static enum log_level min_level = LEVEL_INFO;
static int to_syslog;
static const char *const level_names[] = { "debug", "info", "notice", "warn", "error" };
static struct event *flush_ev; /* writes the lines of this turn at its end; NULL: each at once */
static char outbuf[1 << 16];

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
    fflush(stderr);
}

void log_buffer(struct event_base *base)
{
    fflush(stderr);
    if (flush_ev)
        event_free(flush_ev);
    flush_ev = NULL;
    if (base == NULL) {
        setvbuf(stderr, NULL, _IONBF, 0);
        return;
    }
    flush_ev = must(event_new(base, -1, 0, on_flush, NULL));
    setvbuf(stderr, outbuf, _IOFBF, sizeof(outbuf));
}

void log_set_level(enum log_level level)
{
    min_level = level;
}

void log_set_syslog(int on)
{
    if (on && !to_syslog)
        openlog("dlockd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
    else if (!on && to_syslog)
        closelog();
    to_syslog = on;
}

int log_parse_level(const char *s, enum log_level *level)
{
    for (int i = 0; i <= LEVEL_ERROR; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *level = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

const char *log_level_name(enum log_level level)
{
    return level_names[level];
}

static void log_emit(enum log_level level, int errnum, const char *fmt, va_list ap)
{
    static char stamp[32]; /* of the second stamped last: lines come by the thousand a second */
    static time_t stamped = -1;
    struct timeval tv;
    struct tm tm;

    if (level < min_level)
        return;
    if (to_syslog) {
        static const int prio[] = { 7 /* debug */, 6 /* info */, 5 /* notice */, 4 /* warning */, 3 /* err */ };
        char text[2048];
        vsnprintf(text, sizeof(text), fmt, ap);
        if (errnum)
            syslog(prio[level], "%s: %s", text, strerror(errnum));
        else
            syslog(prio[level], "%s", text);
        return;
    }
    gettimeofday(&tv, NULL);
    if (tv.tv_sec != stamped) {
        localtime_r(&tv.tv_sec, &tm);
        strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
        stamped = tv.tv_sec;
    }
    fprintf(stderr, "%s.%03d %s ", stamp, (int)(tv.tv_usec / 1000), level_names[level]);
    vfprintf(stderr, fmt, ap);
    if (errnum)
        fprintf(stderr, ": %s", strerror(errnum));
    fputc('\n', stderr);
    if (flush_ev && !event_pending(flush_ev, EV_TIMEOUT, NULL))
        event_active(flush_ev, EV_TIMEOUT, 0);
    else if (level >= LEVEL_ERROR)
        fflush(stderr);
}

#define LOG_BODY(level, errnum)         \
    do {                                \
        va_list ap;                     \
        va_start(ap, fmt);              \
        log_emit(level, errnum, fmt, ap); \
        va_end(ap);                     \
    } while (0)

void log_debug(const char *fmt, ...) { LOG_BODY(LEVEL_DEBUG, 0); }
void log_info(const char *fmt, ...) { LOG_BODY(LEVEL_INFO, 0); }
void log_notice(const char *fmt, ...) { LOG_BODY(LEVEL_NOTICE, 0); }
void log_warnx(const char *fmt, ...) { LOG_BODY(LEVEL_WARN, 0); }

void log_warn(const char *fmt, ...)
{
    int saved = errno;
    LOG_BODY(LEVEL_WARN, saved);
}

void fatalx(const char *fmt, ...)
{
    LOG_BODY(LEVEL_ERROR, 0);
    exit(1);
}

void fatal(const char *fmt, ...)
{
    int saved = errno;
    LOG_BODY(LEVEL_ERROR, saved);
    exit(1);
}

int log_rate_due(struct log_rate *r, uint64_t now, uint64_t every_ms)
{
    r->count++;
    if (r->at != 0 && now < r->at + every_ms)
        return 0;
    r->at = now;
    return 1;
}

void *must_at(void *p, const char *file, int line)
{
    if (p == NULL)
        fatalx("out of memory (%s:%d)", file, line);
    return p;
}

void must_ok_at(int rc, const char *file, int line)
{
    if (rc != 0)
        fatalx("out of memory (%s:%d)", file, line);
}
