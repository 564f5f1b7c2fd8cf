/* stats.h - counters and the INFO document. */
#ifndef DLOCKD_STATS_H
#define DLOCKD_STATS_H

#include <stdint.h>

#include "proto.h"

struct dlockd;

struct stats {
    uint64_t requests[VERB_NVERBS]; /* requests by verb */
    uint64_t grants;                /* holds granted (new or reentered) */
    uint64_t timeouts;              /* waits that ended in TIMEOUT */
    uint64_t busy;                  /* BUSY replies */
    uint64_t errors;                /* ERR replies */
    uint64_t expired_sessions;
    uint64_t lost;                  /* holds lost while their session lived */
    uint64_t renewals;              /* renew script calls */
    uint64_t renewed;               /* leases renewed */
};

/* The INFO document as a JSON string (malloc'ed), one line. */
char *stats_info_json(struct dlockd *d);

#endif
