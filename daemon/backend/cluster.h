/* cluster.h - Redis Cluster routing: key slots, the slot table, redirects, a connection per master. */
#ifndef DLOCKD_CLUSTER_H
#define DLOCKD_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

struct dlockd;
struct addr;

#define CLUSTER_SLOTS 16384
#define CLUSTER_HOST_MAX 256
#define CLUSTER_REDIRECTS_MAX 5 /* MOVED or ASK replies one call follows before it gives up */

/* A node's address, as CLUSTER SLOTS and the redirects give it. */
struct cluster_node {
    char host[CLUSTER_HOST_MAX];
    int port;
};

/* One master and its replicas. */
struct cluster_shard {
    struct cluster_node master;
    struct cluster_node *replicas;
    int nreplicas;
};

/* Who serves which slot, from one CLUSTER SLOTS reply. */
struct cluster_table {
    struct cluster_shard *shards; /* one per master, in the order the reply first names them */
    int nshards;
    int16_t shard_of[CLUSTER_SLOTS]; /* index in shards of each slot's master; -1 when no node serves it */
};

enum cluster_redirect {
    CLUSTER_NO_REDIRECT, /* any other reply */
    CLUSTER_MOVED,       /* the slot lives elsewhere now: ask there, and refresh the table */
    CLUSTER_ASK,         /* the slot is migrating: ask there once, after ASKING */
};

/* A reply to cluster_send, as redis.h's redis_cb: r is NULL when none came; valid only during the call. */
typedef void cluster_cb(struct dlockd *d, redisReply *r, void *arg);

/* What the router tells its owner. */
struct cluster_owner {
    void (*refreshed)(struct dlockd *d, int ok); /* a refresh ended: ok 1 with a new table installed, 0 when no node answered */
};

/* Counters, for INFO and the tests. */
struct cluster_stats {
    uint64_t moved;     /* MOVED replies followed */
    uint64_t asked;     /* ASK replies followed */
    uint64_t refreshes; /* refreshes that installed a table */
    uint64_t failures;  /* refreshes that found no node to answer */
    int conns;          /* connections to masters open now */
};

/* --- routing, without I/O */

/* The slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key without one, mod 16384. */
int cluster_slot(const char *key, size_t len);

/*
 * Builds *t from a CLUSTER SLOTS reply; from_host stands for the nodes whose
 * endpoint is given as "" (the node that answered). Returns 0, or -1 with
 * *t empty and the reason in err when the reply is malformed, overlapping,
 * an error, or assigns no slot. Free t's contents with cluster_table_clear.
 */
int cluster_table_parse(const redisReply *r, const char *from_host, struct cluster_table *t, char *err,
                        size_t len);
/* Frees what cluster_table_parse allocated and empties t. */
void cluster_table_clear(struct cluster_table *t);
/* The shard that serves slot in t, or NULL when none does (or slot is out of range). */
const struct cluster_shard *cluster_table_shard(const struct cluster_table *t, int slot);

/*
 * Reads a MOVED or ASK error text ("MOVED 3999 127.0.0.1:6381"). On a
 * redirect, fills *slot and *to; to->host is "" when Redis gave no host
 * (the node that answered). Anything else is CLUSTER_NO_REDIRECT.
 */
enum cluster_redirect cluster_redirect_parse(const char *err, int *slot, struct cluster_node *to);

/* --- the router: a slot table kept fresh, and one connection per master */

/*
 * A router that reports to owner (not copied), with the seeds (copied; TCP
 * addresses of any nodes, replicas too). It knows no table until the first
 * refresh ends: call cluster_refresh. AUTH uses redis-user and
 * redis-password; every try and call has backend-timeout.
 */
struct cluster *cluster_new(struct dlockd *d, const struct cluster_owner *owner, const struct addr *seeds,
                            int nseeds);
/* Closes every connection (pending calls are answered NULL) and frees c. */
void cluster_free(struct cluster *c);

/*
 * Asks the known nodes, then the seeds, one at a time, for CLUSTER SLOTS
 * and installs the first table one gives; connections to nodes that are no
 * longer masters are closed. owner->refreshed is called when it ends,
 * never before this returns. A call while a refresh runs joins it.
 */
void cluster_refresh(struct cluster *c);
/* 1 while a refresh runs. */
int cluster_refreshing(const struct cluster *c);
/* The table installed last, or NULL before the first refresh succeeded. */
const struct cluster_table *cluster_table(const struct cluster *c);
/* The master that serves slot, or NULL when none is known. */
const struct cluster_node *cluster_node_for_slot(const struct cluster *c, int slot);
/* Why the last refresh failed, for logs; "" after a success. */
const char *cluster_error(const struct cluster *c);
const struct cluster_stats *cluster_stats(const struct cluster *c);

/*
 * Sends cmd (a command formatted by redisFormatSdsCommandArgv; c takes it)
 * to the master of slot. A MOVED reply is sent again to the node it names
 * and starts a refresh; an ASK reply is sent again to its node after
 * ASKING; after CLUSTER_REDIRECTS_MAX of them the last one is the answer.
 * cb is called exactly once, never before this returns: with the reply
 * (errors included), or NULL when none came within backend-timeout or the
 * connection was lost (the command may have run; a refresh is started).
 * late, when given, is called after a NULL once more: with the reply when
 * it comes, or NULL when none will. Returns 0, or -1 when no master of slot
 * is known (cmd is freed, cb not called).
 */
int cluster_send(struct cluster *c, int slot, sds cmd, cluster_cb *cb, cluster_cb *late, void *arg);

#endif
