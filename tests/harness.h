/* harness.h - integration test harness: private redis-server and dlockd processes, raw protocol clients. */
#ifndef DLOCK_HARNESS_H
#define DLOCK_HARNESS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define H_TIMEOUT 5000   /* ms: default wait for a reply that should come at once */
#define H_MAX_EXTRA 32   /* extra command-line arguments of one process */

/* A NULL-terminated argument list for h_redis_start()/h_dlockd_start(): H_ARGS("--lock-lease", "3s"). */
#define H_ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* A redis-server started by the harness. */
struct h_redis {
    pid_t pid;                     /* 0 while not running */
    pid_t owner;                   /* the process that started it (only it may stop it) */
    int port;                      /* loopback TCP port, kept across restarts */
    char dir[256];                 /* private working directory (mkdtemp) */
    char log[300];                 /* dir/redis.log: its stdout and stderr */
    char *extra[H_MAX_EXTRA + 1];  /* extra arguments, NULL-terminated */
    char conf[300];                /* config file given as its first argument, "" for none */
};

/* A dlockd started by the harness. */
struct h_dlockd {
    pid_t pid;                     /* 0 while not running */
    pid_t owner;                   /* the process that started it */
    int port;                      /* loopback TCP port it listens on, kept across restarts */
    int redis_port;                /* the Redis it uses */
    char dir[256];                 /* private directory (mkdtemp) */
    char log[300];                 /* dir/dlockd.log: its stdout and stderr, appended across restarts */
    char *extra[H_MAX_EXTRA + 1];  /* extra arguments, NULL-terminated */
    char conf[300];                /* config file given as its first argument, "" for none */
    char *env[H_MAX_EXTRA + 1];    /* "NAME=VALUE" added to its environment, NULL-terminated */
};

/* A client connection speaking the line protocol. */
struct h_conn {
    int fd;             /* socket; -1 once closed by h_close() */
    int eof;            /* 1 once the server closed the connection (or it broke) */
    char *buf;          /* bytes received, not yet split into lines */
    size_t len, cap;    /* bytes in buf, size of buf */
    char **queue;       /* complete lines received and not yet taken */
    size_t nqueue;      /* lines in queue */
    size_t qcap;        /* slots in queue */
    char *last;         /* the line returned last; valid until the next take on this connection */
    char session[64];   /* session id from h_client()'s HELLO, "" otherwise */
    char secret[64];    /* its secret, for HELLO session= secret= */
};

/* ---- process and run setup */

/*
 * Creates the base temporary directory of this test program (under $TMPDIR
 * or /tmp) and registers an exit handler that kills what this process
 * started. Call once from main() before running the suite.
 */
void h_init(void);
/*
 * Ends the run: removes the base directory when failed == 0 and H_KEEP is
 * not set in the environment, else prints where the logs are.
 */
void h_fini(int failed);
/* Runs a suite with CK_NORMAL inside h_init()/h_fini(); returns the number of failed tests. */
int h_run_suite(Suite *s);
/*
 * Stops every daemon and Redis this process started, closes its
 * connections and removes their directories. For checked teardowns; also
 * runs at exit.
 */
void h_cleanup(void);
/*
 * The fixtures of most test cases: R is a fresh redis-server (h_setup_redis),
 * D a dlockd with default settings on it (h_setup_both; NULL after
 * h_setup_redis). h_teardown is h_cleanup, forgetting both.
 */
extern struct h_redis *R;
extern struct h_dlockd *D;
void h_setup_redis(void);
void h_setup_both(void);
void h_teardown(void);

/* ---- time */

/* CLOCK_MONOTONIC in milliseconds. */
int64_t h_now_ms(void);
void h_sleep_ms(int ms);

/* A loopback TCP port that was free a moment ago and was not handed out before by this process. */
int h_free_port(void);

/* ---- redis-server */

/*
 * Starts redis-server (REDIS_SERVER, or $REDIS_SERVER) on a free loopback
 * port in a fresh directory without persistence; extra (NULL-terminated,
 * may be NULL) is appended, e.g. H_ARGS("--appendonly", "yes"). Waits until
 * it answers PING; fails the test otherwise. Never returns NULL.
 */
