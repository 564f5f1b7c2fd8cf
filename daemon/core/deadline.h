/* deadline.h - one min-heap of deadlines behind a single libevent timer. */
#ifndef DLOCKD_DEADLINE_H
#define DLOCKD_DEADLINE_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct deadline;

typedef void deadline_fn(struct deadline *dl);

struct deadline {
    uint64_t when;    /* monotonic ms */
    size_t slot;      /* index in the heap; DEADLINE_IDLE when not armed */
    deadline_fn *fire; /* called once when `when` has passed */
};

#define DEADLINE_IDLE ((size_t)-1)

struct deadlines;

/* Monotonic clock in milliseconds, and in microseconds. */
uint64_t now_ms(void);
uint64_t now_us(void);

struct deadlines *deadlines_new(struct event_base *base);
void deadlines_free(struct deadlines *dls);
/* Prepares dl; it starts idle. */
void deadline_init(struct deadline *dl, deadline_fn *fire);
/* Arms (or moves) dl to fire at `when`. */
void deadline_arm(struct deadlines *dls, struct deadline *dl, uint64_t when);
/* Disarms dl; harmless when idle. */
void deadline_cancel(struct deadlines *dls, struct deadline *dl);
int deadline_armed(const struct deadline *dl);
size_t deadlines_count(const struct deadlines *dls);

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

#endif
