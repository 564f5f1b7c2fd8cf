/* resume.c - HELLO session= for a session this daemon does not have: its
 * record is read from Redis, the secret checked against it, and the holds it
 * lists that are still alive are made this daemon's (ADOPT). Only when every
 * one is, and the record still names the daemon it was read from, is the
 * record made this daemon's (the claim) and the session attached to the
 * resuming connection; a takeover that did not complete (no answer, the
 * client gone, a QUIT or a newer takeover there) is handed back to the
 * daemon the record names before anything is answered, so the session's
 * holds always have one daemon. The daemon that had the session lets go
 * when it hears of the claim (record_put). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "conn.h"
#include "dict.h"
#include "hold.h"
#include "log.h"
#include "record.h"
#include "resume.h"
#include "session.h"

#define HANDBACK_RETRY_MS 1000 /* between tries of a hand-back Redis did not answer */

/* Where an ADOPT call stands. */
enum adopt_state {
    ADOPT_SENT,    /* no answer yet */
    ADOPT_OK,      /* the holds it found are this daemon's */
    ADOPT_NONE,    /* answered without changing anything */
    ADOPT_UNKNOWN, /* no answer: it may have run */
    ADOPT_BACK,    /* handed back */
};

/* One ADOPT call: up to PROTO_MAX_NAMES index entries of one slot. */
struct adopt {
    struct resume *rs;
    struct adopt *next;
    enum adopt_state state;
    int n;
    char *names[PROTO_MAX_NAMES];
    char *hids[PROTO_MAX_NAMES];
    unsigned long long tokens[PROTO_MAX_NAMES]; /* of the grant the record says it had, 0 when none */
    char *wids[PROTO_MAX_NAMES];                 /* the waiter it had queued, "-" when none */
    char *got[PROTO_MAX_NAMES];                  /* the token adopted, NULL when the hold is gone */
    long long counts[PROTO_MAX_NAMES];
    long long lefts[PROTO_MAX_NAMES];
};

struct resume {
    struct dlockd *d;
    struct req *r;                   /* NULL once the request is gone */
    char sid[DLOCKD_ID_LEN + 1];
    const struct resume_answers *ans;
    char from[DLOCKD_ID_LEN + 1];    /* the daemon the record names */
    char *client;
    long long ttl;
    char hash[2 * SESSION_HASH_LEN + 1];
    struct adopt *adopts;
    int pending;                     /* calls not answered */
    int claiming;                    /* adopted: its record is being made this daemon's */
    int ended;                       /* the session ended (or went on) elsewhere meanwhile */
    uint64_t give_up;                /* monotonic ms after which a hand-back is not tried again */
    struct deadline retry;           /* the next try of a hand-back */
};

/* Sessions being taken over here: sid -> struct resume. */
static struct dict *taking;

#define TAKING_TEXT "the session is being resumed on another connection here; nothing changed, resume again"