struct h_redis *h_redis_start(const char *const *extra);
/* As h_redis_start(), with conf (may be NULL) as the config file, its first argument. */
struct h_redis *h_redis_start_conf(const char *conf, const char *const *extra);
/* SIGTERM (after SIGCONT), waitpid; SIGKILL after 5 s. Returns the wait status. */
int h_redis_stop(struct h_redis *r);
/* SIGKILL and waitpid. */
void h_redis_kill(struct h_redis *r);
/* Starts it again on the same port with the same arguments; fails the test unless it answers PING. */
void h_redis_restart(struct h_redis *r);
/*
 * Starts a replica of master (redis-server --replicaof) and waits (10 s) until
 * the master has heard it acknowledge all it was sent; fails the test
 * otherwise. A master started with --repl-diskless-sync-delay 0 syncs at once.
 */
struct h_redis *h_redis_replica_start(const struct h_redis *master);
/* SIGSTOP / SIGCONT. */
void h_redis_pause(struct h_redis *r);
void h_redis_resume(struct h_redis *r);

/*
 * Sends one command (arguments up to a NULL) to the Redis on port over a
 * new connection and returns the reply as a malloc'd string that the
 * caller frees: status and bulk replies as their text, integers in
 * decimal, errors as "-ERR ...", arrays flattened with '\n' between
 * elements (nested nil as ""). Returns NULL for a nil reply or when Redis
 * did not answer within 5 s (errno is then set). Never fails the test.
 */
char *h_redis_cmd(int port, const char *cmd, ...) __attribute__((sentinel));
char *h_redis_cmdv(int port, int argc, const char *const *argv);
/* As h_redis_cmd, after READONLY on the same connection: a Redis Cluster replica answers of its own keys. */
char *h_redis_cmd_replica(int port, const char *cmd, ...) __attribute__((sentinel));
/* The reply as an integer (nil is 0); LLONG_MIN on error or a non-number. */
long long h_redis_int(int port, const char *cmd, ...) __attribute__((sentinel));
/* calls= of cmdstat_<cmd> in INFO commandstats (0 when absent); -1 on error. */
long long h_redis_cmdstat(int port, const char *cmd);
/* Number of keys matching pattern, counted with SCAN; -1 on error. */
long long h_redis_count_keys(int port, const char *pattern);

/* ---- Redis Sentinel: 1 master, 2 replicas and 3 sentinels on loopback */

#define H_REPLICAS 2
#define H_SENTINELS 3

struct h_sentinels {
    char name[64];                          /* the master's name at the sentinels */
    struct h_redis *master;                 /* the first master (pid 0 once killed) */
    struct h_redis *replicas[H_REPLICAS];   /* started with --replicaof master */
    struct h_redis *sentinels[H_SENTINELS]; /* quorum 2, down-after-milliseconds 1000, failover-timeout 3000 */
    char addr[H_SENTINELS][32];             /* "127.0.0.1:PORT" of each sentinel, for --sentinel */
};

/*
 * Starts a master, its replicas (once both are in sync) and the sentinels
 * monitoring it as name, and waits (up to 15 s) until every sentinel sees
 * both replicas and the other two sentinels: a kill of the master is then
 * failed over. Fails the test otherwise. Never returns NULL.
 */
struct h_sentinels *h_sentinels_start(const char *name);
/*
 * Starts one more sentinel monitoring 127.0.0.1:master_port as name with
 * quorum and the timeouts above, from a config file in its own directory
 * that ends with extra_conf (lines, may be NULL; e.g. "requirepass pw\n",
 * or a second "sentinel down-after-milliseconds NAME N" to change one).
 */
struct h_redis *h_sentinel_spawn(const char *name, int master_port, int quorum, const char *extra_conf);
/* The master's port as the first sentinel that answers names it; -1 when none does. */
int h_sentinels_master_port(const struct h_sentinels *t);
/* The master or replica of t whose port the sentinels name as the master; NULL when none. */
struct h_redis *h_sentinels_master(const struct h_sentinels *t);
/* Waits until every running replica has all the master's writes (replication offsets); fails the test after timeout_ms. */
void h_sentinels_sync(const struct h_sentinels *t, int timeout_ms);
/*
 * Waits until every running sentinel names a master other than old_port
 * (+switch-master happened) and returns its port; fails the test after
 * timeout_ms.
 */
int h_sentinels_wait_switch(const struct h_sentinels *t, int old_port, int timeout_ms);
/* Stops the sentinels first (no failover during teardown), then the Redis servers, and frees t. */
void h_sentinels_stop(struct h_sentinels *t);

/* ---- Redis Cluster */

