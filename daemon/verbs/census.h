/* census.h - what LIST and SESSIONS show, as JSON documents shared with the admin endpoint. */
#ifndef DLOCKD_CENSUS_H
#define DLOCKD_CENSUS_H

#include <jansson.h>

struct dlockd;

#define CENSUS_LIMIT_DEFAULT 100 /* entries of LIST and SESSIONS without limit= */
#define CENSUS_LIMIT_MAX 1000    /* the largest limit= */
#define CENSUS_BUSY (-2)         /* census_names: as many censuses as allowed are running */
#define CENSUS_BUSY_TEXT "as many censuses as allowed are running; try again"

/*
 * What a collection hands over: its document (the callee takes ownership),
 * or NULL and why (the text of an ERR BACKEND).
 */
typedef void census_done(struct dlockd *d, json_t *doc, const char *err, void *arg);

/*
 * Collects the names held or waited on through every daemon sharing the
 * Redis whose name matches the glob pattern (NULL for all), limit at most,
 * then the latches created through this daemon that match, limit at most:
 * {"names":[{"name","type","holders","waiters"}...],"latches":[latch_list's
 * entries],"more":0|1}. A bounded number of SCAN steps, then one STATUS per
 * name found, a few unanswered at a time, and one read per latch. Returns 0
 * (done is called later, once), -1 when Redis cannot be asked now, or
 * CENSUS_BUSY when as many as allowed run already (daemon-wide).
 */
int census_names(struct dlockd *d, const char *pattern, long long limit, census_done *done, void *arg);
/*
 * Collects the sessions of this daemon, limit at most:
 * {"sessions":[{"session","client","peer","ttl_ms","holds","waits"}...],"more":0|1}.
 * Calls done before it returns (it may read Redis later: callers expect either).
 */
void census_sessions(struct dlockd *d, long long limit, census_done *done, void *arg);

#endif
