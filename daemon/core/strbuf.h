/* strbuf.h - short strings built without the printf machinery, which costs a
 * request tens of thousands of instructions in snprintf alone. Like snprintf,
 * a strbuf never writes past its buffer, always ends it with a NUL when it has
 * room for one, and counts what it would have written. */
#ifndef DLOCKD_STRBUF_H
#define DLOCKD_STRBUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct strbuf {
    char *buf;
    size_t cap;
    size_t len; /* what was appended, written or not */
};

static inline struct strbuf sb_on(char *buf, size_t cap)
{
    if (cap > 0)
        buf[0] = '\0';
    return (struct strbuf){ buf, cap, 0 };
}

static inline void sb_mem(struct strbuf *b, const char *s, size_t n)
{
    if (b->len + 1 < b->cap) {
        size_t room = b->cap - 1 - b->len;
        memcpy(b->buf + b->len, s, n < room ? n : room);
        b->buf[b->len + (n < room ? n : room)] = '\0';
    }
    b->len += n;
}

static inline void sb_str(struct strbuf *b, const char *s)
{
    sb_mem(b, s, strlen(s));
}

static inline void sb_chr(struct strbuf *b, char c)
{
    sb_mem(b, &c, 1);
}

static inline void sb_ull(struct strbuf *b, unsigned long long v)
{
    char d[24], *p = d + sizeof(d);

    do
        *--p = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    sb_mem(b, p, (size_t)(d + sizeof(d) - p));
}

static inline void sb_ll(struct strbuf *b, long long v)
{
    if (v < 0) {
        sb_chr(b, '-');
        sb_ull(b, 0ULL - (unsigned long long)v);
    } else {
        sb_ull(b, (unsigned long long)v);
    }
}

static inline void sb_hex(struct strbuf *b, uint64_t v)
{
    char d[16], *p = d + sizeof(d);

    do
        *--p = "0123456789abcdef"[v & 15];
    while ((v >>= 4) != 0);
    sb_mem(b, p, (size_t)(d + sizeof(d) - p));
}

/* Copies s into buf (cap bytes), cut to fit; returns strlen(s), as snprintf("%s") would. */
static inline size_t str_copy(char *buf, size_t cap, const char *s)
{
    struct strbuf b = sb_on(buf, cap);

    sb_str(&b, s);
    return b.len;
}

/* The decimal text of v in buf (cap bytes); returns its length. */
static inline size_t str_ll(char *buf, size_t cap, long long v)
{
    struct strbuf b = sb_on(buf, cap);

    sb_ll(&b, v);
    return b.len;
}

#endif
