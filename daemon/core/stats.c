/* stats.c - the counters and latency histograms that INFO and /metrics show (info.c). */
#include <string.h>

#include "stats.h"

const uint64_t histo_bounds_us[HISTO_BUCKETS] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 10000000,
};

const uint64_t histo_long_bounds_us[HISTO_BUCKETS] = {
    1000, 5000, 10000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000, 30000000, 60000000,
    300000000, 900000000, 3600000000,
};

void histo_add_in(struct histo *h, const uint64_t *bounds, uint64_t us)
{
    int i = 0;

    while (i < HISTO_BUCKETS && us > bounds[i])
        i++;
    h->counts[i]++;
    h->n++;
    h->sum_us += us;
}

void histo_add(struct histo *h, uint64_t us)
{
    histo_add_in(h, histo_bounds_us, us);
}

void stats_reply(struct stats *st, enum proto_verb verb, const char *body)
{
    enum outcome o = OUT_OK;

    if (strncmp(body, "ERR", 3) == 0)
        o = OUT_ERROR;
    else if (strncmp(body, "BUSY", 4) == 0)
        o = OUT_BUSY;
    else if (strncmp(body, "TIMEOUT", 7) == 0)
        o = OUT_TIMEOUT;
    st->outcomes[verb <= VERB_NVERBS ? verb : VERB_NVERBS][o]++;
}
