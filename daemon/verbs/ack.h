/* ack.h - min-replicas-ack: grants answered only once WAIT says enough replicas have them. */
#ifndef DLOCKD_ACK_H
#define DLOCKD_ACK_H

struct dlockd;
struct req;

/* A grant to answer: k counts of hold hid on each of names, with their tokens. */
struct ack_grant {
    const char *hid;
    long long k;
    int nnames;                /* of names and tokens; 0 when nothing is to be undone */
    char *const *names;
    char *const *tokens;
};

/*
 * Answers r with body ("OK ...") for the grant g (copied). Without
 * min-replicas-ack at once; else once a round of WAIT, begun after the
 * grant reached this daemon, confirms min-replicas-ack replicas have it.
 * When fewer confirm, WAIT fails, or r's connection goes first, the grant
 * is undone here and in Redis, and r is answered ERR BACKEND (or dropped).
 */
void ack_answer(struct req *r, const struct ack_grant *g, const char *body);
/* Frees what ack_answer keeps (shutdown, after the connections and the Redis link are closed). */
void ack_free(struct dlockd *d);

#endif
