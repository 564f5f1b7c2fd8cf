/* resume.c - HELLO session= for a session this daemon does not have: its
 * record is read from Redis, the secret checked against it, and the holds it
 * lists that are still alive are made this daemon's before the HELLO is
 * answered. The daemon that had it lets go when it hears of the claim. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "conn.h"
#include "hold.h"
#include "log.h"
#include "record.h"
#include "resume.h"
#include "session.h"

struct resume {
    struct dlockd *d;
    struct req *r;                   /* NULL once the request is gone */
    char sid[DLOCKD_ID_LEN + 1];
    const struct resume_answers *ans;
    int pending;                     /* ADOPT calls not answered */
    int failed;                      /* one went unanswered */
};

/* One ADOPT call: up to PROTO_MAX_NAMES index entries. */
struct adopt {
    struct resume *rs;
    int n;
    char *names[PROTO_MAX_NAMES];
    char *hids[PROTO_MAX_NAMES];
    unsigned long long tokens[PROTO_MAX_NAMES]; /* of the grant the record says it had, 0 when none */
    char *wids[PROTO_MAX_NAMES];                 /* the waiter it had queued, "-" when none */
};

static void resume_gone(struct req *r)
{
    struct resume *rs = r->ctx;

    /* After EOF what was sent is still answered: only a closing connection drops it. */
    if (r->c && r->c->eof && r->c->state != CONN_CLOSING)
        return;
    rs->r = NULL;
    req_drop(r);
}

/* Takes the request back from rs: it is answered now. */
static struct req *take(struct resume *rs)
{
    struct req *r = rs->r;

    rs->r = NULL;
    if (r)
        r->gone = NULL;
    return r;
}

static void finish(struct resume *rs)
{
    struct session *s = session_find(rs->d, rs->sid);
    struct req *r = take(rs);

    if (r && s && !rs->failed) {
        rs->ans->resumed(r, s);
    } else if (r && s) {
        rs->ans->failed(r, s); /* some holds may not be this daemon's: the client resumes again */
    } else if (r) {
        req_err(r, PROTO_EBACKEND, "the session ended while it was resumed");
    } else if (s && !rs->failed) {
        record_put(s, NULL, NULL); /* its client left meanwhile: the session is this daemon's now all the same */
    } else if (s) {
        session_drop(s); /* not all adopted: it stays with the daemon the record names */
    }
    free(rs);
}

static void adopt_free(struct adopt *a)
{
    for (int i = 0; i < a->n; i++) {
        free(a->names[i]);
        free(a->hids[i]);
        free(a->wids[i]);
    }
    free(a);
}

static void on_adopted(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct adopt *a = arg;
    struct resume *rs = a->rs;
    struct session *s = session_find(d, rs->sid);

    if (rep == NULL || rep->status != CONTRACT_OK) {
        rs->failed = 1;
    } else if (s) {
        for (int i = 0; i < a->n; i++) {
            struct contract_adopted h = contract_adopted(rep, i);
            if (h.token[0]) {
                hold_set(s, a->names[i], a->hids[i], h.token, h.count, h.left > 0 ? h.left : 0);
                continue;
            }
            /* Gone while the session was away: told after the HELLO's OK. */
            if (a->tokens[i])
                conn_session_missed(s, "LOST %s token=%llu reason=backend", a->names[i], a->tokens[i]);
            record_index(s, a->hids[i], a->names[i], 0);
        }
    }
    adopt_free(a);
    if (--rs->pending == 0)
        finish(rs);
}

/* The n strings of v, space-separated, in a new string. */
static char *joined(char *const *v, int n)
{
    size_t len = 1;
    char *out, *p;

    for (int i = 0; i < n; i++)
        len += strlen(v[i]) + 1;
    if ((p = out = calloc(1, len)) == NULL)
        fatalx("resume: out of memory");
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s%s", i ? " " : "", v[i]);
    return out;
}

static void adopt_send(struct resume *rs, struct adopt *a)
{
    struct contract_args args;
    char *hids = joined(a->hids, a->n), *wids = joined(a->wids, a->n);

    contract_adopt_args(&args, session_redis_lease(rs->d, session_find(rs->d, rs->sid)), hids, wids);
    rs->pending++;
    if (hold_script(rs->d, OP_ADOPT, a->n, (const char *const *)a->names, &args, on_adopted, NULL, a)) {
        rs->pending--;
        rs->failed = 1;
        adopt_free(a);
    }
    free(hids);
    free(wids);
}

