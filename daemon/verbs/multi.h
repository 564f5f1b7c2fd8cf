/* multi.h - a LOCK of names in several Redis Cluster slots, taken one slot at
 * a time in slot order, all or nothing. */
#ifndef DLOCKD_MULTI_H
#define DLOCKD_MULTI_H

struct req;
struct session;

/*
 * Starts r's LOCK (mode x or s) for session s of names in more than one
 * slot; slots has the slot of each of r's names. A failure releases what
 * earlier slots were granted, and r's answer waits until Redis has released
 * them, so that whoever hears it can take them.
 */
void multi_lock(struct req *r, struct session *s, char mode, const int *slots);

#endif
