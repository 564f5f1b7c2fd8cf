/* cmd.c - the command table: checks that apply to every verb, then one short
 * handler per verb. Lock verbs live in lock.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "conn.h"
#include "dict.h"
#include "latch.h"
#include "lock.h"
#include "log.h"
#include "reqid.h"
#include "session.h"

#define CMD_PREAUTH (1u << 0) /* allowed before AUTH */

struct cmd {
    enum proto_verb verb;
    unsigned flags;
    void (*handler)(struct req *r);
};

/* Compares in time that depends only on the length of the attempt. */
static int password_ok(const char *want, const char *got)
{
    size_t wl = strlen(want), gl = strlen(got);
    unsigned char diff = wl != gl;

    for (size_t i = 0; i < gl; i++)
        diff |= (unsigned char)(got[i] ^ want[i % (wl ? wl : 1)]);
    return diff == 0;
}

/* A wrong password is answered after auth-fail-delay, to slow down guessing. */
struct refusal {
    struct deadline dl;
    struct req *r;
};

static void refusal_fire(struct deadline *dl)
{
    struct refusal *x = container_of(dl, struct refusal, dl);
    struct req *r = x->r;

    free(x);
    r->gone = NULL;
    req_err(r, PROTO_ENOAUTH, "invalid password");
}

static void refusal_gone(struct req *r)
{
    struct refusal *x = r->ctx;

    deadline_cancel(r->d->deadlines, &x->dl);
    free(x);
    req_drop(r);
}

static void refuse_password(struct req *r)
{
    struct refusal *x;

    log_warnx("c%llu: wrong password from %s", (unsigned long long)r->c->id, r->c->peer);
    if (r->d->cfg.auth_fail_delay == 0) {
        req_err(r, PROTO_ENOAUTH, "invalid password");
        return;
    }
    if ((x = calloc(1, sizeof(*x))) == NULL)
        fatalx("cmd: out of memory");
    x->r = r;
    deadline_init(&x->dl, refusal_fire);
    deadline_arm(r->d->deadlines, &x->dl, now_ms() + (uint64_t)r->d->cfg.auth_fail_delay);
    r->gone = refusal_gone;
    r->ctx = x;
}

static void cmd_hello(struct req *r)
{
    struct conn *c = r->c;
    struct session *s = c->session, *old;
    int resumed = 0;

    if (r->pr.has & PROTO_O_AUTH) {
        if (r->d->cfg.requirepass == NULL) {
            req_err(r, PROTO_ENOAUTH, "no password is configured");
            return;
        }
        if (!password_ok(r->d->cfg.requirepass, r->pr.auth)) {
            refuse_password(r);
            return;
        }
        conn_authed(c);
    }
    if (r->pr.has & PROTO_O_SESSION) {
        if ((old = session_find(r->d, r->pr.session)) == NULL) {
            req_err(r, PROTO_ENOSESSION, "no live session '%s'", r->pr.session);
            return;
        }
        if (old != s) {
            if (s && TAILQ_EMPTY(&s->holds) && TAILQ_EMPTY(&s->waits))
                session_end(s, SESSION_QUIT);
            s = old;
            session_attach(s, c);
        }
        resumed = 1;
    }
    session_touch(s);
    s->hello = 1;
    if (r->pr.has & PROTO_O_TTL)
        session_set_ttl(s, r->pr.ttl_ms);
    if (r->pr.has & PROTO_O_NAME)
        session_set_name(s, r->pr.client_name);
    memcpy(r->sid, s->id, sizeof(r->sid));
    log_info("s%s: session '%s' %s from %s, ttl %lldms", s->id, s->name, resumed ? "resumed" : "opened", c->peer,
             (long long)s->ttl);
    req_reply(r, "OK", "session=%s ttl=%lld proto=%d server=dlockd/%s resumed=%d", s->id, (long long)s->ttl,
              PROTO_VERSION, PACKAGE_VERSION, resumed);
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
    if (r->d->cfg.requirepass == NULL) {
        req_err(r, PROTO_ENOAUTH, "no password is configured");
        return;
    }
    if (!password_ok(r->d->cfg.requirepass, r->pr.names[0])) {
        refuse_password(r);
        return;
    }
    conn_authed(r->c);
    req_reply(r, "OK", NULL);
}

static void cmd_info(struct req *r)
{
    char *json = stats_info_json(r->d);

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
    [VERB_STATUS] = { VERB_STATUS, 0, lock_status },
    [VERB_INFO] = { VERB_INFO, 0, cmd_info },
};

void cmd_dispatch(struct req *r)
{
    struct conn *c = r->c;
    char err[512];
    enum proto_err e = proto_parse_len(r->line, r->len, &r->pr, err, sizeof(err));
    const struct cmd *cmd;

    if (e != PROTO_OK) {
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
    if (!c->authed && !(cmd->flags & CMD_PREAUTH)) {
        req_err(r, PROTO_ENOAUTH, "authentication required");
        return;
    }
    if (c->session == NULL)
        session_attach(session_new(r->d, c->peer, r->d->cfg.session_ttl), c);
    memcpy(r->sid, c->session->id, sizeof(r->sid));
    if ((r->pr.has & PROTO_O_ID) && reqid_begin(r, c->session))
        return;
    cmd->handler(r);
}

void cmd_run(struct req *r)
{
    if (req_session(r) == NULL) {
        req_err(r, PROTO_ENOSESSION, "session ended");
        return;
    }
    cmds[r->pr.verb].handler(r);
}
