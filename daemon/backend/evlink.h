/* evlink.h - hiredis's async context on libevent, with one system call less per command. */
#ifndef DLOCKD_EVLINK_H
#define DLOCKD_EVLINK_H

struct event_base;
struct redisAsyncContext;

/*
 * Attaches ac to base, as hiredis's own libevent adapter does, but its read
 * event stays added (hiredis asks for it again after every reply), and once
 * connected the commands of one turn of the loop are written at its end,
 * together, without waiting for the socket to be writable: the write event
 * is added only when the socket did not take them all. Returns 0, or -1
 * when ac has an adapter already.
 */
int evlink_attach(struct redisAsyncContext *ac, struct event_base *base);

#endif