/* Sends the ADOPT calls for the index entries of rec that are the session's own:
 * with Redis Cluster, a call takes the names of one slot. */
static void adopt_all(struct resume *rs, const struct contract_record *rec)
{
    struct adopt *a = NULL;

    rs->pending = 1; /* until every call is sent */
    for (int j = 0; j < rec->nindex; j++) {
        char hid[HID_MAX + 1], name[PROTO_NAME_MAX + 1], wid[64];
        unsigned long long token;
        if (contract_record_index(rec, j, hid, sizeof(hid), name, sizeof(name), &token, wid, sizeof(wid)) ||
            strncmp(hid + 1, rs->sid, DLOCKD_ID_LEN) != 0 || hid[1 + DLOCKD_ID_LEN] != ':')
            continue;
        if (a && batch_slot(rs->d, name) != batch_slot(rs->d, a->names[0])) {
            adopt_send(rs, a);
            a = NULL;
        }
        if (a == NULL && (a = calloc(1, sizeof(*a))) == NULL)
            fatalx("resume: out of memory");
        a->rs = rs;
        if ((a->names[a->n] = strdup(name)) == NULL || (a->hids[a->n] = strdup(hid)) == NULL)
            fatalx("resume: out of memory");
        a->tokens[a->n] = token;
        if ((a->wids[a->n] = strdup(wid[0] && !strchr(wid, ' ') ? wid : "-")) == NULL)
            fatalx("resume: out of memory");
        if (++a->n == PROTO_MAX_NAMES) {
            adopt_send(rs, a);
            a = NULL;
        }
    }
    if (a)
        adopt_send(rs, a);
    if (--rs->pending == 0)
        finish(rs);
}

static void on_record(struct dlockd *d, const struct contract_record *rec, int answered, void *arg)
{
    struct resume *rs = arg;
    struct req *r = rs->r;
    struct session *s;

    if (r == NULL) {
        free(rs);
        return;
    }
    if ((s = session_find(d, rs->sid)) != NULL) {
        if (!answered || rec == NULL || strcmp(rec->daemon, d->id) == 0) {
            rs->ans->local(take(rs));
            free(rs);
            return;
        }
        /* It moved to another daemon since: this copy goes, and the record decides. */
        conn_moved_away(s);
        session_drop(s);
    }
    if (!answered) {
        req_err(take(rs), PROTO_EBACKEND, "Redis did not answer in time");
        free(rs);
        return;
    }
    /* A record naming this daemon for a session it does not have is one that ended here and
     * came back (a Redis restored from an older snapshot): it resumes nothing. */
    if (rec && (strcmp(rec->daemon, d->id) == 0 || rec->hash[0] == '\0' || rec->ttl <= 0))
        rec = NULL; /* or one that ended, of which only its daemon is left */
    if (rec == NULL ||
        (!rs->ans->trusted && !session_secret_matches((r->pr.has & PROTO_O_SECRET) ? r->pr.secret : "", rec->hash)) ||
        (s = session_resume(d, rs->sid, rec->client, rec->ttl, rec->hash)) == NULL) {
        rs->ans->refused(take(rs));
        free(rs);
        return;
    }
    rs->ans->attach(r, s);
    adopt_all(rs, rec);
}

/* 1 when id can be a session's: DLOCKD_ID_LEN hex digits. */
static int well_formed(const char *id)
{
    size_t n = strspn(id, "0123456789abcdef");

    return n == DLOCKD_ID_LEN && id[n] == '\0';
}

void resume_from_record(struct req *r, const char *sid, const struct resume_answers *ans)
{
    struct resume *rs;

    if (!well_formed(sid)) {
        ans->refused(r);
        return;
    }
    if ((rs = calloc(1, sizeof(*rs))) == NULL)
        fatalx("resume: out of memory");
    rs->d = r->d;
    rs->r = r;
    rs->ans = ans;
    snprintf(rs->sid, sizeof(rs->sid), "%s", sid);
    if (record_fetch(r->d, rs->sid, on_record, rs)) {
        free(rs);
        if (session_find(r->d, sid))
            ans->local(r); /* no link: a session here resumes from memory */
        else
            req_err(r, PROTO_EBACKEND, "%s", "Redis is not reachable");
        return;
    }
    r->gone = resume_gone;
    r->ctx = rs;
}
