/* resume.h - HELLO session= for a session that lives in Redis, not here. */
#ifndef DLOCKD_RESUME_H
#define DLOCKD_RESUME_H

struct req;
struct session;

/* How the request is answered; each ends r. */
struct resume_answers {
    int trusted;                                       /* an operator's: no secret is asked */
    void (*attach)(struct req *r, struct session *s);  /* s is here now: attach it to r's connection (not an answer) */
    void (*resumed)(struct req *r, struct session *s); /* s and its live holds are this daemon's: OK */
    void (*failed)(struct req *r);                     /* not taken over, nothing changed: ERR BACKEND */
    void (*refused)(struct req *r);                    /* no such record, or a wrong secret: ERR NOSESSION */
    void (*local)(struct req *r);                      /* the session is this daemon's: resume it from memory */
};

/*
 * Resumes the session sid: from this daemon's memory when its record in
 * Redis (record.c) says it is this daemon's (or Redis does not answer and it
 * is here), else from the record, with the secret r carries unless ans is
 * trusted, answering r through ans (not copied). The session exists here
 * only once every hold it lists is adopted, and is then attached and
 * resumed at once; a takeover that does not complete is handed back before
 * r hears failed. A copy here of a session another daemon has now is
 * dropped first.
 */
void resume_from_record(struct req *r, const char *sid, const struct resume_answers *ans);
/* Frees the takeovers still being handed back (shutdown, once Redis answers nothing more). */
void resume_free_all(void);

#endif
