/* lock.h - the verbs on locks and semaphores. */
#ifndef DLOCKD_LOCK_H
#define DLOCKD_LOCK_H

struct req;

void lock_lock(struct req *r);
void lock_unlock(struct req *r);
void lock_acquire(struct req *r);
void lock_release(struct req *r);
void lock_status(struct req *r);

#endif
