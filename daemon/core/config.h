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

/*
 * Every config key, a row each, in the order --help lists them: its name,
 * type (CONF_<type> in config.c; the C type of its field follows from it),
 * field of struct config, default (NULL: none), bounds of a number, and
 * LIVE (SIGHUP applies it) or RESTART, with SECRET (its value is never
 * shown). A key is added here alone; make check then asks for it in
 * conf/dlockd.conf, PROTOCOL.md and dlockd.conf(5).
 */
#define CONFIG_KEYS(K) \
    K("listen", ADDR_LIST, listen, "127.0.0.1:7411", 0, 0, RESTART) /* client listeners */ \
    K("redis", ADDR, redis, "127.0.0.1:6379", 0, 0, RESTART) /* the Redis server, unless sentinels name it */ \
    K("redis-password", STR, redis_password, NULL, 0, 0, RESTART | SECRET) /* AUTH to Redis, or NULL */ \
    K("redis-user", STR, redis_user, NULL, 0, 0, RESTART) /* ACL user for AUTH (Redis 6+), or NULL */ \
    /* Redis Sentinels that name the master; none: use redis */ \
    K("sentinel", ADDR_LIST, sentinels, NULL, 0, 0, RESTART) \
    /* Redis Cluster seeds (any nodes); none: use redis or the sentinels */ \
    K("cluster", ADDR_LIST, cluster, NULL, 0, 0, RESTART) \
    /* the master's name at the sentinels, or NULL */ \
    K("sentinel-master", STR, sentinel_master, NULL, 0, 0, RESTART) \
    /* AUTH to the sentinels, or NULL */ \
    K("sentinel-password", STR, sentinel_password, NULL, 0, 0, RESTART | SECRET) \
    K("key-prefix", STR, key_prefix, "dlock:", 0, 0, RESTART) /* prefix of every key and channel */ \
    K("session-ttl", DURATION, session_ttl, "10s", 100, DMAX, LIVE) \
    K("session-ttl-min", DURATION, session_ttl_min, "1s", 100, DMAX, LIVE) \
    K("session-ttl-max", DURATION, session_ttl_max, "1h", 100, DMAX, LIVE) \
    K("lock-lease", DURATION, lock_lease, "30s", 300, DMAX, RESTART) /* ms: Redis-side lease of every hold */ \
    K("lock-delay", DURATION, lock_delay, "0", 0, DMAX, LIVE) /* ms an expired session's holds stay unavailable */ \
    /* ms without grants after a failover; 0: one lock-lease */ \
    K("failover-delay", DURATION, failover_delay, "0", 0, DMAX, LIVE) \
    K("backend-timeout", DURATION, backend_timeout, "2s", 10, DMAX, LIVE) \
    /* replicas WAIT must confirm a grant on before it is answered; 0: none */ \
    K("min-replicas-ack", INT, min_replicas_ack, "0", 0, CONFIG_MAX_REPLICAS_ACK, LIVE) \
    K("requirepass", STR, requirepass, NULL, 0, 0, LIVE | SECRET) /* client password, or NULL */ \
    /* password of the operator verbs (it also satisfies requirepass), or NULL */ \
    K("adminpass", STR, adminpass, NULL, 0, 0, LIVE | SECRET) \
    /* 1: no non-loopback listener without requirepass */ \
    K("protected-mode", BOOL, protected_mode, "yes", 0, 1, RESTART) \
    /* ms an unauthenticated connection may stay */ \
    K("auth-timeout", DURATION, auth_timeout, "10s", 100, DMAX, LIVE) \
    /* ms before a wrong password is answered */ \
    K("auth-fail-delay", DURATION, auth_fail_delay, "500ms", 0, 60000, LIVE) \
    K("preauth-max-line", INT, preauth_max_line, "512", 64, 1048576, LIVE) /* bytes per line before AUTH */ \
    K("maxclients", INT, maxclients, "10000", 1, 1000000, LIVE) \
    K("max-line", INT, max_line, "4096", 64, 1048576, LIVE) /* bytes, with terminator */ \
    /* bytes of unsent replies before a connection is cut */ \
    K("client-output-limit", INT, client_output_limit, "1048576", 4096, 1LL << 32, LIVE) \
    K("max-waiters", INT, max_waiters, "100000", 0, 100000000, LIVE) /* waiting requests on this daemon */ \
    K("max-holds", INT, max_holds, "10000", 1, 100000000, LIVE) /* holds per session */ \
    /* holds of all sessions on this daemon */ \
    K("max-holds-total", INT, max_holds_total, "1000000", 1, 100000000, LIVE) \
    K("max-waits", INT, max_waits, "4096", 0, 100000000, LIVE) /* waits per session: LOCK, ACQUIRE and AWAIT */ \
    /* untagged lines waiting their turn, per connection */ \
    K("max-queued", INT, max_queued, "1000", 1, 1000000, LIVE) \
    /* requests being served at once, per connection */ \
    K("max-inflight", INT, max_inflight, "8192", 1, 1000000, LIVE) \
    /* requests held on this daemon: served, queued, behind the gate */ \
    K("max-requests", INT, max_requests, "100000", 1, 100000000, LIVE) \
    /* STATUS, LIST and SESSIONS served at once on this daemon */ \
    K("max-reads", INT, max_reads, "256", 1, 1000000, LIVE) \
    /* the same per client (connection, so session); the rest wait in turn */ \
    K("max-reads-client", INT, max_reads_client, "16", 1, 1000000, LIVE) \
    /* ms an operation may wait in dlockd to be sent (behind the failover gate) */ \
    K("gate-wait", DURATION, gate_wait, "3s", 10, DMAX, LIVE) \
    K("max-latches", INT, max_latches, "10000", 0, 100000000, LIVE) /* latches a session created that still live */ \
    /* latches created through this daemon that still live */ \
    K("max-latches-total", INT, max_latches_total, "100000", 0, 100000000, LIVE) \
    /* of those, created from one client address, whatever session */ \
    K("max-latches-per-peer", INT, max_latches_per_peer, "10000", 0, 100000000, LIVE) \
    /* ms a latch may live at most */ \
    K("latch-ttl-max", DURATION, latch_ttl_max, "168h", 1000, 168LL * 3600 * 1000, LIVE) \
    K("max-ids", INT, max_ids, "1000", 0, 1000000, LIVE) /* id= replies remembered per session */ \
    K("max-ids-total", INT, max_ids_total, "100000", 0, 100000000, LIVE) /* id= replies remembered on this daemon */ \
    K("unixsocket-perm", OCTAL, unixsocket_perm, "0660", 0, 0777, RESTART) /* mode of unix listen sockets */ \
    K("admin-listen", OPT_ADDR, admin, "", 0, 0, RESTART) /* HTTP admin endpoint; admin_on 0: none */ \
    /* connections to the admin endpoint at once; more are answered 503 */ \
    K("admin-maxclients", INT, admin_maxclients, "16", 1, 1024, LIVE) \
    K("log-level", LEVEL, log_level, "info", 0, 0, LIVE) \
    K("log-target", TARGET, log_syslog, "stderr", 0, 0, LIVE) /* 1: log to syslog instead of stderr */

/* The C type of a key's field, by its type. */
#define CONFIG_CTYPE_ADDR struct addr
#define CONFIG_CTYPE_ADDR_LIST struct addr_list
#define CONFIG_CTYPE_OPT_ADDR struct addr
#define CONFIG_CTYPE_STR char *
#define CONFIG_CTYPE_DURATION int64_t /* ms */
#define CONFIG_CTYPE_INT int64_t
#define CONFIG_CTYPE_OCTAL int64_t
#define CONFIG_CTYPE_BOOL int64_t
#define CONFIG_CTYPE_LEVEL enum log_level
#define CONFIG_CTYPE_TARGET int /* 1: syslog */

struct config {
#define CONFIG_FIELD(name, type, field, deflt, min, max, flags) CONFIG_CTYPE_##type field;
    CONFIG_KEYS(CONFIG_FIELD)
#undef CONFIG_FIELD
    int redis_given;          /* the redis key was set, not defaulted */
    int admin_on;             /* admin-listen names an address */
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
