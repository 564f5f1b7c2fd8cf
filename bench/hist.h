/* hist.h - an HDR-style log-linear latency histogram: fixed memory, about 1 %
 * relative error, values in nanoseconds from 0 to about 18 minutes. */
#ifndef BENCH_HIST_H
#define BENCH_HIST_H

#include <stdint.h>

#define HIST_SUB_BITS 7                       /* 128 linear sub-buckets per power of two */
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_HALF (HIST_SUB / 2)
#define HIST_MAX_BITS 40                      /* values up to 2^40 ns; larger ones are clamped */
#define HIST_BUCKETS (HIST_SUB + (HIST_MAX_BITS - HIST_SUB_BITS + 1) * HIST_HALF)

struct hist {
    uint64_t n;                     /* values recorded */
    uint64_t min, max;              /* exact extremes (ns) */
    double sum;                     /* for the mean */
    uint64_t counts[HIST_BUCKETS];  /* per bucket */
};

/* Empties h. */
void hist_reset(struct hist *h);
/* Records one value v (ns). */
void hist_record(struct hist *h, uint64_t v);
/* Adds every value of src to dst. */
void hist_merge(struct hist *dst, const struct hist *src);
/*
 * The value at percentile p (0 < p <= 100): the highest value equivalent to
 * the bucket holding the ceil(p/100*n)-th smallest value, clamped to max.
 * 0 when h is empty.
 */
uint64_t hist_percentile(const struct hist *h, double p);
/* The mean (ns), 0 when empty. */
double hist_mean(const struct hist *h);

#endif
