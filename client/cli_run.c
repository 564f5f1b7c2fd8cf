/* cli_run.c - dlock run: hold one or more locks (all or nothing) or a semaphore permit while a
 * command runs, pass signals on to it, terminate it if a lock is lost, and fail unless the daemon
 * confirms at the end that the locks were held throughout.
 *
 * The main thread waits on a signalfd and a pipe: the pipe brings the result of the lock
 * call (made in a thread of its own, so that a signal can cancel the wait) and the
 * library's events. Every signal dlock handles is blocked in every thread. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define RUN_OWNER "run" /* owner of the hold within the session */

/* A message to the main loop. Smaller than PIPE_BUF, so it is written at once. */
struct note {
    char kind;        /* 'G' the lock call returned, 'L' lock lost, 'J' jeopardy, 'S' safe */
    char reason[32];
};

struct run {
    const struct cli *c;
    const char *const *names;
    int n;                  /* names, 1-CLI_MAX_NAMES */
    char *label;            /* the names, space-separated: DLOCK_NAME and messages */
    char **cmd;
    dlock_t *h;
    int notes[2];           /* pipe of struct note */
    int sfd;                /* signalfd of the handled signals */
    sigset_t handled, orig; /* handled signals; the mask to give CMD */
    pthread_t locker;       /* makes the lock call */
    int rc;                 /* its result */
    int waited;             /* --verbose: the first try was BUSY, the grant (if any) came after a wait */
    struct dlock_grant g[CLI_MAX_NAMES];
    pid_t child;
    int lost;               /* the lock was lost while CMD ran */
    long long kill_at;      /* monotonic ms to send SIGKILL; 0: none pending */
};

/* Signals that end dlock while it waits for the lock. */
static const int fatal[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
/* Signals passed on to CMD; SIGCHLD tells that it ended. */
static const int passed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGALRM};

static long long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int is_fatal(int sig)
{
    for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
        if (fatal[i] == sig)
            return 1;
    return 0;
}

static void send_note(int fd, char kind, const char *reason)
{
    struct note n = {.kind = kind};

    snprintf(n.reason, sizeof(n.reason), "%s", reason ? reason : "");
    if (write(fd, &n, sizeof(n)) != (ssize_t)sizeof(n))
        return; /* the main loop is gone */
}

static int is_ours(const struct run *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->names[i], name) == 0)
            return 1;
    return 0;
}

/* The names (tokens: the tokens of their grant) separated by spaces, malloc'd; NULL when out of memory. */
static char *joined(const struct run *r, int tokens)
{
    size_t len = 1;
    char *s, *p;

    for (int i = 0; i < r->n; i++)
        len += strlen(r->names[i]) + 22;
    if ((s = p = malloc(len)) == NULL)
        return NULL;
    *p = '\0';
    for (int i = 0; i < r->n; i++) {
        if (tokens)
            p += snprintf(p, len - (size_t)(p - s), "%s%llu", i ? " " : "", r->g[i].token);
        else
            p += snprintf(p, len - (size_t)(p - s), "%s%s", i ? " " : "", r->names[i]);
    }
    return s;
}

/* The library's callback (its I/O thread): hand the event to the main loop. */
static void on_event(dlock_t *h, const struct dlock_event *ev, void *arg)
{
    struct run *r = arg;

    (void)h;
    if (ev->type == DLOCK_EVENT_LOST && is_ours(r, ev->name))
        send_note(r->notes[1], 'L', ev->reason);
    else if (ev->type == DLOCK_EVENT_JEOPARDY)
        send_note(r->notes[1], 'J', ev->reason);
    else if (ev->type == DLOCK_EVENT_SAFE)
        send_note(r->notes[1], 'S', NULL);
}

static int take(struct run *r, long long wait_ms)
{
    const struct cli *c = r->c;

    if (c->limit > 0)
        return dlock_acquire_ex(r->h, r->names[0], c->limit, 1, wait_ms, 0, RUN_OWNER, r->g);
    return dlock_lock_ex(r->h, r->names, r->n, c->shared ? DLOCK_SHARED : 0, wait_ms, 0, RUN_OWNER, r->g);
}

/* The lock call; with --verbose a first try without waiting, and when that is BUSY, who holds what,
 * then the wait for what is left of --wait. */
static void *locker_main(void *arg)
{
    struct run *r = arg;
    long long wait_ms = r->c->wait_ms, t0 = now_ms();

    r->rc = take(r, r->c->verbose ? 0 : wait_ms);
    if (r->c->verbose && r->rc == DLOCK_ERR_BUSY) {
        cli_tell_holders(r->c, r->h, r->names, r->n);
        if (wait_ms > 0)
            wait_ms = wait_ms > now_ms() - t0 ? wait_ms - (now_ms() - t0) : 0;
        if (wait_ms != 0) {
            r->waited = 1;
            r->rc = take(r, wait_ms);
        }
    }
    send_note(r->notes[1], 'G', NULL);
    return NULL;
}

