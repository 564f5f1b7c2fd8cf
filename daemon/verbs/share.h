/* share.h - turns of the verbs that read Redis without changing it: STATUS, LIST, SESSIONS. */
#ifndef DLOCKD_SHARE_H
#define DLOCKD_SHARE_H

struct conn;
struct dlockd;
struct req;

enum share_state {
    SHARE_NONE,    /* not a read, or not admitted yet */
    SHARE_WAITING, /* in its connection's reads, waiting its turn */
    SHARE_RUNNING, /* counted in max-reads and max-reads-client until it ends */
};

/*
 * Admits read r (STATUS, LIST or SESSIONS) now, returning 1, when fewer than
 * max-reads run on the daemon, fewer than max-reads-client on its connection
 * and none waits; else r waits in its connection's FIFO, returns 0, and is
 * run later (d->hooks->run) when the round of connections with waiting reads
 * comes to it: one read per connection per turn of the round.
 */
int share_admit(struct req *r);
/* r ends: a read that ran frees its turn (the hook ended, for any request). A connection
 * is in the round only while reads wait there: its close drops them, and it leaves. */
void share_end(struct req *r);
/* Frees what share.c made (shutdown). */
void share_close(struct dlockd *d);

#endif