int resume_taking(const char *sid)
{
    return taking && dict_get(taking, sid);
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

static void adopt_free(struct adopt *a)
{
    for (int i = 0; i < a->n; i++) {
        free(a->names[i]);
        free(a->hids[i]);
        free(a->wids[i]);
        free(a->got[i]);
    }
    free(a);
}

static int free_one(const char *key, void *val, void *arg);

static void resume_free(struct resume *rs)
{
    if (taking && dict_get(taking, rs->sid) == rs)
        dict_del(taking, rs->sid);
    if (taking && dict_size(taking) == 0) {
        dict_free(taking);
        taking = NULL;
    }
    free_one(rs->sid, rs, NULL);
}

/* The next index entry of rec after *pos that is session sid's own: 0, or -1 when none is left. */
static int next_own(const struct contract_record *rec, size_t *pos, const char *sid, char *hid, char *name,
                    unsigned long long *token, char *wid, size_t widlen)
{
    int rc;

    while ((rc = contract_record_next(rec, pos, hid, HID_MAX + 1, name, PROTO_NAME_MAX + 1, token, wid, widlen)) >= 0)
        if (rc == 0 && strncmp(hid + 1, sid, DLOCKD_ID_LEN) == 0 && hid[1 + DLOCKD_ID_LEN] == ':')
            return 0;
    return -1;
}

/* A hold of s gone while it was away: told after the HELLO's OK, once (an "L" message of it is not). */
static void tell_lost(struct session *s, const char *name, unsigned long long token)
{
    conn_session_missed(s, "LOST %s token=%llu reason=backend", name, token);
    session_remember_lost(s, name, token);
}

/*
 * The holds that the old daemon wrote back into the record after it was
 * read here (their release was not answered: the client may believe it
 * holds them): each is told LOST, like one gone while the session was away.
 * The entries read here are in back too (those whose hold was gone): told
 * already.
 */
static void written_back(struct resume *rs, struct session *s, const struct contract_record *back)
{
    struct dict *read;
    char key[HID_MAX + PROTO_NAME_MAX + 2], hid[HID_MAX + 1], name[PROTO_NAME_MAX + 1], wid[64];
    unsigned long long token;

    if (back == NULL || back->nindex == 0)
        return;
    read = dict_new();
    for (const struct adopt *a = rs->adopts; a; a = a->next)
        for (int i = 0; i < a->n; i++) {
            snprintf(key, sizeof(key), "%s %s", a->hids[i], a->names[i]);
            dict_set(read, key, rs);
        }
    for (size_t pos = 0; next_own(back, &pos, s->id, hid, name, &token, wid, sizeof(wid)) == 0;) {
        snprintf(key, sizeof(key), "%s %s", hid, name);
        if (token == 0 || dict_get(read, key) || hold_find(s->d, name, hid))
            continue;
        tell_lost(s, name, token);
        record_index(s, hid, name, 0);
    }
    dict_free(read);
}

/* The session's record names this daemon: it lives here now, attached to the
 * resuming connection when that still waits (else it waits for a resume, as
 * after any close). */
static void commit(struct resume *rs, struct session *s, const struct contract_record *back)
{
    struct req *r = take(rs);

    s->claiming = 0;
    for (struct adopt *a = rs->adopts; a; a = a->next)
        for (int i = 0; i < a->n; i++) {
            if (a->got[i])
                continue;
            if (a->tokens[i])
                tell_lost(s, a->names[i], a->tokens[i]);
            record_index(s, a->hids[i], a->names[i], 0);
        }
    written_back(rs, s, back);
    if (r && r->c && r->c->state != CONN_CLOSING) {
        rs->ans->attach(r, s);
        rs->ans->resumed(r, s);
    } else if (r) {
        req_drop(r);
    }
    resume_free(rs);
}

/* The hand-back is over (or given up): the request, if it still waits, hears that nothing changed. */
static void handed_back(struct resume *rs)
{
    struct req *r = take(rs);

    if (r && rs->ended)
        rs->ans->refused(r);
    else if (r)
        rs->ans->failed(r);
    resume_free(rs);
}

static void hand_back(struct resume *rs);

static void on_handed_back(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct adopt *a = arg;
    struct resume *rs = a->rs;

    (void)d;
    a->state = rep && rep->status == CONTRACT_OK ? ADOPT_BACK : ADOPT_UNKNOWN;
    if (--rs->pending > 0)
        return;
    for (a = rs->adopts; a; a = a->next)
        if (a->state == ADOPT_UNKNOWN)
            break;
    if (a == NULL) {
        handed_back(rs);
    } else if (now_ms() >= rs->give_up) {
        log_warnx("s%s: could not hand the session back to daemon %s; its holds lapse by themselves", rs->sid,
                  rs->from);
        handed_back(rs);
    } else {
        deadline_arm(rs->d->deadlines, &rs->retry, now_ms() + HANDBACK_RETRY_MS);
    }
}

static void claim(struct resume *rs);

static void on_retry(struct deadline *dl)
{
    struct resume *rs = container_of(dl, struct resume, retry);

    if (rs->claiming)
        claim(rs);
    else
        hand_back(rs);
}

/* The n strings of v, space-separated, in a new string. */
static char *joined(char *const *v, int n)
{
    size_t len = 1;
    char *out, *p;

    for (int i = 0; i < n; i++)
        len += strlen(v[i]) + 1;
    p = must(out = calloc(1, len));
    for (int i = 0; i < n; i++)
        p += sprintf(p, "%s%s", i ? " " : "", v[i]);
    return out;
}

/* Sends a's ADOPT (to "" for this daemon, else the daemon to hand its holds back to). */
static int adopt_send(struct resume *rs, struct adopt *a, const char *to, contract_cb *cb)
{
    struct contract_args args;
    char *hids = joined(a->hids, a->n), *wids = joined(a->wids, a->n);
    int rc;

    contract_adopt_args(&args, rs->ttl > rs->d->cfg.lock_lease ? rs->ttl : rs->d->cfg.lock_lease, hids, wids, to,
                        rs->from);
    rs->pending++;
    if ((rc = hold_script(rs->d, OP_ADOPT, a->n, (const char *const *)a->names, &args, cb, NULL, a)) != 0)
        rs->pending--;
    free(hids);
    free(wids);
    return rc;
}

/*
 * Gives the holds that calls of rs may have made this daemon's back to the
 * daemon the record names, trying again while Redis does not answer, for
 * as long as a hold it adopted can live.
 */
static void hand_back(struct resume *rs)
{
    int unsent = 0;

    for (struct adopt *a = rs->adopts; a; a = a->next)
        if ((a->state == ADOPT_OK || a->state == ADOPT_UNKNOWN) && adopt_send(rs, a, rs->from, on_handed_back)) {
            a->state = ADOPT_UNKNOWN;
            unsent = 1;
        }
    if (rs->pending > 0)
        return;
    if (!unsent || now_ms() >= rs->give_up)
        handed_back(rs); /* nothing was taken, or it lapses by itself */
    else
        deadline_arm(rs->d->deadlines, &rs->retry, now_ms() + HANDBACK_RETRY_MS);
}

/* The takeover did not complete: the copy made here goes (Redis untold), and its holds back. */
static void undo(struct resume *rs, int ended)
{
    struct session *s = session_find(rs->d, rs->sid);

    rs->claiming = 0;
    rs->ended = ended;
    if (s)
        session_drop(s);
    hand_back(rs);
}

static void on_claimed(struct dlockd *d, int result, const struct contract_record *back, void *arg)
{
    struct resume *rs = arg;
    struct session *s = session_find(d, rs->sid);

    if (s == NULL) {
        log_warnx("s%s: gone from here while it was claimed: handed back to daemon %s", rs->sid, rs->from);
        rs->claiming = 0;
        hand_back(rs);
    } else if (result == RECORD_WRITTEN) {
        commit(rs, s, back);
    } else if (result == RECORD_REFUSED) {
        log_info("s%s: it ended, or went to another daemon, while it was resumed: handed back to daemon %s",
                 rs->sid, rs->from);
        undo(rs, 1);
    } else if (now_ms() < rs->give_up) {
        deadline_arm(rs->d->deadlines, &rs->retry, now_ms() + HANDBACK_RETRY_MS);
    } else {
        log_warnx("s%s: Redis did not take its record: handed back to daemon %s", rs->sid, rs->from);
        undo(rs, 0);
    }
}

/*
 * Makes the session's record this daemon's, if it still names the daemon
 * the takeover read it from (the commit point of a resume): a QUIT or a
 * newer takeover there wins, and this one is undone. Tried again while
 * Redis does not answer (a claim that ran is found this daemon's).
 */
static void claim(struct resume *rs)
{
    struct session *s = session_find(rs->d, rs->sid);

    if (s == NULL || record_put(s, rs->from, on_claimed, rs) != 0)
        on_claimed(rs->d, RECORD_UNKNOWN, NULL, rs);
}

/* Every ADOPT call answered or gave up: the session comes here whole, or goes back whole. */
static void finish(struct resume *rs)
{
    struct session *s = NULL;
    struct adopt *a;

    for (a = rs->adopts; a; a = a->next)
        if (a->state != ADOPT_OK)
            break;
    rs->give_up = now_ms() + (uint64_t)(rs->ttl > rs->d->cfg.lock_lease ? rs->ttl : rs->d->cfg.lock_lease);
    if (a == NULL && rs->r && rs->r->c && rs->r->c->state != CONN_CLOSING &&
        (s = session_resume(rs->d, rs->sid, rs->client, rs->ttl, rs->hash)) != NULL) {
        for (a = rs->adopts; a; a = a->next)
            for (int i = 0; i < a->n; i++)
                if (a->got[i])
                    hold_set(s, a->names[i], a->hids[i], a->got[i], a->counts[i], a->lefts[i] > 0 ? a->lefts[i] : 0);
        s->killed = rs->ans->kill; /* its old daemon ends its copy too (record field x) */
        s->claiming = 1;
        rs->claiming = 1;
        claim(rs);
        return;
    }
    if (a == NULL)
        log_info("s%s: its client left while it was resumed: handed back to daemon %s", rs->sid, rs->from);
    hand_back(rs);
}

static void on_adopted(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct adopt *a = arg;
    struct resume *rs = a->rs;

    (void)d;
    if (rep == NULL) {
        a->state = ADOPT_UNKNOWN;
    } else if (rep->status != CONTRACT_OK) {
        a->state = ADOPT_NONE;
    } else {
        a->state = ADOPT_OK;
        for (int i = 0; i < a->n; i++) {
            struct contract_adopted h = contract_adopted(rep, i);
            a->counts[i] = h.count;
            a->lefts[i] = h.left;
            if (h.token[0])
                a->got[i] = must(strdup(h.token));
        }
    }
    if (--rs->pending == 0)
        finish(rs);
}

/* A new ADOPT call for rs, first in its list. */
static struct adopt *adopt_new(struct resume *rs)
{
    struct adopt *a = must(calloc(1, sizeof(*a)));

    a->rs = rs;
    a->next = rs->adopts;
    rs->adopts = a;
    return a;
}

/* Sends the ADOPT calls for the index entries of rec that are the session's own:
 * with Redis Cluster, a call takes the names of one slot. */
static void adopt_all(struct resume *rs, const struct contract_record *rec)
{
    struct adopt *a = NULL;
    char hid[HID_MAX + 1], name[PROTO_NAME_MAX + 1], wid[64];
    unsigned long long token;

    for (size_t pos = 0; next_own(rec, &pos, rs->sid, hid, name, &token, wid, sizeof(wid)) == 0;) {
        if (a == NULL || a->n == PROTO_MAX_NAMES || batch_slot(rs->d, name) != batch_slot(rs->d, a->names[0]))
            a = adopt_new(rs);
        a->names[a->n] = must(strdup(name));
        a->hids[a->n] = must(strdup(hid));
        a->wids[a->n] = must(strdup(wid[0] && !strchr(wid, ' ') ? wid : "-"));
        a->tokens[a->n++] = token;
    }
    rs->pending = 1; /* until every call is sent */
    for (a = rs->adopts; a; a = a->next)
        if (adopt_send(rs, a, "", on_adopted))
            a->state = ADOPT_NONE; /* not sent: changed nothing */
    if (--rs->pending == 0)
        finish(rs);
}

/* Why a resume from rec cannot start now (in buf), or NULL when it can. */
static const char *cannot_start(struct resume *rs, char *buf, size_t len)
{
    char until[64];

    if (!batch_gated(rs->d))
        return NULL;
    snprintf(buf, len, "gated until %s: no takeover behind the failover gate; nothing changed, resume again then",
             batch_gated_until(rs->d, until, sizeof(until)));
    return buf;
}

static void on_record(struct dlockd *d, const struct contract_record *rec, int answered, void *arg)
{
    struct resume *rs = arg;
    struct req *r = rs->r;
    struct session *s;
    const char *why;
    char buf[160];

    if (r == NULL) {
        resume_free(rs);
        return;
    }
    if (resume_taking(rs->sid)) {
        req_err(take(rs), PROTO_EBACKEND, "%s", TAKING_TEXT);
        resume_free(rs);
        return;
    }
    if ((s = session_find(d, rs->sid)) != NULL) {
        if (!answered || rec == NULL || strcmp(rec->daemon, d->id) == 0) {
            rs->ans->local(take(rs));
            resume_free(rs);
            return;
        }
        /* It moved to another daemon since: this copy goes, and the record decides. */
        conn_moved_away(s);
        session_drop(s);
    }
    if (!answered) {
        req_err(take(rs), PROTO_EBACKEND, NO_ANSWER);
        resume_free(rs);
        return;
    }
    /* A record naming this daemon for a session it does not have is one that ended here and
     * came back (a Redis restored from an older snapshot): it resumes nothing. */
    if (rec && (strcmp(rec->daemon, d->id) == 0 || rec->hash[0] == '\0' || rec->ttl <= 0))
        rec = NULL; /* or one that ended, of which only its daemon is left */
    if (rec == NULL || strlen(rec->hash) != 2 * SESSION_HASH_LEN ||
        (!rs->ans->kill && !session_secret_matches((r->pr.has & PROTO_O_SECRET) ? r->pr.secret : "", rec->hash))) {
        rs->ans->refused(take(rs));
        resume_free(rs);
        return;
    }
    if ((why = cannot_start(rs, buf, sizeof(buf))) != NULL) {
        req_err(take(rs), PROTO_EBACKEND, "%s", why);
        resume_free(rs);
        return;
    }
    snprintf(rs->from, sizeof(rs->from), "%s", rec->daemon);
    snprintf(rs->hash, sizeof(rs->hash), "%s", rec->hash);
    rs->client = must(strdup(rec->client));
    rs->ttl = session_clamp_ttl(d, rec->ttl);
    if (taking == NULL)
        taking = dict_new();
    dict_set(taking, rs->sid, rs);
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
    rs = must(calloc(1, sizeof(*rs)));
    rs->d = r->d;
    rs->r = r;
    rs->ans = ans;
    deadline_init(&rs->retry, on_retry);
    snprintf(rs->sid, sizeof(rs->sid), "%s", sid);
    if (record_fetch(r->d, rs->sid, on_record, rs)) {
        free(rs);
        if (session_find(r->d, sid))
            ans->local(r); /* no link: a session here resumes from memory */
        else
            req_err(r, PROTO_EBACKEND, "%s", "Redis is not reachable");
        return;
    }
    req_await(r, &rs->r);
}

static int free_one(const char *key, void *val, void *arg)
{
    struct resume *rs = val;
    struct adopt *a;

    (void)key;
    (void)arg;
    deadline_cancel(rs->d->deadlines, &rs->retry);
    while ((a = rs->adopts) != NULL) {
        rs->adopts = a->next;
        adopt_free(a);
    }
    free(rs->client);
    free(rs);
    return 0;
}

void resume_free_all(void)
{
    if (taking == NULL)
        return;
    dict_each(taking, free_one, NULL);
    dict_free(taking);
    taking = NULL;
}
