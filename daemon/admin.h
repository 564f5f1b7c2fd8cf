/* admin.h - the HTTP admin endpoint: /metrics, /healthz, /status. */
#ifndef DLOCKD_ADMIN_H
#define DLOCKD_ADMIN_H

struct dlockd;

/* Opens admin-listen when configured. Returns 0, or -1 after logging why. */
int admin_start(struct dlockd *d);
void admin_stop(struct dlockd *d);

#endif
