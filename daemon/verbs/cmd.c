/* cmd.c - the command table: checks that apply to every verb, then one short
 * handler per verb. Lock verbs live in lock.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "conn.h"
#include "dict.h"
#include "info.h"
#include "latch.h"
#include "lock.h"
#include "log.h"
#include "oper.h"
#include "redis.h"
#include "record.h"
#include "reqid.h"
#include "resume.h"
#include "session.h"
#include "share.h"

#define CMD_PREAUTH (1u << 0) /* allowed before AUTH */
#define CMD_ADMIN (1u << 1)   /* only after AUTH <adminpass> */
#define CMD_READ (1u << 2)    /* reads Redis, changes nothing: takes turns (share.c) */

struct cmd {
    enum proto_verb verb;
    unsigned flags;
    void (*handler)(struct req *r);
};

#define AUTH_TRIES 3 /* wrong passwords before the connection is closed, as sshd's MaxAuthTries */

static const char NOSESSION_TEXT[] = "no live session with that id and secret";

/*
 * A wrong password, or a session that cannot be resumed, is answered after
 * auth-fail-delay: that slows down guessing, and a wrong secret cannot be
 * told from an unknown session by the time its answer takes.
 */
struct refusal {
    struct deadline dl;
    struct req *r;
    enum proto_err e;  /* PROTO_ENOAUTH or PROTO_ENOSESSION */
};

/* Answers the refusal; a connection out of password tries is closed after it. */
static void refuse(struct req *r, enum proto_err e)
{
    struct conn *c = r->c;
    int last = e == PROTO_ENOAUTH && c->auth_failures >= AUTH_TRIES;

    if (e == PROTO_ENOSESSION)
        req_err(r, e, "%s", NOSESSION_TEXT);
    else if (last)
        req_err(r, e, "invalid password; closing after %d wrong passwords", AUTH_TRIES);
    else
        req_err(r, e, "invalid password");
    if (last)
        conn_close_soon(c, "too many wrong passwords");
}

static void refusal_fire(struct deadline *dl)
{
    struct refusal *x = container_of(dl, struct refusal, dl);
    struct req *r = x->r;
    enum proto_err e = x->e;

    free(x);
    r->gone = NULL;
    if (e == PROTO_ENOAUTH)
        r->c->authing = 0;
    refuse(r, e);
}

static void refusal_gone(struct req *r)
{
    struct refusal *x = r->ctx;

    deadline_cancel(r->d->deadlines, &x->dl);
    if (x->e == PROTO_ENOAUTH)
        r->c->authing = 0;
    free(x);
    req_drop(r);
}

static void refuse_later(struct req *r, enum proto_err e)
{
    struct refusal *x;

    if (r->d->cfg.auth_fail_delay == 0) {
        refuse(r, e);
        return;
    }
    x = must(calloc(1, sizeof(*x)));
    x->r = r;
    x->e = e;
    deadline_init(&x->dl, refusal_fire);
    deadline_arm(r->d->deadlines, &x->dl, now_ms() + (uint64_t)r->d->cfg.auth_fail_delay);
    r->gone = refusal_gone;
    r->ctx = x;
    if (e == PROTO_ENOAUTH)
        r->c->authing = 1;
}

/*
 * Checks the password of AUTH or HELLO auth=: requirepass, or adminpass,
 * which also lets c run the operator verbs. Returns 1 when it matches (c
 * is then authenticated), else 0 with r answered now or later. One check
 * at a time per connection, and AUTH_TRIES wrong ones at most.
 */
static int authenticate(struct req *r, const char *password)
{
    struct conn *c = r->c;
    const struct config *cfg = &r->d->cfg;
    int user, admin;

    if (cfg->requirepass == NULL && cfg->adminpass == NULL) {
        req_err(r, PROTO_ENOAUTH, "no password is configured");
        return 0;
    }
    if (c->authing) {
        req_err(r, PROTO_ENOAUTH, "another AUTH is in progress");
        return 0;
    }
    user = cfg->requirepass && config_secret_eq(cfg->requirepass, password);
    admin = cfg->adminpass && config_secret_eq(cfg->adminpass, password);
    if (user || admin) {
        c->admin = admin;
        conn_authed(c);
        if (admin)
            log_info("c%llu: operator authenticated from %s", (unsigned long long)c->id, c->peer);
        return 1;
    }
    c->auth_failures++;
    log_warnx("c%llu: wrong password from %s (%d of %d)", (unsigned long long)c->id, c->peer, c->auth_failures,
              AUTH_TRIES);
    refuse_later(r, PROTO_ENOAUTH);
    return 0;
}

/* A HELLO whose answer waits for its session's record to be written. */
struct hello_wait {
    struct req *r;                              /* NULL once the request is gone */
    char sid[DLOCKD_ID_LEN + 1];
    char secret[SESSION_SECRET_LEN + 1];
    int resumed;
};

static void hello_attach(struct req *r, struct session *s);

/* Sends the OK of a HELLO, then what the session must hear at once. A resumed
 * session comes to r's connection only now: what it is told comes after the OK. */
