/* scripts.h - the Lua scripts embedded at build time (see scripts/embed.sh). */
#ifndef DLOCKD_SCRIPTS_H
#define DLOCKD_SCRIPTS_H

enum script_id {
    SCRIPT_ACQUIRE,
    SCRIPT_CANCEL,
    SCRIPT_LATCH,
    SCRIPT_LOCK,
    SCRIPT_POKE,
    SCRIPT_RENEW,
    SCRIPT_STATUS,
    SCRIPT_UNLOCK,
    SCRIPT_COUNT
};

struct script {
    const char *name;
    const char *body;
    char sha[41]; /* from SCRIPT LOAD; "" until loaded */
};

extern struct script scripts[SCRIPT_COUNT];

#endif
