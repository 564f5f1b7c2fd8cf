/* latch.h - count-down latches: LATCH, COUNTDOWN, AWAIT. */
#ifndef DLOCKD_LATCH_H
#define DLOCKD_LATCH_H

#include <jansson.h>

struct dlockd;
struct req;

void latch_create(struct req *r);
void latch_countdown(struct req *r);
void latch_await(struct req *r);
/* A latch reached 0, says the latch channel: its count is read, and its awaiters here are released if it did. */
void latch_on_message(struct dlockd *d, const char *name);
/*
 * The link to Redis is back, and what the latch channel said meanwhile is
 * lost: every latch awaited or created here is read again, once, in the
 * same turn (so in batch calls), and its awaiters are released if it ended.
 */
void latch_recheck(struct dlockd *d);
/*
 * What a LIST of latches hands over: their entries (the callee takes
 * ownership) and more (1 when there were more than limit), or NULL and
 * why (the text of an ERR BACKEND).
 */
typedef void latch_listed(struct dlockd *d, json_t *latches, int more, const char *err, void *arg);
/*
 * Lists the latches created here that have not ended and whose name matches
 * the glob pattern (NULL for all), limit at most, in name order:
 * [{"name","count","ttl_ms","session","client","peer"}...], count and
 * ttl_ms as Redis says now. done is called once, maybe before this returns.
 */
void latch_list(struct dlockd *d, const char *pattern, long long limit, latch_listed *done, void *arg);
/* Forgets the latches created here (shutdown, after every connection is closed). */
void latch_free_all(struct dlockd *d);

#endif
