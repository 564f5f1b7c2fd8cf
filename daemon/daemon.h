/* daemon.h - a whole daemon: every part built, and its layers wired together. */
#ifndef DLOCKD_DAEMON_H
#define DLOCKD_DAEMON_H

#include "dlockd.h"

/*
 * Builds every part of d, whose config and id are set and the rest zeroed:
 * the event base, the tables, the connection lists and the Redis link (not
 * started), with the hooks that let the lower layers call the upper ones.
 * Listeners, the admin endpoint and the timers are the caller's to start.
 */
void daemon_init(struct dlockd *d);
/*
 * Frees everything of d, its config included. Holds stay in Redis until
 * their lease: clients learn nothing from a release they did not ask for,
 * and a daemon that restarts quickly does not hand their locks to others
 * meanwhile.
 */
void daemon_free(struct dlockd *d);

#endif
