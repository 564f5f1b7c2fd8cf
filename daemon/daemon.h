/* daemon.h - a whole daemon, its layers wired together. */
#ifndef DLOCKD_DAEMON_H
#define DLOCKD_DAEMON_H

#include "hooks.h"
#include "redis.h"

/* The calls up of session, conn and hold, for d->hooks. */
extern const struct hooks daemon_hooks;
/* The owner of the Redis link, for redis_new. */
extern const struct redis_owner daemon_redis_owner;

#endif
