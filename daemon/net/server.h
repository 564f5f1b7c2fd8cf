/* server.h - the listeners that accept clients. */
#ifndef DLOCKD_SERVER_H
#define DLOCKD_SERVER_H

#include <stddef.h>

struct config;
struct dlockd;
struct evconnlistener;

/* Opens every configured listener, after server_fd_limit. Returns 0, or -1 after logging why. */
int server_listen(struct dlockd *d);
void server_close(struct dlockd *d);
/* 1 when the socket fd is bound to an address that protected mode does not allow (see
 * config_loopback); that address, or why it is unknown, goes into buf. */
int server_fd_exposed(int fd, char *buf, size_t len);
/* 1 when a listener is so bound; which one, and to what, goes into buf. */
int server_exposed(struct dlockd *d, char *buf, size_t len);
/* Makes room for maxclients connections: raises the soft limit of descriptors, or logs why it cannot. */
void server_fd_limit(const struct config *cfg);
/* The lowest descriptor number a client connection is refused at (the soft limit less a reserve). */
int server_fd_line(const struct dlockd *d);
/*
 * Pauses every listener (ours and the adopted ones) for a while after an
 * accept of l failed: call it from a listener's error callback.
 */
void server_accept_failed(struct dlockd *d, struct evconnlistener *l);
/*
 * Makes l, a listener of another module, pause with the others; it accepts
 * while on (server_want changes that) and no pause is on. server_disown before
 * freeing it. At most SERVER_ADOPTED.
 */
void server_adopt(struct dlockd *d, struct evconnlistener *l, int on);
void server_want(struct dlockd *d, struct evconnlistener *l, int on);
void server_disown(struct dlockd *d, struct evconnlistener *l);

#endif
