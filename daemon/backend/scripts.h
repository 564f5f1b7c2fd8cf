/* scripts.h - the Lua scripts embedded at build time (see scripts/embed.sh). */
#ifndef DLOCKD_SCRIPTS_H
#define DLOCKD_SCRIPTS_H

enum script_id {
    SCRIPT_BATCH, /* a function library: runs operations on names, see scripts/common.lua */
    SCRIPT_RENEW,
    SCRIPT_SESSION, /* session records: scripts/session.lua */
    SCRIPT_COUNT
};

/* The operations of the batch script, one file each in scripts/. */
enum op_id {
    OP_ACQUIRE,
    OP_ADOPT,
    OP_CANCEL,
    OP_FORCE,
    OP_LATCH,
    OP_LOCK,
    OP_POKE,
    OP_REASSERT,
    OP_STATUS,
    OP_UNLOCK,
    OP_COUNT
};

struct script {
    const char *name;
    const char *body;
    char sha[41];         /* from SCRIPT LOAD; "" until loaded */
    const char *function; /* a function library's one function, called with FCALL; NULL for EVALSHA */
};

extern struct script scripts[SCRIPT_COUNT];
extern const char *const op_names[OP_COUNT];

#endif
