/* redis.h - the link to Redis: scripts by EVALSHA, pub/sub, timeouts, reconnects. */
#ifndef DLOCKD_REDIS_H
#define DLOCKD_REDIS_H

#include <hiredis/hiredis.h>

#include "scripts.h"

struct dlockd;

#define REDIS_NODES_MAX 32 /* masters of a Redis Cluster dlockd works with */

/*
 * A script's result. r is NULL when Redis did not answer within
 * backend-timeout, answered with an error, or the link dropped: the call may
 * have run, or may still run. Then `late`, when given, is called once more:
 * with the real reply when it comes, or with NULL when none will. r is only
 * valid during the call.
 */
typedef void redis_cb(struct dlockd *d, redisReply *r, void *arg);

/* What the link tells its owner; the link calls nothing else above it. */
struct redis_owner {
    void (*broadcast)(struct dlockd *d, const char *event);        /* to every session: JEOPARDY, SAFE */
    void (*message)(struct dlockd *d, int latch, const char *msg); /* on the latch channel (1) or this daemon's */
    void (*renew)(struct dlockd *d);                               /* renew every lease now: the link is back */
    void (*failover)(struct dlockd *d);                            /* the same, to another server than before */
    void (*resubscribed)(struct dlockd *d); /* a new pub/sub connection: what was published before it is lost */
};

/* A link to Redis that reports to owner (not copied), not connected yet. */
struct redis *redis_new(struct dlockd *d, const struct redis_owner *owner);
/* Drops the link for good; pending calls are answered NULL. */
void redis_close(struct redis *rd);
void redis_free(struct redis *rd);
/* Starts connecting; reconnects with backoff whenever the link drops or Redis is refused. */
void redis_start(struct redis *rd);
/* 1 when both connections are up, authenticated, the scripts known and the eviction policy checked. */
int redis_up(const struct redis *rd);
/* 1 while dlockd has told sessions * JEOPARDY and not yet * SAFE. */
int redis_jeopardy(const struct redis *rd);
/* The link for INFO: "up", "down", or "refused" (Redis may evict keys). */
const char *redis_state(const struct redis *rd);
/* The Redis in use or last tried, "HOST:PORT" or "unix:PATH"; "" before the sentinels named one. */
const char *redis_addr(const struct redis *rd);
/*
 * The longest a daemon whose link went down takes to be up again on a Redis
 * that answers: its longest backoff, then a handshake within backend-timeout.
 * Every daemon sharing a new Redis notices it within that much of another.
 */
int64_t redis_notice_ms(const struct redis *rd);
/* How many times the link came up again after it had been up once. */
uint64_t redis_reconnects(const struct redis *rd);
/* Why the link is not up or in jeopardy, for operators; "" when all is well. */
const char *redis_error(const struct redis *rd);
/* Why redis_script cannot run now, as the text of an ERR BACKEND. */
const char *redis_unavailable(const struct redis *rd);

/* The hash slots keys fall in: CLUSTER_SLOTS with Redis Cluster, 1 for one Redis. */
int redis_slots(const struct redis *rd);
/* The slot of key (0..redis_slots-1): Redis Cluster refuses a call whose keys are in two. */
int redis_slot(const struct redis *rd, const char *key);
/* The node (of redis_nodes, as redis_command takes it) that serves slot now; -1 when none known. */
int redis_node_of(const struct redis *rd, int slot);
/* Changes whenever calls may go elsewhere than before: a handshake, a new slot table, a redirect. */
uint64_t redis_routing(const struct redis *rd);
/*
 * 1 when every write since the slot table was installed went to the master
 * the table names for its slot (no refresh running, no MOVED or ASK since);
 * always 1 without cluster.
 */
int redis_routing_settled(const struct redis *rd);

/* 1 when redis_script may be called now. */
int redis_accepts(const struct redis *rd);
/*
 * Runs a script with argv[0..nkeys) as KEYS and the rest as ARGV (all
 * copied). cb is called exactly once, never before this returns. While
 * dlockd first connects, the call waits for the link (backend-timeout at
 * most). Returns 0, or -1 when the link is not up (cb is then not called).
 */
int redis_script(struct redis *rd, enum script_id id, int nkeys, int argc, const char **argv, redis_cb *cb,
                 redis_cb *late, void *arg);

/* Arguments formatted for Redis already ("$<len>\r\n<bytes>\r\n" each, redis_resp_bulk). */
struct redis_resp {
    const char *buf;
    size_t len;
};
#define REDIS_RESP_BULK_MAX(len) ((len) + 25) /* what redis_resp_bulk writes for len bytes, at most */
/* Writes s (len bytes) as a RESP bulk string at p, which has REDIS_RESP_BULK_MAX(len) bytes. Returns the end. */
char *redis_resp_bulk(char *p, const char *s, size_t len);
/*
 * The same as redis_script, the argc arguments (nkeys of them KEYS) given
 * formatted in parts, one after the other (copied), and the slot of the keys
 * (redis_slot) given. For a script of the function library only.
 */
int redis_script_resp(struct redis *rd, enum script_id id, int slot, int nkeys, int argc,
                      const struct redis_resp *parts, int nparts, redis_cb *cb, redis_cb *late, void *arg);

/* The Redis servers dlockd writes to: the masters of a cluster, else 1. */
int redis_nodes(const struct redis *rd);
/*
 * Runs a plain command (argv copied; SCAN for LIST) on the node-th of
 * redis_nodes, with the same deadline and answer rules as redis_script,
 * without a late callback. Returns 0, or -1 when the link is not up (cb is
 * then not called).
 */
int redis_command(struct redis *rd, int node, int argc, const char **argv, redis_cb *cb, void *arg);

/* While a callback runs: when its call was sent (monotonic us); else 0. */
uint64_t redis_answering_sent(const struct redis *rd);
/* 1 when the link failed (went down, a call timed out or erred) at or since ms (monotonic). */
int redis_trouble_since(const struct redis *rd, uint64_t ms);
/* 1 while a `late` callback runs: its reply came after the call timed out. */
int redis_answering_late(const struct redis *rd);
/* Called by the renewal task as a cycle starts: checks the eviction policy again. */
void redis_renewing(struct redis *rd);
/* Called by the renewal task when every call of a cycle succeeded: ends
 * jeopardy unless something failed since the cycle started. */
void redis_renewed(struct redis *rd);

/* The string of element i of an array reply (also for integers); "" when absent. */
const char *redis_elem(const redisReply *r, size_t i, char *buf, size_t len);
long long redis_elem_int(const redisReply *r, size_t i);

#endif