/* Blocks the handled signals in this thread (and the threads it starts) and opens the signalfd. */
static int setup_signals(struct run *r)
{
    sigemptyset(&r->handled);
    for (size_t i = 0; i < sizeof(passed) / sizeof(passed[0]); i++)
        sigaddset(&r->handled, passed[i]);
    sigaddset(&r->handled, SIGCHLD);
    if (pthread_sigmask(SIG_BLOCK, &r->handled, &r->orig) != 0)
        return -1;
    r->sfd = signalfd(-1, &r->handled, SFD_CLOEXEC);
    return r->sfd < 0 ? -1 : 0;
}

/* Waits for a signal or a note (timeout_ms < 0: no limit). Fills one of them; 0 on timeout. */
static int next_input(struct run *r, long long timeout_ms, struct signalfd_siginfo *si, struct note *n)
{
    struct pollfd p[2] = {{.fd = r->sfd, .events = POLLIN}, {.fd = r->notes[0], .events = POLLIN}};

    if (poll(p, 2, timeout_ms < 0 ? -1 : (int)timeout_ms) <= 0)
        return 0;
    if ((p[1].revents & POLLIN) && read(r->notes[0], n, sizeof(*n)) == (ssize_t)sizeof(*n))
        return 'N';
    if ((p[0].revents & POLLIN) && read(r->sfd, si, sizeof(*si)) == (ssize_t)sizeof(*si))
        return 'S';
    return 0;
}

/* The lock call returned: -1 when it granted, else dlock's exit status, said why. */
static int grant_status(struct run *r)
{
    const struct cli *c = r->c;

    if (r->rc == 0) {
        if (r->waited)
            cli_msg(c, "granted", "%s: granted", r->label);
        return -1;
    }
    if (r->rc == DLOCK_ERR_TIMEOUT || r->rc == DLOCK_ERR_BUSY) {
        cli_msg(c, "timeout", "%s: not granted within the wait", r->label);
        return c->timeout_status;
    }
    cli_msg(c, "error", "%s: %s", r->label, dlock_strerror(r->rc));
    return cli_temporary(r->rc) ? CLI_EXIT_TEMPFAIL : CLI_EXIT_RUNFAIL;
}

/* Waits for the lock. Returns -1 once granted, else dlock's exit status. */
static int wait_grant(struct run *r)
{
    const struct cli *c = r->c;
    struct signalfd_siginfo si;
    struct note n;

    for (;;) {
        switch (next_input(r, -1, &si, &n)) {
        case 'S':
            if (!is_fatal((int)si.ssi_signo))
                break;
            cli_msg(c, "interrupted", "%s while waiting for %s", strsignal((int)si.ssi_signo), r->label);
            dlock_shutdown(r->h); /* the lock call returns DLOCK_ERR_CLOSED */
            pthread_join(r->locker, NULL);
            return 128 + (int)si.ssi_signo;
        case 'N':
            if (n.kind == 'J')
                cli_msg(c, "jeopardy", "connection to dlockd in jeopardy (%s)", n.reason);
            else if (n.kind == 'S' && c->verbose) /* back after a failure: the queue may have moved */
                cli_tell_holders(c, r->h, r->names, r->n);
            if (n.kind != 'G')
                break;
            pthread_join(r->locker, NULL);
            return grant_status(r);
        }
    }
}

/* Sets DLOCK_TOKEN, DLOCK_NAME and DLOCK_SESSION for CMD. 0 or -1. */
static int set_env(struct run *r)
{
    char session[32] = "", *tokens = joined(r, 1);
    int rc = -1;

    dlock_session(r->h, session, sizeof(session));
    if (tokens && setenv("DLOCK_TOKEN", tokens, 1) == 0 && setenv("DLOCK_NAME", r->label, 1) == 0 &&
        setenv("DLOCK_SESSION", session, 1) == 0)
        rc = 0;
    free(tokens);
    return rc;
}

/* Starts CMD with DLOCK_TOKEN set. Returns 0, or dlock's exit status when CMD could not start. */
static int start_cmd(struct run *r)
{
    int errp[2], err = 0;

    if (set_env(r) < 0 || pipe2(errp, O_CLOEXEC) < 0)
        return CLI_EXIT_RUNFAIL;
    if ((r->child = fork()) < 0) {
        cli_msg(r->c, "error", "fork: %s", strerror(errno));
        return CLI_EXIT_RUNFAIL;
    }
    if (r->child == 0) {
        pthread_sigmask(SIG_SETMASK, &r->orig, NULL);
        execvp(r->cmd[0], r->cmd);
        err = errno;
        if (write(errp[1], &err, sizeof(err)) < 0)
            err = 0;
        _exit(err == ENOENT ? CLI_EXIT_NOTFOUND : CLI_EXIT_NOEXEC);
    }
    close(errp[1]);
    if (read(errp[0], &err, sizeof(err)) == (ssize_t)sizeof(err)) {
        close(errp[0]);
        waitpid(r->child, NULL, 0);
        cli_msg(r->c, "error", "%s: %s", r->cmd[0], strerror(err));
        return err == ENOENT ? CLI_EXIT_NOTFOUND : CLI_EXIT_NOEXEC;
    }
    close(errp[0]);
    return 0;
}

