/* resume.h - HELLO session= for a session that lives in Redis, not here. */
#ifndef DLOCKD_RESUME_H
#define DLOCKD_RESUME_H

struct req;
struct session;

/* How the HELLO is answered; each ends r. */
struct resume_answers {
    void (*attach)(struct req *r, struct session *s);  /* s is here now: attach it to r's connection (not an answer) */
    void (*resumed)(struct req *r, struct session *s); /* s and its live holds are this daemon's: OK */
    void (*failed)(struct req *r, struct session *s);  /* Redis did not answer: drop s here, ERR BACKEND */
    void (*refused)(struct req *r);                    /* no such record, or a wrong secret: ERR NOSESSION */
    void (*again)(struct req *r);                      /* the session came here meanwhile: resume it as usual */
};

/*
 * Resumes the session r->pr.session from its record in Redis (record.c),
 * with the secret r carries, and answers r through ans (not copied) once
 * the session's holds are adopted.
 */
void resume_from_record(struct req *r, const struct resume_answers *ans);

#endif