#define H_CLUSTER_NODES 6  /* 3 masters with one replica each */
#define H_CLUSTER_SLOTS 16384

/* A Redis Cluster started by h_cluster_start(). Roles change with failovers: ask the nodes. */
struct h_cluster {
    struct h_redis *node[H_CLUSTER_NODES]; /* node[0..2] were created masters, node[3..5] their replicas */
    int port[H_CLUSTER_NODES];             /* node[i]->port */
};

/*
 * Starts six redis-servers in cluster mode (node timeout 2 s) on free
 * loopback ports in 12000-21999 (their bus ports, 10000 higher, free too), extra (may be NULL) appended to each, joins them with
 * `redis-cli --cluster create --cluster-replicas 1` and waits (h_cluster_wait)
 * until every node sees the same slots, all served, each master with its
 * replica. Fails the test otherwise. The nodes belong to the calling process.
 */
struct h_cluster *h_cluster_start(const char *const *extra);
/*
 * Waits until every running node says cluster_state:ok and all describe the
 * same masters and slots (CLUSTER NODES); when replicas is 1, also until each
 * master has a replica whose link is up and that every node's CLUSTER SLOTS
 * lists. Returns 1, or 0 after timeout_ms.
 */
int h_cluster_wait(const struct h_cluster *c, int replicas, int timeout_ms);
/*
 * Reads CLUSTER NODES of the node at port: slot_port[s] (H_CLUSTER_SLOTS
 * entries) gets the port of the master that serves slot s, 0 for none.
 * Returns the number of masters that serve slots, or -1 on error.
 */
int h_cluster_slot_map(int port, int *slot_port);
/* The port of a replica of master_port that is not failed, as the node at port sees it; 0 when none. */
int h_cluster_replica_of(int port, int master_port);
/* 1 when the node at port says ROLE master. */
int h_cluster_is_master(int port);
/* The index in c of the node on port; fails the test when there is none. */
int h_cluster_index(const struct h_cluster *c, int port);
/* CLUSTER FAILOVER on the replica at port; waits (10 s) until it is master and the cluster agrees. Fails the test otherwise. */
void h_cluster_failover(struct h_cluster *c, int port);
/* The hash slot of dlockd's keys for name (key prefix dlock:), from a running node of c. Fails the test if none answers. */
int h_cluster_name_slot(const struct h_cluster *c, const char *name);
/* The port of the master that serves name's keys, as a running node of c sees it. */
int h_cluster_name_master(const struct h_cluster *c, const char *name);
/* Three names "<base>N" whose keys live on three different masters, in ascending slot order (the order a LOCK
 * of all three takes them in). */
void h_cluster_spread_names(const struct h_cluster *c, const char *base, char n[3][64]);
/* kill -9 of the node at port (h_redis_kill); the cluster notices after its node timeout. */
void h_cluster_kill(struct h_cluster *c, int port);
/* Kills every node and frees c (their directories go with h_cleanup). */
void h_cluster_stop(struct h_cluster *c);

/* ---- dlockd */

/*
 * Starts DLOCKD_PATH (or $DLOCKD) as `dlockd --listen 127.0.0.1:PORT --redis
 * 127.0.0.1:redis_port --log-level debug [extra...]` on a free port, output
 * to a log file. Waits (up to 5 s) until it accepts a connection and
 * answers PING; fails the test otherwise (printing the log's tail). Several
 * may share one Redis. redis_port 0 leaves --redis out (for --cluster seeds).
 */
struct h_dlockd *h_dlockd_start(int redis_port, const char *const *extra);
/* SIGTERM, waitpid; SIGKILL after 5 s. Returns the wait status. */
int h_dlockd_stop(struct h_dlockd *d);
/* SIGKILL and waitpid. */
void h_dlockd_kill(struct h_dlockd *d);
/* Starts it again on the same port with the same arguments and waits for PING. */
void h_dlockd_restart(struct h_dlockd *d);
/*
 * As h_dlockd_start(), and: conf (may be NULL) is passed as the config file,
 * the first argument, so the harness's --listen/--redis/--log-level and extra
 * are read after it; env ("NAME=VALUE" strings up to a NULL, may be NULL) is
 * added to the daemon's environment. Both are kept for h_dlockd_restart().
 */
struct h_dlockd *h_dlockd_start_with(int redis_port, const char *conf, const char *const *env,
                                     const char *const *extra);
