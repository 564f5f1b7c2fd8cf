/* reqid.h - safe retries: the remembered reply of each request that carried id=. */
#ifndef DLOCKD_REQID_H
#define DLOCKD_REQID_H

#include <stdint.h>
#include <sys/queue.h>

#include "proto.h"

#define REQID_KEEP_MS (10 * 60 * 1000) /* a reply is remembered this long at most */

struct req;
struct session;

/* One id= of a session: its request while it runs, then its reply. */
struct idrec {
    struct session *s;
    struct req *owner;          /* the request that runs for this id, until it ends */
    const char *id;             /* the key of s->ids */
    char *body;                 /* the reply without tag; NULL while the request runs */
    const char *hid;            /* a grant: its hold (in body's allocation); else NULL */
    const char *names;          /* a grant: its names, each ended by a NUL */
    int nnames;
    uint64_t at;                /* monotonic ms of the reply */
    TAILQ_HEAD(, req) retries;  /* repeats waiting for the first to finish */
    TAILQ_ENTRY(idrec) link;    /* answered: in s->idlist, oldest first */
    TAILQ_ENTRY(idrec) dlink;   /* answered: in d->ids, oldest first */
};

/*
 * Looks up r's id= on session s. Returns 1 when r is taken care of (answered
 * with the remembered reply, or waiting for the first request with that id);
 * 0 when r is to run, with r->idrec set. A remembered grant whose holds the
 * session no longer has (with the tokens it gave) is forgotten: r runs.
 */
int reqid_begin(struct req *r, struct session *s);
/*
 * r, which owns an id, was answered with body. The oldest replies beyond
 * max-ids of the session and max-ids-total of the daemon are forgotten.
 */
void reqid_answered(struct req *r, const char *body);
/*
 * r, which owns an id, ends without a reply: the first repeat takes the id
 * over and starts on a later turn of the loop; without one, the id is forgotten.
 */
void reqid_dropped(struct req *r);
/* Forgets every id of s. */
void reqid_free_session(struct session *s);

#endif
