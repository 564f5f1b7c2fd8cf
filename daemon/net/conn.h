/* conn.h - a client connection: line input, request queues, the reply family. */
#ifndef DLOCKD_CONN_H
#define DLOCKD_CONN_H

#include <stdint.h>
#include <sys/queue.h>

#include <event2/util.h>

#include "dlockd.h"
#include "proto.h"

struct event;
struct evbuffer;
struct session;
struct idrec;

/* One request from arrival to its reply. */
struct req {
    struct dlockd *d;
    struct conn *c;                   /* NULL once the connection is gone */
    char sid[DLOCKD_ID_LEN + 1];      /* session at dispatch; look it up again after a wait */
    struct proto_req pr;              /* points into line */
    int untagged;
    int limited;                      /* its line was not kept (max-requests): ERR LIMIT in its turn */
    int marker;                       /* not a request: where a walk of the running list is */
    void (*gone)(struct req *r);      /* called if the connection closes first */
    void (*quit)(struct req *r);      /* called at QUIT instead of gone; must end r in time */
    void *ctx;                        /* the verb's state, for gone */
    struct idrec *idrec;              /* the id= record this request answers */
    uint64_t arrived;                 /* monotonic ms */
    int holds;                        /* calls its answer waits for (req_hold) */
    int dropped;                      /* req_drop came while held */
    char *held;                       /* its answer, sent when the holds end */
    TAILQ_ENTRY(req) link;            /* in the connection's running list */
    TAILQ_ENTRY(req) idlink;          /* in an id record's repeats, then in c->starting */
    int share;                        /* SHARE_NONE, SHARE_WAITING or SHARE_RUNNING (share.c) */
    TAILQ_ENTRY(req) share_link;      /* in c->reads while it waits its turn */
    size_t len;                       /* bytes in line (a NUL among them is refused) */
    char line[];
};

TAILQ_HEAD(req_list, req);

/* An untagged request that waits for the one before it: only its line. */
struct queued {
    TAILQ_ENTRY(queued) link;
    uint64_t arrived;                 /* monotonic ms */
    int limited;                      /* not kept: the server held max-requests when it came */
    size_t len;                       /* bytes in line */
    char line[];
};

/* The life of a connection (conn.c `state_moves` lists the moves). */
enum conn_state {
    CONN_OPEN,     /* requests run as they come */
    CONN_QUITTING, /* QUIT ran: nothing behind it runs; it closes once QUIT is answered */
    CONN_CLOSING,  /* closes once its output is written; nothing new runs */
};

struct conn {
    struct dlockd *d;
    evutil_socket_t fd;
    struct event *readable;   /* reads while the client may still send */
    struct event *writable;   /* only while out holds replies */
    struct evbuffer *out;     /* replies the socket did not take yet; NULL when none */
    char *part;               /* a line not yet complete, when there is one */
    size_t partlen;
    struct session *session;  /* attached session, or NULL */
    uint64_t id;              /* for logs */
    int authed;               /* AUTH done, or no requirepass */
    int admin;                /* authenticated with adminpass: may run the operator verbs */
    int authing;              /* a wrong password waits for auth-fail-delay; apart from authed,
                               * since an authenticated client may send a wrong AUTH too */
    int auth_failures;        /* wrong passwords so far */
    int untagged_busy;        /* an untagged request is being served */
    enum conn_state state;    /* moved only by conn_state */
    int cut;                  /* closed on a socket error or the output limit: nothing more is written */
    int eof;                  /* the client sent no more: finish what it sent, then close; apart
                               * from state, since a client may half-close whether QUIT ran or not */
    int advancing;            /* in d->advancing (a list mark, not a state: any state may advance) */
    int reaping;              /* in d->reaping (likewise) */
    struct req *quit;         /* a QUIT waiting for the requests before it to end */
    struct req *resuming;     /* a HELLO session= not answered yet: every line waits behind it */
    struct deadline auth_dl;  /* closes it if not authenticated in time */
    const char *close_reason; /* for the log, when it is freed */
    TAILQ_HEAD(, queued) queued; /* untagged requests waiting their turn */
    int nqueued;              /* lines in queued */
    struct req_list running;  /* requests being served */
    int nrunning;             /* requests in running */
    struct req_list starting; /* repeats that took an id over, to run on the next advance */
    struct req_list reads;    /* STATUS, LIST and SESSIONS waiting their turn (share.c) */
    int nreads;               /* of its reads running */
    int sharing;              /* in the share.c round (a list mark, as advancing) */
    TAILQ_ENTRY(conn) share_link; /* in the round of connections whose reads wait */
    TAILQ_ENTRY(conn) link;   /* in d->conns */
    TAILQ_ENTRY(conn) advance_link; /* in d->advancing */
    TAILQ_ENTRY(conn) reap_link;    /* in d->reaping */
    char peer[];              /* address, the default session name */
};