/* The lock is gone while CMD runs: SIGTERM now, SIGKILL after the grace period. */
static void on_lost(struct run *r, const char *reason)
{
    if (r->lost)
        return;
    r->lost = 1;
    cli_msg(r->c, "lost", "lost the lock %s (%s): sending SIGTERM to %s (pid %ld)", r->label, reason, r->cmd[0],
            (long)r->child);
    kill(r->child, SIGTERM);
    r->kill_at = now_ms() + r->c->grace_ms;
}

/* Runs until CMD ends. Returns the wait status of CMD. */
static int supervise(struct run *r)
{
    struct signalfd_siginfo si;
    struct note n;
    int status;

    for (;;) {
        long long left = r->kill_at ? r->kill_at - now_ms() : -1;

        if (r->kill_at && left <= 0) {
            cli_msg(r->c, "kill", "%s (pid %ld) still runs after the grace period: sending SIGKILL", r->cmd[0],
                    (long)r->child);
            kill(r->child, SIGKILL);
            r->kill_at = 0;
            continue;
        }
        switch (next_input(r, left, &si, &n)) {
        case 'S':
            if (si.ssi_signo == SIGCHLD) {
                if (waitpid(r->child, &status, WNOHANG) == r->child)
                    return status;
            } else if (si.ssi_code != SI_KERNEL) {
                /* Sent to dlock alone (kill, not the terminal, which signals CMD's group itself). */
                kill(r->child, (int)si.ssi_signo);
            }
            break;
        case 'N':
            if (n.kind == 'L')
                on_lost(r, n.reason);
            else if (n.kind == 'J' && !r->lost)
                cli_msg(r->c, "jeopardy", "%s in jeopardy (%s): it may be lost", r->label, n.reason);
            else if (n.kind == 'S' && !r->lost) /* once lost, a new session's safety is not the lock's */
                cli_msg(r->c, "safe", "%s is safe again", r->label);
            break;
        }
    }
}

/* CMD ended: gives the lock back. 0 when that shows it was held to the end, else -1 (said why). */
static int release(struct run *r)
{
    const struct cli *c = r->c;
    int rc;

    if (c->limit > 0)
        rc = dlock_release_ex(r->h, r->names[0], 1, RUN_OWNER);
    else
        rc = dlock_unlock_ex(r->h, r->names, r->n, c->shared ? DLOCK_SHARED : 0, RUN_OWNER, NULL);
    if (rc >= 0)
        return 0;
    if (rc == DLOCK_ERR_LOST || rc == DLOCK_ERR_NOTHELD)
        cli_msg(c, "lost", "lost the lock %s while %s ran (%s)", r->label, r->cmd[0], dlock_strerror(rc));
    else
        cli_msg(c, "lost", "cannot confirm that the lock %s was held until %s ended: %s", r->label, r->cmd[0],
                dlock_strerror(rc));
    return -1;
}

/* Takes the lock, runs CMD, gives the lock back: dlock's exit status. r->h is closed. */
static int run_locked(struct run *r)
{
    int rc, status;

    if (pthread_create(&r->locker, NULL, locker_main, r) != 0) {
        dlock_close(r->h);
        return CLI_EXIT_RUNFAIL;
    }
    if ((rc = wait_grant(r)) >= 0 || (rc = start_cmd(r)) != 0) {
        dlock_close(r->h);
        return rc;
    }
    status = supervise(r);
    if (r->lost) {
        dlock_close(r->h);
        cli_msg(r->c, "terminated", "%s ended after the lock %s was lost", r->cmd[0], r->label);
        return CLI_EXIT_LOST;
    }
    /* The lock may have been lost unnoticed (dlock was stopped, say): the release tells. */
    rc = release(r);
    dlock_close(r->h);
    if (rc < 0)
        return CLI_EXIT_LOST;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int cli_run(const struct cli *c, const char *const *names, int n, char **cmd)
{
    struct run r = {.c = c, .names = names, .n = n, .cmd = cmd, .sfd = -1};
    char client[256], host[128] = "localhost";
    struct cli named = *c;
    int rc;

    if (setup_signals(&r) < 0 || pipe2(r.notes, O_CLOEXEC) < 0) {
        cli_msg(c, "error", "cannot set up signals: %s", strerror(errno));
        return CLI_EXIT_RUNFAIL;
    }
    if (named.name == NULL) {
        gethostname(host, sizeof(host) - 1);
        snprintf(client, sizeof(client), "dlock-run@%s:%ld", host, (long)getpid());
        named.name = client;
    }
    if ((r.label = joined(&r, 0)) == NULL)
        return CLI_EXIT_RUNFAIL;
    if ((r.h = cli_connect(&named, on_event, &r, &rc)) == NULL)
        rc = cli_temporary(rc) ? CLI_EXIT_TEMPFAIL : CLI_EXIT_RUNFAIL;
    else
        rc = run_locked(&r);
    free(r.label);
    return rc;
}