static void hello_answer(struct req *r, struct session *s, const char *secret, int resumed)
{
    struct conn *c = r->c;

    if (resumed)
        hello_attach(r, s);
    req_reply(r, "OK", "session=%s secret=%s ttl=%lld proto=%d server=dlockd/%s resumed=%d lease=%lld", s->id,
              secret, (long long)s->ttl, PROTO_VERSION, PACKAGE_VERSION, resumed, (long long)c->d->cfg.lock_lease);
    /* A session that (re)attaches while holds cannot be renewed must not take its heartbeats for safety. */
    if (redis_jeopardy(c->d->redis))
        conn_event(c, "JEOPARDY");
    if (resumed) {
        conn_resumed(c);
        record_told(s);
    }
}

static void on_record_written(struct dlockd *d, int result, const struct contract_record *back, void *arg)
{
    struct hello_wait *hw = arg;
    struct req *r = hw->r;
    struct session *s = session_find(d, hw->sid);

    (void)back;
    if (r) {
        r->gone = NULL;
        if (s && result != RECORD_REFUSED)
            hello_answer(r, s, hw->secret, hw->resumed);
        else if (s && !hw->resumed)
            req_drop(r); /* its connection hears BYE reason=moved (record_put) */
        else
            req_err(r, PROTO_ENOSESSION, "%s", s ? "the session is another daemon's now" : "session ended");
    }
    explicit_bzero(hw->secret, sizeof(hw->secret));
    free(hw);
}

/*
 * Answers a HELLO once s's record in Redis says this daemon has it (the
 * client may resume it on another daemon as soon as it reads the OK), or
 * at once when it cannot be written now (the renewal writes it later) or
 * was written already (written: a takeover, resume.c).
 */
static void hello_reply(struct req *r, struct session *s, const char *secret, int resumed, int written)
{
    struct conn *c = r->c;
    struct hello_wait *hw;

    session_touch(s);
    s->hello = 1;
    if (r->pr.has & PROTO_O_TTL)
        session_set_ttl(s, r->pr.ttl_ms);
    if (r->pr.has & PROTO_O_NAME)
        session_set_name(s, r->pr.client_name);
    memcpy(r->sid, s->id, sizeof(r->sid));
    log_info("s%s: session '%s' %s from %s, ttl %lldms", s->id, s->name, resumed ? "resumed" : "opened", c->peer,
             (long long)s->ttl);
    hw = must(calloc(1, sizeof(*hw)));
    *hw = (struct hello_wait){ .r = r, .resumed = resumed };
    memcpy(hw->sid, s->id, sizeof(hw->sid));
    snprintf(hw->secret, sizeof(hw->secret), "%s", secret);
    /* Its record says which daemon has it now: one that had it before lets go. */
    if (!written && record_put(s, NULL, on_record_written, hw) == 0) {
        req_await(r, &hw->r);
        return;
    }
    free(hw);
    hello_answer(r, s, secret, resumed);
}

/* Attaches s to r's connection; the connection's own session is dropped
 * unless it holds or waits for something. */
static void hello_attach(struct req *r, struct session *s)
{
    struct conn *c = r->c;
    struct session *own = c->session;

    if (own == s)
        return;
    if (own && TAILQ_EMPTY(&own->holds) && TAILQ_EMPTY(&own->waits))
        session_end(own, SESSION_QUIT);
    conn_attach(c, s);
}

/* Taken over from another daemon: its record names this one already. */
static void hello_resumed(struct req *r, struct session *s)
{
    hello_reply(r, s, r->pr.secret, 1, 1);
}

/* A session whose holds could not all be adopted: they went back where they were. */
static void hello_failed(struct req *r)
{
    req_err(r, PROTO_EBACKEND, NO_ANSWER "; the session stays where it was");
}

static void hello_refused(struct req *r)
{
    refuse_later(r, PROTO_ENOSESSION);
}

/* The session is this daemon's: resumed from memory, with its secret checked. */
static void hello_local(struct req *r)
{
    struct session *s = session_check(r->d, r->pr.session, (r->pr.has & PROTO_O_SECRET) ? r->pr.secret : "");

    if (s == NULL) {
        refuse_later(r, PROTO_ENOSESSION);
        return;
    }
    hello_reply(r, s, r->pr.secret, 1, 0);
}

static const struct resume_answers resume_answers = {
    .attach = hello_attach,
    .resumed = hello_resumed,
    .failed = hello_failed,
    .refused = hello_refused,
    .local = hello_local,
};

/* HELLO session= secret=: moves the session here, from this daemon or from
 * its record in Redis, whichever has it (resume.c asks the record). */
static void hello_resume(struct req *r)
{
    req_resuming(r);
    resume_from_record(r, r->pr.session, &resume_answers);
}

static void cmd_hello(struct req *r)
{
    char secret[SESSION_SECRET_LEN + 1];

    if (r->pr.has & PROTO_O_AUTH) {
        if (!authenticate(r, r->pr.auth))
            return;
    } else if (!r->c->authed) {
        /* Nothing before AUTH: no session to name, and no options kept for later. */
        req_err(r, PROTO_ENOAUTH, "authentication required (AUTH, or HELLO auth=)");
        return;
    }
    if (r->pr.has & PROTO_O_SESSION) {
        hello_resume(r);
        return;
    }
    session_new_secret(r->c->session, secret);
    hello_reply(r, r->c->session, secret, 0, 0);
}

