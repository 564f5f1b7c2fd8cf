/* server.h - the listeners that accept clients. */
#ifndef DLOCKD_SERVER_H
#define DLOCKD_SERVER_H

struct config;
struct dlockd;

/* Opens every configured listener, after server_fd_limit. Returns 0, or -1 after logging why. */
int server_listen(struct dlockd *d);
void server_close(struct dlockd *d);
/* Makes room for maxclients connections: raises the soft limit of descriptors, or logs why it cannot. */
void server_fd_limit(const struct config *cfg);

#endif
