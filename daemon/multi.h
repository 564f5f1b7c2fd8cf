/* multi.h - a LOCK of names in several Redis Cluster slots, taken one slot at
 * a time in slot order, all or nothing. */
#ifndef DLOCKD_MULTI_H
#define DLOCKD_MULTI_H

struct multi;
struct req;
struct session;

/* Starts r's LOCK (mode x or s) of names in more than one slot, for session s. */
void multi_lock(struct req *r, struct session *s, char mode);
/*
 * The wait of m's current slot was granted tokens and counts (one per name,
 * in the wait's order) to r: goes on to the next slot, or answers r; TIMEOUT,
 * releasing them all, when a hold of an earlier slot ended meanwhile.
 */
void multi_granted(struct multi *m, struct req *r, char *const *tokens, char *const *counts);
/* m's request failed or went away: releases what m's earlier slots were granted, and frees m. */
void multi_fail(struct multi *m);
/* Frees m, releasing nothing (shutdown). */
void multi_free(struct multi *m);

#endif
