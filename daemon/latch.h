/* latch.h - count-down latches: LATCH, COUNTDOWN, AWAIT. */
#ifndef DLOCKD_LATCH_H
#define DLOCKD_LATCH_H

struct dlockd;
struct req;

void latch_create(struct req *r);
void latch_countdown(struct req *r);
void latch_await(struct req *r);
/* A latch reached 0, says the latch channel: its count is read, and its awaiters here are released if it did. */
void latch_on_message(struct dlockd *d, const char *name);
/* Forgets the latches created here (shutdown, after every connection is closed). */
void latch_free_all(struct dlockd *d);

#endif
