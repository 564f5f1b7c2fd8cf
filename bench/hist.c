/* hist.c - HDR-style log-linear histogram: below HIST_SUB the buckets are
 * exact; above, each power of two is split into HIST_HALF equal buckets. */
#include <string.h>

#include "hist.h"

static int msb(uint64_t v)
{
    return 63 - __builtin_clzll(v);
}

static unsigned bucket_of(uint64_t v)
{
    int shift;

    if (v < HIST_SUB)
        return (unsigned)v;
    if (v >= (1ull << (HIST_MAX_BITS + 1)))
        v = (1ull << (HIST_MAX_BITS + 1)) - 1;
    shift = msb(v) - (HIST_SUB_BITS - 1); /* v >> shift lies in [HALF, SUB) */
    return HIST_SUB + (unsigned)(shift - 1) * HIST_HALF + (unsigned)((v >> shift) - HIST_HALF);
}

/* The largest value that falls into bucket i. */
static uint64_t bucket_high(unsigned i)
{
    unsigned shift, m;

    if (i < HIST_SUB)
        return i;
    shift = (i - HIST_SUB) / HIST_HALF + 1;
    m = (i - HIST_SUB) % HIST_HALF + HIST_HALF;
    return (((uint64_t)m + 1) << shift) - 1;
}

void hist_reset(struct hist *h)
{
    memset(h, 0, sizeof(*h));
}

void hist_record(struct hist *h, uint64_t v)
{
    if (h->n == 0 || v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
    h->n++;
    h->sum += (double)v;
    h->counts[bucket_of(v)]++;
}

void hist_merge(struct hist *dst, const struct hist *src)
{
    if (src->n == 0)
        return;
    if (dst->n == 0 || src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
    dst->n += src->n;
    dst->sum += src->sum;
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        dst->counts[i] += src->counts[i];
}

uint64_t hist_percentile(const struct hist *h, double p)
{
    uint64_t rank, seen = 0;

    if (h->n == 0)
        return 0;
    rank = (uint64_t)(p / 100.0 * (double)h->n + 0.999999);
    if (rank < 1)
        rank = 1;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            uint64_t v = bucket_high(i);
            return v > h->max ? h->max : v;
        }
    }
    return h->max;
}

double hist_mean(const struct hist *h)
{
    return h->n ? h->sum / (double)h->n : 0.0;
}
