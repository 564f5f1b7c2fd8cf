/* renew.h - one periodic task renews every lease this daemon keeps in Redis. */
#ifndef DLOCKD_RENEW_H
#define DLOCKD_RENEW_H

struct dlockd;

/* Arms the renewal timer, every lock-lease/3. */
void renew_start(struct dlockd *d);
/* Renews everything now, or as soon as the cycle running ends (after a
 * reconnect, or to end jeopardy). Only a cycle in which every call succeeded
 * ends jeopardy. */
void renew_now(struct dlockd *d);
/*
 * The link is up on a new master (a failover, or a Redis restarted): the
 * cycle running, if any, reports nothing lost; the next cycles write back
 * every hold this daemon has (scripts/reassert.lua) instead of renewing it,
 * until one succeeds whole. The gate (batch_gate) stays closed until then,
 * and at least failover-delay.
 */
void renew_failover(struct dlockd *d);

#endif
