/* reqid.h - safe retries: the remembered reply of each request that carried id=. */
#ifndef DLOCKD_REQID_H
#define DLOCKD_REQID_H

#include <stdint.h>
#include <sys/queue.h>

#include "proto.h"

#define REQID_KEEP 1000                  /* ids remembered per session */
#define REQID_KEEP_MS (10 * 60 * 1000)   /* for this long */

struct req;
struct session;

struct idrec {
    struct session *s;
    struct req *owner;          /* the request that runs for this id, until it ends */
    char *body;                 /* the reply without tag; NULL while the request runs */
    uint64_t at;                /* monotonic ms of the reply */
    TAILQ_HEAD(, req) retries;  /* repeats waiting for the first to finish */
    TAILQ_ENTRY(idrec) link;    /* in the session's list, oldest first */
    char id[PROTO_STR_MAX + 1];
};

/*
 * Looks up r's id= on session s. Returns 1 when r is taken care of (answered
 * with the remembered reply, or waiting for the first request with that id);
 * 0 when r is to run, with r->idrec set.
 */
int reqid_begin(struct req *r, struct session *s);
/* r, which owns an id, was answered with body. */
void reqid_answered(struct req *r, const char *body);
/*
 * r, which owns an id, ends without a reply: the first repeat takes the id
 * over and starts on a later turn of the loop; without one, the id is forgotten.
 */
void reqid_dropped(struct req *r);
/* Forgets every id of s. */
void reqid_free_session(struct session *s);

#endif
