/* server.h - the listeners that accept clients. */
#ifndef DLOCKD_SERVER_H
#define DLOCKD_SERVER_H

struct dlockd;

/* Opens every configured listener. Returns 0, or -1 after logging why. */
int server_listen(struct dlockd *d);
void server_close(struct dlockd *d);

#endif
