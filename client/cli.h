/* cli.h - the dlock command: settings shared by its files, exit statuses. */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include "dlock.h"

/* Exit statuses (dlock(1) documents them). */
#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1        /* status/info/ping: the request failed */
#define CLI_EXIT_USAGE 2       /* status/info/ping: bad command line */
#define CLI_EXIT_TEMPFAIL 75   /* EX_TEMPFAIL: no dlockd reachable, ERR BACKEND, no reply in time */
#define CLI_EXIT_TIMEOUT 75    /* run: not granted within --wait (EX_TEMPFAIL); -E changes it */
#define CLI_EXIT_LOST 76       /* run: the lock was lost while CMD ran, CMD was terminated */
#define CLI_EXIT_RUNFAIL 125   /* run: dlock itself failed (usage, connection, server error) */
#define CLI_EXIT_NOEXEC 126    /* run: CMD could not be executed */
#define CLI_EXIT_NOTFOUND 127  /* run: CMD was not found */

#define CLI_MAX_NAMES 64 /* names of one run: those of one LOCK */

/* The command line. */
struct cli {
    const char *addr;        /* --addr, else $DLOCK_ADDR, else the library's default */
    long long ttl_ms;        /* --ttl: session ttl (0: the server's default) */
    const char *name;        /* --name: client name shown by STATUS */
    int json;                /* --json: machine-readable output */
    long long wait_ms;       /* run --wait (default: no limit) */
    const char *command;     /* run -c: a shell command instead of CMD */
    int verbose;             /* run --verbose: who holds the lock, and the queue, while waiting */
    int shared;              /* run --shared */
    int limit;               /* run --semaphore LIMIT; 0 for a lock */
    long long grace_ms;      /* run --grace: SIGTERM to SIGKILL after a lost lock */
    int timeout_status;      /* run -E: exit status when --wait runs out */
    const char *adminpass;   /* --adminpass: for ls, sessions, kill, force; else $DLOCK_ADMINPASS */
    int limit_n;             /* ls, sessions --limit: entries at most */
};

/* Connects with the settings of c; on failure prints why (cli_why_unreachable), stores the
 * DLOCK_ERR_* in *err and returns NULL. */
dlock_t *cli_connect(const struct cli *c, dlock_event_cb cb, void *arg, int *err);
/* 1 when rc is a temporary failure (exit CLI_EXIT_TEMPFAIL): no connection or reply, ERR BACKEND. */
int cli_temporary(int rc);
/*
 * Why no address of addrs (a DLOCK_ADDR list) let dlock in, one "ADDR: reason" each
 * ("connection refused", "no such host", "timed out", ...), joined by "; " into buf.
 * Tries each address again, each within timeout_ms.
 */
void cli_why_unreachable(const char *addrs, long long timeout_ms, char *buf, size_t len);
/* run --verbose: prints who holds each of names that is in use, and how many wait for it (STATUS). */
void cli_tell_holders(const struct cli *c, dlock_t *h, const char *const *names, int n);
/* Prints "dlock: " and the message to stderr (a JSON object with --json). */
void cli_msg(const struct cli *c, const char *event, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* dlock ls, sessions, kill, force: returns the exit status, or -1 when argv does not fit cmd. */
int cli_admin(const struct cli *c, const char *cmd, int argc, char **argv);
/* dlock run: holds names (1-64, all or nothing) while cmd runs; returns the exit status. */
int cli_run(const struct cli *c, const char *const *names, int n, char **cmd);

#endif
