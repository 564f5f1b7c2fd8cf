/* log.h - leveled, format-checked logging to stderr. */
#ifndef DLOCKD_LOG_H
#define DLOCKD_LOG_H

/* info carries the audit trail of lock events; notice, what the daemon itself does. */
enum log_level { LEVEL_DEBUG, LEVEL_INFO, LEVEL_NOTICE, LEVEL_WARN, LEVEL_ERROR };

#include <stdint.h>

#define LOG_PRINTF(a, b) __attribute__((format(printf, a, b)))

struct event_base;

void log_set_level(enum log_level level);
/*
 * With base, stderr is buffered and the lines of one turn of base's loop
 * are written at its end, in one write; with NULL (before base is freed),
 * what is buffered is written and each line goes out at once again.
 */
void log_buffer(struct event_base *base);
/* 1: log to syslog (daemon facility) instead of stderr. */
void log_set_syslog(int on);
/* Parses debug, info, notice, warn or error. Returns 0 and sets *level, or -1. */
int log_parse_level(const char *s, enum log_level *level);
const char *log_level_name(enum log_level level);

void log_debug(const char *fmt, ...) LOG_PRINTF(1, 2);
void log_info(const char *fmt, ...) LOG_PRINTF(1, 2);
void log_notice(const char *fmt, ...) LOG_PRINTF(1, 2);
void log_warnx(const char *fmt, ...) LOG_PRINTF(1, 2);
/* Like log_warnx, with strerror(errno) appended. */
void log_warn(const char *fmt, ...) LOG_PRINTF(1, 2);
/* A repeated event that is logged at most once every so often, with how often it happened. */
struct log_rate {
    uint64_t at; /* ms of the last line, 0 for none */
    int count;   /* events since that line, this one included */
};
/* Counts an event at now (ms); 1 when a line about it is due: log r->count, then zero it. */
int log_rate_due(struct log_rate *r, uint64_t now, uint64_t every_ms);

void fatalx(const char *fmt, ...) LOG_PRINTF(1, 2) __attribute__((noreturn));

/* The one out-of-memory path: must(p) is p, an allocation's result, unless it is NULL, which
 * ends the daemon; must_ok(rc) likewise for a call that answers 0 or -1 (event_add, ...). */
#define must(p) must_at((p), __FILE__, __LINE__)
#define must_ok(rc) must_ok_at((rc), __FILE__, __LINE__)
void *must_at(void *p, const char *file, int line);
void must_ok_at(int rc, const char *file, int line);
void fatal(const char *fmt, ...) LOG_PRINTF(1, 2) __attribute__((noreturn));

#endif
