/* server.h - the listeners that accept clients. */
#ifndef DLOCKD_SERVER_H
#define DLOCKD_SERVER_H

#include <stddef.h>

struct config;
struct dlockd;

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

#endif
