/* hooks.h - how the lower layers (session, conn, hold) reach the layers above them without
 * including them: a table of functions the daemon is built with (daemon.c). */
#ifndef DLOCKD_HOOKS_H
#define DLOCKD_HOOKS_H

struct conn;
struct dlockd;
struct req;
struct session;

/* Why a session ends: the event that goes up when it does. */
enum session_end { SESSION_QUIT, SESSION_EXPIRED, SESSION_FORGOTTEN /* here only: shutdown */ };

struct hooks {
    /* drop its repeats and waits, release its holds (SESSION_FORGOTTEN: here only, Redis untold) */
    void (*session_ending)(struct session *s, enum session_end why);
    void (*session_left)(struct conn *c, int expired);      /* c's session ended under it */
    void (*session_quit)(struct session *s, struct req *r); /* end s for its QUIT r; conn_quit_answer r */
    void (*dispatch)(struct req *r);                        /* a request line arrived: check and run it */
    void (*run)(struct req *r);                             /* run a request checked before */
    /* r ends, answered body (then sent) or unanswered (NULL): its id= is remembered or its repeats go
     * on, and a read frees its turn */
    void (*ended)(struct req *r, const char *body);
    /* a hold here ended: unindex it; dropped is its token when Redis unindexed it with its release, else NULL */
    void (*hold_ended)(struct session *s, const char *hid, const char *name, const char *dropped);
    void (*each_index)(struct session *s, void (*fn)(const char *hid, const char *name, const char *token, void *arg),
                       void *arg); /* what s's record indexes: its holds (token) and its waits' names ("0") */
    int (*check_moved)(struct dlockd *d, const char *sid, void (*done)(struct dlockd *d, int answered, void *arg),
                       void *arg); /* reads sid's record: gone from here if another daemon has it; then done */
};

#endif