static void cmd_ping(struct req *r)
{
    req_reply(r, "OK", NULL);
}

static void cmd_quit(struct req *r)
{
    conn_quit(r->c, r);
}

static void cmd_auth(struct req *r)
{
    if (authenticate(r, r->pr.names[0]))
        req_reply(r, "OK", NULL);
}

static void cmd_info(struct req *r)
{
    char *json = info_json(r->d);

    req_reply(r, "OK", "%s", json);
    free(json);
}

static const struct cmd cmds[VERB_NVERBS] = {
    [VERB_HELLO] = { VERB_HELLO, CMD_PREAUTH, cmd_hello },
    [VERB_PING] = { VERB_PING, CMD_PREAUTH, cmd_ping },
    [VERB_QUIT] = { VERB_QUIT, CMD_PREAUTH, cmd_quit },
    [VERB_AUTH] = { VERB_AUTH, CMD_PREAUTH, cmd_auth },
    [VERB_LOCK] = { VERB_LOCK, 0, lock_lock },
    [VERB_UNLOCK] = { VERB_UNLOCK, 0, lock_unlock },
    [VERB_ACQUIRE] = { VERB_ACQUIRE, 0, lock_acquire },
    [VERB_RELEASE] = { VERB_RELEASE, 0, lock_release },
    [VERB_LATCH] = { VERB_LATCH, 0, latch_create },
    [VERB_COUNTDOWN] = { VERB_COUNTDOWN, 0, latch_countdown },
    [VERB_AWAIT] = { VERB_AWAIT, 0, latch_await },
    [VERB_STATUS] = { VERB_STATUS, CMD_READ, lock_status },
    [VERB_INFO] = { VERB_INFO, 0, cmd_info },
    [VERB_LIST] = { VERB_LIST, CMD_ADMIN | CMD_READ, oper_list },
    [VERB_SESSIONS] = { VERB_SESSIONS, CMD_ADMIN | CMD_READ, oper_sessions },
    [VERB_KILL] = { VERB_KILL, CMD_ADMIN, oper_kill },
    [VERB_FORCE] = { VERB_FORCE, CMD_ADMIN, oper_force },
};

/* Runs r's handler, a read when its turn comes. */
static void handle(struct req *r)
{
    const struct cmd *cmd = &cmds[r->pr.verb];

    if (!(cmd->flags & CMD_READ) || share_admit(r))
        cmd->handler(r);
}

/* Past max-requests: r is one too many, or a line that was not kept. */
static int over_requests(struct req *r)
{
    const struct dlockd *d = r->d;

    if (!r->limited && !conn_requests_full(r->c, 1))
        return 0;
    req_err(r, PROTO_ELIMIT, "this server holds %llu requests, max-requests is %lld; try again later",
            (unsigned long long)(d->nreqs + d->nqueued - 1), (long long)d->cfg.max_requests);
    return 1;
}

void cmd_dispatch(struct req *r)
{
    struct conn *c = r->c;
    char err[512];
    enum proto_err e;
    const struct cmd *cmd;

    if (r->limited) {
        r->pr.verb = VERB_NVERBS;
        over_requests(r);
        return;
    }
    if ((e = proto_parse_len(r->line, r->len, &r->pr, err, sizeof(err))) != PROTO_OK) {
        req_err(r, e, "%s", err);
        return;
    }
    if (r->pr.verb == VERB_NVERBS) {
        req_drop(r);
        return;
    }
    cmd = &cmds[r->pr.verb];
    r->d->stats.requests[cmd->verb]++;
    if (c->nrunning > r->d->cfg.max_inflight) {
        req_err(r, PROTO_ELIMIT, "more than %lld requests at once on this connection (max-inflight)",
                (long long)r->d->cfg.max_inflight);
        return;
    }
    if (over_requests(r))
        return;
    if (!c->authed && r->d->cfg.requirepass == NULL)
        conn_authed(c); /* requirepass was turned off by a reload */
    if (!c->authed && !(cmd->flags & CMD_PREAUTH)) {
        req_err(r, PROTO_ENOAUTH, "authentication required");
        return;
    }
    if ((cmd->flags & CMD_ADMIN) && (!c->admin || r->d->cfg.adminpass == NULL)) {
        req_err(r, PROTO_ENOAUTH, "operator verbs need AUTH with the adminpass");
        return;
    }
    /* Before AUTH there is no session: PING, QUIT, AUTH and HELLO need none. */
    if (c->session != NULL) {
        memcpy(r->sid, c->session->id, sizeof(r->sid));
        if ((r->pr.has & PROTO_O_ID) && reqid_begin(r, c->session))
            return;
    }
    handle(r);
}

void cmd_run(struct req *r)
{
    if (req_session(r) == NULL) {
        req_err(r, PROTO_ENOSESSION, "session ended");
        return;
    }
    handle(r);
}