/*
 * Runs DLOCKD_PATH with exactly args (NULL-terminated; no harness arguments)
 * and waits up to timeout_ms for it to exit. Its stdout and stderr go to out
 * (NUL-terminated, cut to cap). Returns the wait status, or -1 when it did not
 * exit in time (it is then killed).
 */
int h_dlockd_run(const char *const *args, char *out, size_t cap, int timeout_ms);
/* The whole log of d as a malloc'd string ("" when there is none). */
char *h_dlockd_log_read(const struct h_dlockd *d);
/* Number of lines of d's log that contain every string of needles (NULL-terminated). */
int h_log_count(const struct h_dlockd *d, const char *const *needles);
/* Polls d's log until h_log_count(d, needles) >= n or timeout_ms passed; returns the last count. */
int h_log_wait(const struct h_dlockd *d, const char *const *needles, int n, int timeout_ms);
/* Prints the last nlines lines of its log to stderr. */
void h_dlockd_log_tail(const struct h_dlockd *d, int nlines);
/* Prints the tail of every running daemon's log (what failing assertions do). */
void h_dump_logs(void);

/* ---- clients, without assertions (safe in forked helper processes) */

/* Connects to 127.0.0.1:port; NULL on failure. */
struct h_conn *h_connect_try(int port);
/* Connects to 127.0.0.1:port from the loopback address src ("127.0.0.2"): another peer for the daemon. */
struct h_conn *h_connect_from_try(int port, const char *src);
/* Connects to the unix stream socket at path; NULL on failure. */
struct h_conn *h_connect_unix_try(const char *path);
void h_close(struct h_conn *c);
/* Sends the formatted text followed by "\n". Returns 0, or -1 when the connection is broken. */
int h_send(struct h_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sends bytes as they are. Returns 0 or -1. */
int h_send_raw(struct h_conn *c, const void *data, size_t len);
/*
 * Line readers: each waits at most timeout_ms and returns NULL on timeout
 * or when the server closed the connection (c->eof). Lines received but
 * not taken stay queued, so an event skipped by h_reply() is still there
 * for h_event() and the other way round. The returned line has no "\r\n"
 * and stays valid until the next take on c.
 */
const char *h_line(struct h_conn *c, int timeout_ms);              /* next line of any kind */
const char *h_reply(struct h_conn *c, int timeout_ms);             /* next line not starting with '*' */
const char *h_reply_tag(struct h_conn *c, const char *tag, int timeout_ms); /* next "#tag ..." line */
const char *h_event(struct h_conn *c, const char *pattern, int timeout_ms); /* first '*' line matching pattern */
/* Sends a request and returns the next non-event line (h_reply). */
const char *h_request(struct h_conn *c, int timeout_ms, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Waits until the server closes the connection; 1 when it did, 0 on timeout. Lines stay queued. */
int h_wait_eof(struct h_conn *c, int timeout_ms);

/*
 * 1 when line matches pattern, else 0. Pattern characters match
 * themselves except: %d one or more digits, %x one or more lower-case hex
 * digits, %w one or more non-space characters, %* anything (also nothing),
 * %% a '%'.
 */
int h_match(const char *line, const char *pattern);
/* Copies the value of key=VALUE in a reply line to out. Returns 0, or -1 when absent or too long. */
int h_kv(const char *line, const char *key, char *out, size_t cap);
/* The value of key=N as a number; LLONG_MIN when absent or not a number. */
long long h_kv_int(const char *line, const char *key);
/* 1 when json (whitespace outside strings ignored) contains the compact text needle. */
int h_json_has(const char *json, const char *needle);
/* Polls INFO on c until it contains the compact JSON needle; returns that INFO, or fails the test after timeout_ms. */
const char *h_wait_info(struct h_conn *c, const char *needle, int timeout_ms);
/* 1 when c's session takes name at once (LOCK wait=0, then UNLOCK), else 0. */
int h_is_free(struct h_conn *c, const char *name);
/* The number after "key": in INFO's reply on c. */
long long h_info_num(struct h_conn *c, const char *key);
/* The holds of name in the Redis on port (HGETALL of its h key; "" when none), malloc'd. */
char *h_holds_at(int port, const char *name);
/* Polls until name has no hold in the Redis on port, for at most ms; 1 when it has none. */
int h_holds_gone(int port, const char *name, int ms);
/* The number after "key": in json; LLONG_MIN when absent. */
long long h_json_int(const char *json, const char *key);
/* Polls `#st STATUS name` on c (tagged, so it works while c waits) until "waiters" >= n. Returns 1, or 0 on timeout. */
int h_wait_waiters(struct h_conn *c, const char *name, long long n, int timeout_ms);
/* As h_wait_waiters, until "waiters" is exactly n (e.g. 0 once waits were cancelled). */
int h_wait_waiters_eq(struct h_conn *c, const char *name, long long n, int timeout_ms);
/* Number of lines ('\n') in text. */
int h_count_lines(const char *text);

/* ---- files and HTTP */

/* Creates a fresh directory under the run's base directory (removed with it) into out. */
void h_tmpdir(char *out, size_t cap, const char *prefix);
/* Replaces the file at path with the formatted text; fails the test on error. */
void h_write_file(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/*
 * GET path from 127.0.0.1:port over HTTP/1.0 and reads the response until the
 * server closes. Returns the status code, or -1 when there was no complete
 * response within timeout_ms. headers and body (may be NULL) get malloc'd
 * copies of the header block (status line included) and of the body.
 */
int h_http_get(int port, const char *path, char **headers, char **body, int timeout_ms);
/* As h_http_get, with "Authorization: auth" among the headers (none when auth is NULL). */
int h_http_get_auth(int port, const char *path, const char *auth, char **headers, char **body, int timeout_ms);

/* ---- assertions: they fail the test with the caller's file and line and print the daemons' log tails */

void h_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
struct h_conn *h_connect_at(const char *file, int line, int port);
struct h_conn *h_client_at(const char *file, int line, const struct h_dlockd *d, const char *hello_args);
const char *h_req_at(const char *file, int line, struct h_conn *c, const char *pattern, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
const char *h_reply_at(const char *file, int line, struct h_conn *c, const char *pattern, int timeout_ms);
const char *h_event_at(const char *file, int line, struct h_conn *c, const char *pattern, int timeout_ms);
void h_silent_at(const char *file, int line, struct h_conn *c, int ms);
void h_eof_at(const char *file, int line, struct h_conn *c, int timeout_ms);
long long h_kv_int_at(const char *file, int line, const char *reply, const char *key);

#define H_FAIL(...) h_fail_at(__FILE__, __LINE__, __VA_ARGS__)
void h_dlockd_run_at(const char *file, int line, char *out, size_t cap, int want, const char *const *args);
/* Runs `dlockd args...` (h_dlockd_run, at most 5 s) and fails the test unless it exits with want. */
#define H_RUN(out, want, ...) h_dlockd_run_at(__FILE__, __LINE__, (out), sizeof(out), (want), H_ARGS(__VA_ARGS__))
/* Connects to port; fails the test when it cannot. */
#define H_CONNECT(port) h_connect_at(__FILE__, __LINE__, (port))
/* Connects to d and sends "HELLO hello_args" (may be ""); expects OK session=...; c->session and c->secret are set. */
#define H_CLIENT(d, hello_args) h_client_at(__FILE__, __LINE__, (d), (hello_args))
/* Sends a request (printf-style) and expects the next non-event reply within H_TIMEOUT to match pattern. */
#define H_REQ(c, pattern, ...) h_req_at(__FILE__, __LINE__, (c), (pattern), __VA_ARGS__)
/* Expects the next non-event line within timeout_ms to match pattern. */
#define H_REPLY(c, pattern, timeout_ms) h_reply_at(__FILE__, __LINE__, (c), (pattern), (timeout_ms))
/* Expects an event line matching pattern within timeout_ms (other events are left queued). */
#define H_EVENT(c, pattern, timeout_ms) h_event_at(__FILE__, __LINE__, (c), (pattern), (timeout_ms))
/* Expects no non-event line for ms milliseconds. */
#define H_SILENT(c, ms) h_silent_at(__FILE__, __LINE__, (c), (ms))
/* Expects the server to close the connection within timeout_ms, with no further reply line before. */
#define H_EOF(c, timeout_ms) h_eof_at(__FILE__, __LINE__, (c), (timeout_ms))
/* The number after key= in a reply; fails the test when absent. */
#define H_KV_INT(reply, key) h_kv_int_at(__FILE__, __LINE__, (reply), (key))
/* "LOCK args", expected to be granted as a new hold (count=1); its token. */
#define H_LOCK_NEW(c, args) H_KV_INT(H_REQ((c), "OK token=%d count=1", "LOCK %s", (args)), "token")

#endif
