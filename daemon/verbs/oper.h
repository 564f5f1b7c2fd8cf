/* oper.h - the operator verbs: LIST, SESSIONS, KILL, FORCE. */
#ifndef DLOCKD_OPER_H
#define DLOCKD_OPER_H

struct dlockd;
struct req;
struct session;

void oper_list(struct req *r);
void oper_sessions(struct req *r);
void oper_kill(struct req *r);
void oper_force(struct req *r);
/* An operator's KILL on the daemon that has s now ended it: so it ends here, its holds lost (reason=admin). */
void oper_killed_elsewhere(struct session *s);

/* An 'F name' on this daemon's channel: a FORCE elsewhere freed holds of
 * name; the holds here that Redis no longer has are lost (reason=admin). */
void oper_on_message(struct dlockd *d, const char *msg);

#endif
