/* stats.h - counters and latency histograms of the daemon. */
#ifndef DLOCKD_STATS_H
#define DLOCKD_STATS_H

#include <stdint.h>

#include "proto.h"

enum outcome { OUT_OK, OUT_BUSY, OUT_TIMEOUT, OUT_ERROR, OUT_COUNT };

#define HISTO_BUCKETS 16

/* Upper bounds of the buckets of the latency histograms, in microseconds. */
extern const uint64_t histo_bounds_us[HISTO_BUCKETS];
/* Upper bounds of the buckets of the wait and hold time histograms, in microseconds. */
extern const uint64_t histo_long_bounds_us[HISTO_BUCKETS];

/* A histogram with fixed upper bounds (histo_bounds_us or histo_long_bounds_us). */
struct histo {
    uint64_t counts[HISTO_BUCKETS + 1]; /* per bucket, the last for +Inf */
    uint64_t n;
    uint64_t sum_us;
};

struct stats {
    uint64_t requests[VERB_NVERBS];                 /* requests by verb */
    uint64_t outcomes[VERB_NVERBS + 1][OUT_COUNT];  /* replies by verb (last: unparsed) and outcome */
    uint64_t grants;                /* holds granted (new or reentered) */
    uint64_t timeouts;              /* waits that ended in TIMEOUT */
    uint64_t busy;                  /* BUSY replies */
    uint64_t errors;                /* ERR replies */
    uint64_t expired_sessions;
    uint64_t lost;                  /* holds lost while their session lived */
    uint64_t renewals;              /* renew script calls */
    uint64_t renewed;               /* leases renewed */
    uint64_t ack_rounds;            /* SET and WAIT rounds of min-replicas-ack */
    uint64_t ack_refused;           /* grants undone for want of replicas' acks */
    struct histo backend;           /* Redis round trip of a script */
    struct histo handoff;           /* release script sent -> queued waiter answered */
    struct histo waited;            /* LOCK/ACQUIRE arrived -> granted (long bounds) */
    struct histo held;              /* hold granted -> forgotten here: released, lost or expired (long bounds) */
};

/* Counts us in h, whose buckets end at bounds (HISTO_BUCKETS of them). */
void histo_add_in(struct histo *h, const uint64_t *bounds, uint64_t us);
/* histo_add_in with histo_bounds_us. */
void histo_add(struct histo *h, uint64_t us);
/* Counts a reply body ("OK ...", "BUSY", "TIMEOUT", "ERR ...") of verb (VERB_NVERBS when unparsed). */
void stats_reply(struct stats *st, enum proto_verb verb, const char *body);

#endif
