/* admin.h - the HTTP admin endpoint: /metrics, /healthz, /status, /locks, /sessions. */
#ifndef DLOCKD_ADMIN_H
#define DLOCKD_ADMIN_H

#include <stddef.h>

struct dlockd;

/* Opens admin-listen when configured. Returns 0, or -1 after logging why. */
int admin_start(struct dlockd *d);
void admin_stop(struct dlockd *d);
/* 1 when admin-listen is bound to an address that protected mode does not
 * allow; which, and to what, goes into buf. */
int admin_exposed(struct dlockd *d, char *buf, size_t len);

#endif