/* Sets up d's connection lists and the two events that serve all connections. */
void conn_init(struct dlockd *d);
/* Takes a new client socket that the server accepted (server.c checks maxclients). */
void conn_accept(struct dlockd *d, evutil_socket_t fd, const char *peer);
/*
 * Makes a connection from a non-blocking stream socket (conn_accept's, or
 * one end of a socketpair in a fuzz harness), with a fresh session unless
 * it has to AUTH first, and takes ownership of fd: it is closed with the
 * connection. Does not check maxclients.
 */
struct conn *conn_new(struct dlockd *d, evutil_socket_t fd, const char *peer);

/*
 * Replies to r and ends it (r is freed): "[#tag] STATUS fields". fmt may be
 * NULL for no fields. A request whose connection is gone is ended silently.
 */
void req_reply(struct req *r, const char *status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void req_err(struct req *r, enum proto_err e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Replies body ("STATUS fields" or "ERR CODE text", no tag) to r and ends it. */
void req_send(struct req *r, const char *body);
/* Ends r without a reply (its connection is gone). */
void req_drop(struct req *r);
/*
 * r's answer waits for something that keeps r in *slot: when r's
 * connection closes, *slot becomes NULL and r is dropped; after a
 * half-close what was sent is still answered.
 */
void req_await(struct req *r, struct req **slot);
/*
 * Holds r's answer (and its end) until as many req_unhold: for a request
 * whose answer must follow what it undoes in Redis. r stays allocated.
 */
void req_hold(struct req *r);
void req_unhold(struct req *r);
/*
 * Runs r (cmd_run) from its connection's next advance, never inside the
 * caller. Returns -1, leaving r as it is, when the connection is closing,
 * half-closed or quitting: nothing new may start there.
 */
int req_start_soon(struct req *r);
/*
 * r is a HELLO that resumes a session: until it is answered, every request
 * c receives after it waits its turn (tagged ones too), so that none runs
 * in a session that is still being taken over.
 */
void req_resuming(struct req *r);
/* The live session of r, or NULL when it ended meanwhile. */
struct session *req_session(struct req *r);

/*
 * 1 when a new request of c is one too many: the daemon holds max-requests
 * (served, queued, behind the gate), and c at least its share of them
 * (max-requests / connections), so a flood from some clients does not lock
 * the others out; the daemon holds 2 * max-requests at most. counted: 1 when
 * the request is already counted in c's and the daemon's.
 */
int conn_requests_full(const struct conn *c, int counted);
/* Sends an event line "* text" on c. */
void conn_event(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * Sends "* text" to s's connection. While it has none, or one that is
 * going, the line is also kept for the connection that resumes s next
 * (conn_resumed): a LOST must reach the client wherever it comes back.
 */
void conn_session_event(struct session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Keeps "* text" for the connection that resumes s next, without sending it now. */
void conn_session_missed(struct session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* c resumed its session: sends it the events kept for it. */
void conn_resumed(struct conn *c);
/* 1 when nobody can wait on c any more (it is closing, or sent EOF). */
int conn_gone(const struct conn *c);
/*
 * QUIT: nothing queued behind r runs; once every other request of c has
 * ended (waits are cancelled at once), the session ends, r is answered OK
 * and c closes, so whatever r's OK is read after, nothing of the session
 * is held any more.
 */
void conn_quit(struct conn *c, struct req *r);
/* What a QUIT did, once its session ended here and its record was read. */
enum quit_end {
    QUIT_ENDED,   /* no other daemon has the session: OK */
    QUIT_MOVED,   /* a resume elsewhere had taken it over, it goes on there: BYE reason=moved */
    QUIT_UNKNOWN, /* Redis did not say: no answer */
};
/* Answers the QUIT r as end says, and closes its connection. */
void conn_quit_answer(struct req *r, enum quit_end end);
/*
 * Attaches s to c, detaching the session c had. A connection s had before
 * is told * BYE reason=moved and closed (its waits are cancelled).
 */
void conn_attach(struct conn *c, struct session *s);
/* s moved to another daemon: its connection, if any, is told * BYE reason=moved and closed. */
void conn_moved_away(struct session *s);
/* c's session ended: c has none now; after its expiry c is told * BYE and closed. */
void conn_session_ended(struct conn *c, int expired);
/* Marks c authenticated and gives it a fresh session if it has none. */
void conn_authed(struct conn *c);
/*
 * Stops reading c, cancels what it runs (as its close does) and closes it
 * once its output is written; never frees it before returning.
 */
void conn_close_soon(struct conn *c, const char *reason);
/* Closes every connection now and frees what conn_init made (shutdown). */
void conn_close_all(struct dlockd *d);
/* Sends "* text" to every connection that has a session. */
void conn_broadcast(struct dlockd *d, const char *text);

#endif
