/* config.h - dlockd's configuration: one table row per key. */
#ifndef DLOCKD_CONFIG_H
#define DLOCKD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"

#define CONFIG_MAX_ADDRS 16 /* addresses of a repeatable key: listen, sentinel, cluster */
#define CONFIG_MAX_REPLICAS_ACK 16 /* the largest min-replicas-ack */
#define CONFIG_VALUE_MAX (CONFIG_MAX_ADDRS * 300) /* bytes of a value as config_each shows it */

struct sockaddr;

struct addr {
    int is_unix;    /* 1 for unix:PATH */
    char host[256]; /* TCP host */
    int port;       /* TCP port */
    char path[108]; /* unix socket path */
};

/* The values of a repeatable address key, in the order given. */
struct addr_list {
    struct addr addr[CONFIG_MAX_ADDRS];
    int n;
    int given;      /* 1 once a line replaced the default */
};

struct config {
    struct addr_list listen;  /* client listeners */
    struct addr redis;        /* the Redis server, unless sentinels name it */
    struct addr_list sentinels; /* Redis Sentinels that name the master; none: use redis */
    struct addr_list cluster;  /* Redis Cluster seeds (any nodes); none: use redis or the sentinels */
    int redis_given;           /* the redis key was set, not defaulted */
    char *sentinel_master;    /* the master's name at the sentinels, or NULL */
    char *sentinel_password;  /* AUTH to the sentinels, or NULL */
    char *redis_password;     /* AUTH to Redis, or NULL */
    char *redis_user;         /* ACL user for AUTH (Redis 6+), or NULL */
    char *key_prefix;         /* prefix of every key and channel */
    int64_t session_ttl;      /* ms */
    int64_t session_ttl_min;  /* ms */
    int64_t session_ttl_max;  /* ms */
    int64_t lock_lease;       /* ms: Redis-side lease of every hold */
    int64_t lock_delay;       /* ms an expired session's holds stay unavailable */
    int64_t failover_delay;   /* ms without grants after a failover; 0: one lock-lease */
    int64_t backend_timeout;  /* ms */
    int64_t min_replicas_ack; /* replicas WAIT must confirm a grant on before it is answered; 0: none */
    char *requirepass;        /* client password, or NULL */
    char *adminpass;          /* password of the operator verbs (it also satisfies requirepass), or NULL */
    int64_t maxclients;
    int64_t max_line;         /* bytes, with terminator */
    int64_t max_waiters;      /* waiting requests on this daemon */
    int64_t max_holds;        /* holds per session */
    int64_t max_holds_total;  /* holds of all sessions on this daemon */
    int64_t max_waits;        /* waits per session: LOCK, ACQUIRE and AWAIT */
    int64_t max_queued;       /* untagged lines waiting their turn, per connection */
    int64_t max_inflight;     /* requests being served at once, per connection */
    int64_t max_requests;     /* requests held on this daemon: served, queued, behind the gate */
    int64_t max_reads;        /* STATUS, LIST and SESSIONS served at once on this daemon */
    int64_t max_reads_client; /* the same per client (connection, so session); the rest wait in turn */
    int64_t gate_wait;        /* ms an operation may wait in dlockd to be sent (behind the failover gate) */
    int64_t max_latches;      /* latches a session created that still live */
    int64_t max_latches_total; /* latches created through this daemon that still live */
    int64_t max_latches_per_peer; /* of those, created from one client address, whatever session */
    int64_t latch_ttl_max;    /* ms a latch may live at most */
    int64_t max_ids;          /* id= replies remembered per session */
    int64_t max_ids_total;    /* id= replies remembered on this daemon */
    enum log_level log_level;
    int log_syslog;           /* 1: log to syslog instead of stderr */
    struct addr admin;        /* HTTP admin endpoint; admin_on 0: none */
    int admin_on;
    int64_t admin_maxclients; /* connections to the admin endpoint at once; more are answered 503 */
    int64_t protected_mode;   /* 1: no non-loopback listener without requirepass */
    int64_t unixsocket_perm;  /* mode of unix listen sockets */
    int64_t auth_timeout;     /* ms an unauthenticated connection may stay */
    int64_t auth_fail_delay;  /* ms before a wrong password is answered */
    int64_t preauth_max_line; /* bytes per line before AUTH */
    int64_t client_output_limit; /* bytes of unsent replies before a connection is cut */
    char *file;               /* the config file, for reloads; NULL for none */
};

/* Parses "HOST:PORT" or "unix:PATH". Returns 0, or -1. */
int config_parse_addr(const char *s, struct addr *a);
/* 1 when got is the password want; the time taken depends only on the length of got. */
int config_secret_eq(const char *want, const char *got);
/* Formats an address for logs. */
const char *config_addr_str(const struct addr *a, char *buf, size_t len);
/* 1 when sa is in 127.0.0.0/8, ::1 or ::ffff:127.0.0.0/104, or a unix socket: protected mode allows it. */
int config_loopback(const struct sockaddr *sa);

/*
 * Loads defaults, then FILE (may be NULL), then `--key value` pairs from
 * argv. Returns 0, or -1 with a one-line reason naming file, line and key
 * (cfg is then freed). config_free may be called again on a freed cfg.
 */
int config_load(struct config *cfg, const char *file, int argc, char **argv, char *err, size_t errlen);
void config_free(struct config *cfg);
/*
 * Moves the keys that may change while running from fresh into cur, and
 * leaves the others as they are. Writes the names of keys that changed but
 * need a restart into restart (comma-separated; "" when none).
 */
void config_apply_live(struct config *cur, struct config *fresh, char *restart, size_t len);
/* Called by config_each with each key and its value. */
typedef void config_each_cb(const char *key, const char *value, void *arg);
/*
 * Calls fn with every key, in the order of the table, and its value in cfg
 * as the config file would give it ("" for none); a secret key that is set
 * (requirepass, redis-password, any key marked SECRET) shows as "********".
 */
void config_each(const struct config *cfg, config_each_cb *fn, void *arg);
/* Writes every key with its default and whether SIGHUP applies it, one a line. */
void config_help(FILE *f);

#endif
