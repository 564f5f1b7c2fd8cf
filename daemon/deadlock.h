/* deadlock.h - the wait-for graph of this daemon's sessions. */
#ifndef DLOCKD_DEADLOCK_H
#define DLOCKD_DEADLOCK_H

struct dlockd;

/*
 * 1 when a request of who (session:owner) to hold names in mode (x or s)
 * would wait for holders that, through their own waits on this daemon,
 * wait for who: a cycle that no grant can ever break. Holds and waits of
 * other daemons are not seen.
 */
int deadlock_check(struct dlockd *d, const char *who, char mode, int nnames, const char *const *names);

#endif
