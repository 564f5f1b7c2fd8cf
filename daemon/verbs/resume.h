/* resume.h - HELLO session= for a session that lives in Redis, not here. */
#ifndef DLOCKD_RESUME_H
#define DLOCKD_RESUME_H

struct req;
struct session;

/* How the request is answered; each ends r. */
struct resume_answers {
    int kill;                                          /* an operator's KILL: no secret asked, claimed killed */
    void (*attach)(struct req *r, struct session *s);  /* s is here now: attach it to r's connection (not an answer) */
    void (*resumed)(struct req *r, struct session *s); /* s and its live holds are this daemon's: OK */
    void (*failed)(struct req *r);                     /* not taken over, nothing changed: ERR BACKEND */
    void (*refused)(struct req *r);                    /* no such record, a wrong secret, or it ended meanwhile */
    void (*local)(struct req *r);                      /* the session is this daemon's: resume it from memory */
};

/*
 * Resumes the session sid: from this daemon's memory when its record in
 * Redis (record.c) says it is this daemon's (or Redis does not answer and it
 * is here), else from the record, with the secret r carries unless ans is
 * trusted, answering r through ans (not copied). The session exists here
 * only once every hold it lists is adopted, and is attached and resumed
 * once its record is this daemon's; a takeover that does not complete is
 * handed back before r hears failed (or refused, when the session ended
 * meanwhile). A copy here of a session another daemon has now is dropped
 * first.
 */
void resume_from_record(struct req *r, const char *sid, const struct resume_answers *ans);
/* 1 while session sid is being taken over here: it is not to be touched (KILL) meanwhile. */
int resume_taking(const char *sid);
/* Frees the takeovers still being handed back (shutdown, once Redis answers nothing more). */
void resume_free_all(void);

#endif
