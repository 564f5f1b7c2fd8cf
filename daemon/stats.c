/* stats.c - the counters and latency histograms that INFO and /metrics show (info.c). */
#include <string.h>

#include "stats.h"

const uint64_t histo_bounds_us[HISTO_BUCKETS] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 10000000,
};

void histo_add(struct histo *h, uint64_t us)
{
    int i = 0;

    while (i < HISTO_BUCKETS && us > histo_bounds_us[i])
        i++;
    h->counts[i]++;
    h->n++;
    h->sum_us += us;
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
