/* deadlock.h - the wait-for graph of this daemon's sessions. */
#ifndef DLOCKD_DEADLOCK_H
#define DLOCKD_DEADLOCK_H

#define DEADLOCK_BUDGET 10000 /* names and holds one search looks at, at most */

struct dlockd;

/* The edges of one LOCK wait: from its owner to the holders of names it waits for. */
struct deadlock_edges {
    const char *hid;           /* mode, session id, ':', owner */
    int nnames;
    const char *const *names;
};

/* The graph's index: the LOCK waits of each owner. */
struct deadlock *deadlock_new(void);
void deadlock_free(struct deadlock *g);
/* Puts the edges of a LOCK wait that joined its session's waits in the graph; w stays
 * the caller's, and must live until deadlock_remove. */
void deadlock_add(struct dlockd *d, const struct deadlock_edges *w);
/* Takes them out of the graph, as the wait leaves its session's waits. */
void deadlock_remove(struct dlockd *d, const struct deadlock_edges *w);

/*
 * 1 when a request of who (session:owner) to hold names in mode (x or s)
 * would wait for holders that, through their own waits on this daemon,
 * wait for who: a cycle that no grant can ever break. Holds and waits of
 * other daemons are not seen. The search looks at DEADLOCK_BUDGET names
 * and holds at most; past them it returns 0, and the request waits unchecked.
 */
int deadlock_check(struct dlockd *d, const char *who, char mode, int nnames, const char *const *names);

#endif
