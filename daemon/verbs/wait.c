/* wait.c - LOCK and ACQUIRE requests in flight. Redis grants, refuses or
 * queues each in one script; a queued one is granted by whichever script
 * frees the name (from its result here, or by pub/sub from another daemon),
 * and a grant that finds nobody waiting any more is undone. */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ack.h"
#include "conn.h"
#include "deadlock.h"
#include "dict.h"
#include "dlockd.h"
#include "log.h"
#include "record.h"
#include "redis.h"
#include "session.h"
#include "wait.h"
#include "strbuf.h"

static void wait_cancel(struct wait *w);
static void cancel_unanswered(struct wait *w);
static void wait_abandon(struct wait *w);

static char *wid_copy(const struct wait *w)
{
    return must(strdup(w->wid));
}

static const char *const phase_names[] = { "sending", "queued", "cancelling" };
static const char *const intent_names[] = { "wanted", "recheck", "quitting", "abandoned" };

/* phase_moves[from] has bit `to` set when the move is legal. A wait is sent
 * again from the queues (a lapsed entry, after its cancel answered). */
static const unsigned phase_moves[] = {
    [WAIT_SENDING] = 1u << WAIT_SENDING | 1u << WAIT_QUEUED,
    [WAIT_QUEUED] = 1u << WAIT_SENDING | 1u << WAIT_CANCELLING,
    [WAIT_CANCELLING] = 1u << WAIT_QUEUED,
};

/* intent_moves[from], likewise. Quitting and abandoned are final but for
 * each other: a QUIT after a timeout drops the request instead of TIMEOUT,
 * and an abandon after a QUIT has taken the request already. */
static const unsigned intent_moves[] = {
    [WAIT_WANTED] = 1u << WAIT_RECHECK | 1u << WAIT_QUITTING | 1u << WAIT_ABANDONED,
    [WAIT_RECHECK] = 1u << WAIT_WANTED | 1u << WAIT_QUITTING | 1u << WAIT_ABANDONED,
    [WAIT_QUITTING] = 1u << WAIT_QUITTING | 1u << WAIT_ABANDONED,
    [WAIT_ABANDONED] = 1u << WAIT_QUITTING | 1u << WAIT_ABANDONED,
};

/* Moves w to phase p; a move not in phase_moves is a bug. */
static void wait_phase(struct wait *w, enum wait_phase p)
{
    if (!(phase_moves[w->phase] & 1u << p)) {
        log_warnx("wait %s: bug: phase %s -> %s", w->wid, phase_names[w->phase], phase_names[p]);
        assert(!"illegal wait phase move");
    }
    w->phase = p;
}

/* Moves w to intent i; a move not in intent_moves is a bug. */
static void wait_intend(struct wait *w, enum wait_intent i)
{
    if (!(intent_moves[w->intent] & 1u << i)) {
        log_warnx("wait %s: bug: intent %s -> %s", w->wid, intent_names[w->intent], intent_names[i]);
        assert(!"illegal wait intent move");
    }
    w->intent = i;
}

/* Adds w to s, and counts what it may still be granted and whether it may wait. */
static void wait_attach(struct wait *w, struct session *s)
{
    w->s = s;
    TAILQ_INSERT_TAIL(&s->waits, w, in_session);
    if (w->wait_ms != 0 && w->kind == WAIT_LOCK)
        deadlock_add(w->d, &w->edges); /* one that never queues is in no chain of waits */
    s->nreserved += w->nnames;
    s->nwaits += w->wait_ms != 0;
    w->d->nreserved += (uint64_t)w->nnames;
}

/* Takes w from its session: a wait without one makes no hold. */
static void wait_detach(struct wait *w)
{
    struct session *s = w->s;

    if (s == NULL)
        return;
    TAILQ_REMOVE(&s->waits, w, in_session);
    if (w->wait_ms != 0 && w->kind == WAIT_LOCK)
        deadlock_remove(w->d, &w->edges);
    s->nreserved -= w->nnames;
    s->nwaits -= w->wait_ms != 0;
    w->d->nreserved -= (uint64_t)w->nnames;
    w->s = NULL;
}

static void wait_free(struct wait *w)
{
    struct dlockd *d = w->d;

    dict_del(d->waits, w->wid);
    /* Names it was not granted leave the session's record, unless something else keeps them. */
    for (int i = 0; w->s && w->index != WAIT_INDEX_NONE && i < w->nnames; i++)
        if (!wait_owner_knows(d, w->s, w->hid + 1, w->names[i], w, 0))
            record_index(w->s, w->hid, w->names[i], 0);
    wait_detach(w);
    d->nwaiting -= w->wait_ms != 0;
    if (w->req)
        w->req->gone = w->req->quit = NULL;
    deadline_cancel(d->deadlines, &w->timeout);
    deadline_cancel(d->deadlines, &w->retry);
    if (w->parent)
        w->parent->failed(w->parent_arg, NULL);
    free(w);
}

/* Detaches the request: nobody is to be answered any more, but with a
 * refusal or an error; a LOCK across slots releases its earlier slots. */
static struct req *wait_take_req(struct wait *w)
{
    struct req *r = w->req;

    w->req = NULL;
    if (r)
        r->gone = r->quit = NULL;
    if (w->parent) {
        w->parent->failed(w->parent_arg, r);
        w->parent = NULL;
    }
    return r;
}

/* Splits "a,b,c" into at most max parts, in place. Returns the count. */
static int split(char *s, char **out, int max)
{
    int n = 0;

    for (char *p = strtok(s, ","); p && n < max; p = strtok(NULL, ","))
        out[n++] = p;
    return n;
}

/* Records the grant of w's i-th name to s: a new hold goes into the session's record with its
 * token (unless its parent records it once answered, the hold untold till then), and into the
 * audit trail. */
static void grant_one(struct session *s, const struct wait *w, int i, const char *token, const char *count,
                      int record)
{
    int reentry = hold_has(w->d, w->names[i], w->hid, token); /* the record has it */
    struct hold *h;

    if (!reentry && record) {
        if (w->index != WAIT_INDEX_GRANTED) /* else the LOCK that carried the record indexed it */
            record_granted(s, w->hid, w->names[i], token);
    } else if (!reentry) { /* nor is it waited for: a resume elsewhere must not adopt it by its waiter */
        record_index(s, w->hid, w->names[i], 0);
    }
    hold_set(s, w->names[i], w->hid, token, atoll(count), w->lease);
    h = hold_find(w->d, w->names[i], w->hid);
    if (record)
        h->untold = 0; /* answered: the client knows of it now */
    else if (!reentry)
        h->untold = 1;
    log_info("audit: grant name=%s session=%s client=%s mode=%c token=%s count=%s", w->names[i], s->id, s->name,
             w->hid[0], token, count);
}

/* Answers w's request with its grant g, or undoes the grant if nobody waits.
 * A LOCK across slots goes on to its next slot instead; one whose client
 * QUITs meanwhile is undone. */
static void wait_granted(struct wait *w, const struct contract_grant *g)
{
    struct dlockd *d = w->d;
    int quit_multi = w->parent && w->intent == WAIT_QUITTING;
    const struct wait_parent *m = quit_multi ? NULL : w->parent;
    struct req *r;
    struct session *s;
    char tbuf[CONTRACT_LIST_MAX], cbuf[CONTRACT_LIST_MAX], *tok[PROTO_MAX_NAMES], *cnt[PROTO_MAX_NAMES];
    int nt, nc, undo;

    w->parent = m ? NULL : w->parent;
    r = wait_take_req(w); /* fails the LOCK across slots of a QUIT */
    s = r ? req_session(r) : NULL;
    undo = r == NULL || r->c == NULL || s == NULL || quit_multi;
    str_copy(tbuf, sizeof(tbuf), g->tokens);
    str_copy(cbuf, sizeof(cbuf), g->counts);
    nt = split(tbuf, tok, PROTO_MAX_NAMES);
    nc = split(cbuf, cnt, PROTO_MAX_NAMES);
    if (nt != w->nnames || nc != w->nnames) {
        log_warnx("wait %s: grant for %d names, expected %d", w->wid, nt, w->nnames);
        nt = nc = 0;
    }
    for (int i = 0; i < nt; i++) {
        /* Undone: exactly the k counts it added. The count it reported may
         * have grown since, by reentries answered OK that must stay. */
        if (undo)
            hold_release(d, w->names[i], w->hid, tok[i], 0, w->k, 0);
        else
            grant_one(s, w, i, tok[i], cnt[i], m == NULL);
    }
    if (undo) {
        log_debug("wait %s: granted after its request was gone: undone", w->wid);
        if (m)
            m->failed(w->parent_arg, r);
        if (r)
            req_drop(r);
    } else if (m && nt == w->nnames) {
        m->granted(w->parent_arg, r, tok, cnt);
    } else if (m) {
        m->failed(w->parent_arg, r);
        req_err(r, PROTO_EBACKEND, "unexpected grant from Redis");
    } else {
        uint64_t sent = redis_answering_sent(d->redis);
        struct ack_grant ag = { w->hid, w->k, nt, w->names, tok };
        char body[3 * CONTRACT_LIST_MAX];
        d->stats.grants++;
        histo_add_in(&d->stats.waited, histo_long_bounds_us, (now_ms() - r->arrived) * 1000);
        if (w->phase != WAIT_SENDING && sent)
            histo_add(&d->stats.handoff, now_us() - sent);
        struct strbuf b = sb_on(body, sizeof(body));
        sb_str(&b, w->nnames > 1 && w->kind != WAIT_SEM ? "OK tokens=" : "OK token=");
        sb_str(&b, g->tokens);
        sb_str(&b, w->kind == WAIT_SEM ? " held=" : w->nnames > 1 ? " counts=" : " count=");
        sb_str(&b, g->counts);
        if (w->kind == WAIT_SEM) {
            sb_str(&b, " free=");
            sb_ll(&b, g->free);
        }
        ack_answer(r, &ag, body);
    }
    wait_free(w);
}

/* A grant whose hold took over a queue entry with less than half a lease
 * left may lapse before the next renewal: it is checked (and its lease
 * started again) before it is answered. */
static int grant_is_short(const struct dlockd *d, long long left)
{
    return left >= 0 && left * 2 < d->cfg.lock_lease;
}

void wait_apply_grants(struct dlockd *d, const struct contract_batch *head)
{
    struct contract_grant g;

    for (long long i = 0; i < head->ngrants; i++) {
        struct wait *w;
        contract_batch_grant(head, i, &g);
        if ((w = dict_get(d->waits, g.wid)) == NULL)
            continue;
        /* A grant in a reply that came after its call timed out may have lapsed since. */
        if (redis_answering_late(d->redis) || grant_is_short(d, g.left))
            wait_lapsed(d, g.wid);
        else
            wait_granted(w, &g);
    }
}

static void arm_retry(struct wait *w, long long ms)
{
    if (ms >= 0)
        deadline_arm(w->d->deadlines, &w->retry, now_ms() + (uint64_t)ms + 1);
}

/* --- messages on this daemon's channel. Anyone who can PUBLISH on the Redis
 * can send them: a grant is believed only once Redis confirms it, and no
 * message costs a walk of every wait. */

#define CONFIRMING ((void *)1)
#define CONFIRM_AGAIN ((void *)2) /* another grant was heard meanwhile */

/* Waits whose grant heard on the channel is being confirmed: wid -> CONFIRMING or CONFIRM_AGAIN. */
static struct dict *confirming;

static void confirm(struct wait *w);

/* A grant that Redis does not know was forged: say so, at most once a second. */
static void forged(const char *wid)
{
    static uint64_t said;
    uint64_t now = now_ms();

    if (now - said < 1000) {
        log_debug("wait %s: a forged grant was ignored", wid);
        return;
    }
    said = now;
    log_warnx("wait %s: a grant published on this daemon's channel is not in Redis: ignored (forged?)", wid);
}

static void on_confirmed(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    char *wid = arg;
    int again = dict_del(confirming, wid) == CONFIRM_AGAIN;
    struct wait *w = dict_get(d->waits, wid);
    enum contract_status st = rep ? rep->status : CONTRACT_UNKNOWN;

    if (dict_size(confirming) == 0) {
        dict_free(confirming);
        confirming = NULL;
    }
    if (w == NULL) {
        /* answered meanwhile */
    } else if (st == CONTRACT_GRANTED) {
        wait_granted(w, &rep->grant);
    } else if (st == CONTRACT_QUEUED) {
        forged(wid);
        if (again)
            confirm(w);
    } else {
        wait_lapsed(d, wid); /* its entry lapsed, or Redis did not say: the usual check */
    }
    free(wid);
}

/* Asks Redis whether w was granted, without touching its place in the queues. */
static void confirm(struct wait *w)
{
    struct contract_args args;
    char *wid;

    if (confirming && dict_get(confirming, w->wid)) {
        dict_set(confirming, w->wid, CONFIRM_AGAIN);
        return;
    }
    wid = wid_copy(w);
    contract_cancel_args(&args, w->wid, w->hid, 1);
    if (hold_script(w->d, OP_CANCEL, w->nnames, (const char *const *)w->names, &args, on_confirmed, NULL, wid)) {
        free(wid); /* the link is down: the renewal checks the wait when it is back */
        return;
    }
    if (confirming == NULL)
        confirming = dict_new();
    dict_set(confirming, w->wid, CONFIRMING);
}

#define SWEEP_MS 50 /* at most one walk of the waits per SWEEP_MS for the R messages */

/* Lease ends heard since the last walk of the waits, which arms them all. */
static struct {
    struct dlockd *d;
    struct dict *ends;     /* name -> malloc'ed uint64_t, monotonic ms; NULL when none */
    struct deadline sweep; /* the next walk */
    uint64_t last;         /* monotonic ms of the last walk */
} heard;

/* Moves w's retry to the earliest end heard on its names; never later, so that a forged end delays nothing. */
static int arm_heard(const char *key, void *val, void *arg)
{
    struct wait *w = val;
    uint64_t now = *(const uint64_t *)arg, first = UINT64_MAX;

    (void)key;
    if (w->phase == WAIT_SENDING)
        return 0;
    for (int i = 0; i < w->nnames; i++) {
        const uint64_t *end = dict_get(heard.ends, w->names[i]);
        if (end && *end < first)
            first = *end;
    }
    if (first != UINT64_MAX && (!deadline_armed(&w->retry) || first + 1 < w->retry.when))
        arm_retry(w, first > now ? (long long)(first - now) : 0);
    return 0;
}

static int free_end(const char *key, void *val, void *arg)
{
    (void)key;
    (void)arg;
    free(val);
    return 0;
}

static void on_sweep(struct deadline *dl)
{
    uint64_t now = now_ms();

    (void)dl;
    heard.last = now;
    dict_each(heard.d->waits, arm_heard, &now);
    dict_each(heard.ends, free_end, NULL);
    dict_free(heard.ends);
    heard.ends = NULL;
}

/* An R message: a lease on name ends in ms; the waits on it poke then. */
static void lease_end_heard(struct dlockd *d, const char *name, long long ms)
{
    uint64_t now = now_ms(), when = now + (uint64_t)(ms > 0 ? ms : 0), *end;

    if (dict_size(d->waits) == 0)
        return;
    if (heard.ends == NULL) {
        heard.d = d;
        heard.ends = dict_new();
        deadline_init(&heard.sweep, on_sweep);
        deadline_arm(d->deadlines, &heard.sweep, heard.last + SWEEP_MS > now ? heard.last + SWEEP_MS : now);
    }
    if ((end = dict_get(heard.ends, name)) != NULL) {
        if (when < *end)
            *end = when;
        return;
    }
    end = must(malloc(sizeof(*end)));
    *end = when;
    dict_set(heard.ends, name, end);
}

void wait_on_message(struct dlockd *d, const char *msg)
{
    char wid[64], name[PROTO_NAME_MAX + 1];
    struct wait *w;
    long long ms;

    if (sscanf(msg, "G %63s", wid) == 1) {
        /* A cancel in flight answers GRANTED as well when it was. */
        if ((w = dict_get(d->waits, wid)) != NULL && w->phase != WAIT_CANCELLING)
            confirm(w);
    } else if (sscanf(msg, "R %200s %lld", name, &ms) == 2) {
        lease_end_heard(d, name, ms);
    }
}

int wait_within_limits(struct req *r, const struct session *s)
{
    struct dlockd *d = r->d;

    if (r->pr.wait_ms == 0)
        return 0;
    if (s->nwaits >= d->cfg.max_waits) {
        req_err(r, PROTO_ELIMIT, "session has %d waiting requests, max-waits is %lld", s->nwaits,
                (long long)d->cfg.max_waits);
        return -1;
    }
    if ((int64_t)d->nwaiting >= d->cfg.max_waiters) {
        req_err(r, PROTO_ELIMIT, "this server has %llu waiting requests, max-waiters is %lld",
                (unsigned long long)d->nwaiting, (long long)d->cfg.max_waiters);
        return -1;
    }
    return 0;
}

/* --- the script that grants, refuses or queues */

/* Answers r, the request of w, which Redis refused: rep is neither OK nor WAIT. */
static void answer_refusal(struct req *r, const struct wait *w, const struct contract_reply *rep)
{
    switch (rep->status) {
    case CONTRACT_BUSY:
        r->d->stats.busy++;
        if (w->kind == WAIT_SEM)
            req_reply(r, "BUSY", "free=%lld", rep->busy.free);
        else
            req_reply(r, "BUSY", "holder=%s ttl=%lld", rep->busy.holder, rep->busy.ttl);
        break;
    case CONTRACT_WRONGTYPE:
        req_err(r, PROTO_EWRONGTYPE, "'%s' is in use as another type", rep->name);
        break;
    case CONTRACT_MISMATCH:
        req_err(r, PROTO_EMISMATCH, "'%s' has limit=%lld", w->names[0], rep->limit);
        break;
    case CONTRACT_DEADLOCK:
        req_err(r, PROTO_EDEADLOCK, "another owner already waits to upgrade '%s'", w->names[0]);
        break;
    default:
        req_err(r, PROTO_EBACKEND, "unexpected answer '%s' from Redis", rep->text);
        break;
    }
}

static void finish_submit(struct dlockd *d, const char *wid, const struct contract_reply *rep)
{
    struct wait *w = dict_get(d->waits, wid);
    struct req *r;

    if (w == NULL)
        return; /* granted by the batch's grants, or by pub/sub first */
    if (rep->status == CONTRACT_OK) {
        if (w->index == WAIT_INDEX_REDIS)
            w->index = WAIT_INDEX_GRANTED;
        wait_granted(w, &rep->grant);
        return;
    }
    if (rep->status != CONTRACT_WAIT && w->index == WAIT_INDEX_REDIS)
        w->index = WAIT_INDEX_NONE;
    if (rep->status == CONTRACT_WAIT) {
        wait_phase(w, WAIT_QUEUED);
        if (w->intent == WAIT_QUITTING)
            wait_cancel(w);
        else if (w->req && conn_gone(w->req->c))
            wait_abandon(w); /* its connection closed while it was sent */
        else if (w->intent == WAIT_ABANDONED)
            wait_cancel(w);
        else if (w->intent == WAIT_RECHECK)
            wait_cancel(w); /* a grant heard while it was sent, to be checked: now it can be */
        else
            arm_retry(w, rep->retry_ms);
        return;
    }
    if ((r = wait_take_req(w)) != NULL)
        answer_refusal(r, w, rep);
    wait_free(w);
}

static void on_submit(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    char *wid = arg;
    struct wait *w;

    if (rep == NULL) {
        /* The script may still run: on_submit_late undoes what it did. */
        if ((w = dict_get(d->waits, wid)) != NULL) {
            struct req *r = wait_take_req(w);
            wait_intend(w, WAIT_ABANDONED);
            if (r)
                req_err(r, PROTO_EBACKEND, "%s", dlockd_silence(d));
        }
        return;
    }
    finish_submit(d, wid, rep);
    free(wid);
}

static void on_submit_late(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    char *wid = arg;
    struct wait *w;

    if (rep)
        finish_submit(d, wid, rep);
    else if ((w = dict_get(d->waits, wid)) != NULL && w->phase != WAIT_CANCELLING)
        wait_free(w); /* its queue entries, if any, lapse unrenewed */
    free(wid);
}

/* A new wid for each submission: a grant published for an earlier one then matches nothing. */
static void wait_number(struct wait *w)
{
    struct dlockd *d = w->d;

    if (w->wid[0])
        dict_del(d->waits, w->wid);
    struct strbuf b = sb_on(w->wid, sizeof(w->wid));
    sb_str(&b, d->id);
    sb_chr(&b, '.');
    sb_hex(&b, ++d->next_wait);
    dict_set(d->waits, w->wid, w);
}

int wait_owner_knows(struct dlockd *d, const struct session *s, const char *who, const char *name,
                     const struct wait *skip, int sending_only)
{
    struct lname *ln = hold_name(d, name);
    const struct hold *h;

    if (ln)
        TAILQ_FOREACH(h, &ln->holds, in_name)
            if (h->s == s && strcmp(h->hid + 1, who) == 0 && !(sending_only && h->untold))
                return 1;
    return wait_owner_waits(s, who, name, skip, sending_only);
}

int wait_owner_waits(const struct session *s, const char *who, const char *name, const struct wait *skip,
                     int sending_only)
{
    const struct wait *o;

    TAILQ_FOREACH(o, &s->waits, in_session) {
        if (o == skip || strcmp(o->hid + 1, who) != 0 || (sending_only && o->phase != WAIT_SENDING))
            continue;
        for (int i = 0; i < o->nnames; i++)
            if (strcmp(o->names[i], name) == 0)
                return 1;
    }
    return 0;
}

/*
 * Whether this daemon knows of a hold of w's session and owner on name, or
 * of another of their waits for it. A hold in Redis it knows nothing of
 * came back with a Redis restored from an older snapshot after it was
 * released: the script drops it rather than re-enter it, which would hand
 * out its old token again.
 */
static int owner_known(const struct wait *w, const char *name)
{
    return w->s == NULL || wait_owner_knows(w->d, w->s, w->hid + 1, name, w, 0);
}

void wait_submit(struct wait *w)
{
    struct dlockd *d = w->d;
    char known[PROTO_MAX_NAMES + 1];
    long long held = session_redis_lease(d, w->s);
    struct contract_lock l = {
        .who = w->hid + 1,
        .mode = w->hid[0],
        .client = w->client,
        .wait = w->wait_ms != 0,
        .ttl = w->lease > 0 && w->lease < held ? w->lease : held,
        .lease = w->lease > 0 ? w->lease : d->cfg.lock_lease,
        .bounded = w->lease > 0,
        .qttl = d->cfg.lock_lease,
        .permits = w->k,
        .limit = w->limit,
        .known = known,
        .ends = wait_redis_ends(w),
    };
    struct contract_args args;
    char *wid, key[CONTRACT_KEY_MAX];
    const char *record = w->s && w->kind == WAIT_LOCK ? record_carried(w->s, key, sizeof(key)) : NULL;
    int rc;

    wait_number(w);
    wid = wid_copy(w);
    l.wid = w->wid;
    w->index = record ? WAIT_INDEX_REDIS : WAIT_INDEX_DAEMON;
    for (int i = 0; i < w->nnames; i++) {
        known[i] = owner_known(w, w->names[i]) ? '1' : '0';
        /* In the record before Redis can grant it (record_flush runs before the batch), with
         * its waiter, which a resume elsewhere takes out of the queue; or by the LOCK itself. */
        if (known[i] == '0' && w->s && !record)
            record_waiting(w->s, w->hid, w->names[i], w->wid);
    }
    known[w->nnames] = '\0';
    if (w->kind == WAIT_SEM)
        contract_acquire_args(&args, &l);
    else
        contract_lock_args(&args, &l);
    args.record = record;
    wait_phase(w, WAIT_SENDING);
    w->submitted = now_ms();
    rc = hold_script(d, w->kind == WAIT_SEM ? OP_ACQUIRE : OP_LOCK, w->nnames,
                     (const char *const *)w->names, &args, on_submit, on_submit_late, wid);
    if (rc) {
        struct req *r = wait_take_req(w);
        free(wid);
        if (r)
            req_err(r, PROTO_EBACKEND, "%s", redis_unavailable(d->redis));
        wait_free(w);
    }
}

/* --- timeouts, retries, cancels */

static void on_timeout(struct deadline *dl)
{
    struct wait *w = container_of(dl, struct wait, timeout);

    wait_intend(w, WAIT_ABANDONED);
    wait_cancel(w);
}

static void on_poke(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    char *wid = arg;
    struct wait *w;

    if (rep && (w = dict_get(d->waits, wid)) != NULL)
        arm_retry(w, rep->retry_ms);
    free(wid);
}

/* A lease in w's way that nobody here releases has run out: purge and hand on. */
static void on_retry(struct deadline *dl)
{
    struct wait *w = container_of(dl, struct wait, retry);
    char *wid;

    if (w->cancel_until) {
        wait_cancel(w);
        return;
    }
    wid = wid_copy(w);
    if (hold_script(w->d, OP_POKE, w->nnames, (const char *const *)w->names, NULL, on_poke, NULL, wid))
        free(wid);
}

static void on_cancel(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    char *wid = arg;
    struct wait *w;

    if (rep == NULL) {
        if ((w = dict_get(d->waits, wid)) != NULL) {
            wait_phase(w, WAIT_QUEUED);
            cancel_unanswered(w);
        }
        free(wid);
        return;
    }
    if ((w = dict_get(d->waits, wid)) != NULL) {
        wait_phase(w, WAIT_QUEUED);
        if (rep->status == CONTRACT_GRANTED) {
            wait_granted(w, &rep->grant);
        } else if (w->intent == WAIT_RECHECK) {
            wait_intend(w, WAIT_WANTED);
            wait_submit(w);
        } else {
            struct req *r = wait_take_req(w);
            if (r && w->intent == WAIT_QUITTING) {
                req_drop(r);
            } else if (r) {
                d->stats.timeouts++;
                log_info("audit: timeout name=%s names=%d session=%s client=%s", w->names[0], w->nnames, r->sid,
                         w->client);
                req_reply(r, "TIMEOUT", NULL);
            }
            wait_free(w);
        }
    }
    free(wid);
}

long long wait_redis_ends(const struct wait *w)
{
    if (w->ends == 0 || w->d->redis_offset_at == 0)
        return 0;
    return (long long)w->ends + w->d->redis_offset;
}

#define CANCEL_RETRY_MS 1000 /* between tries of a cancel Redis did not answer */

/*
 * A cancel of w was not answered (or could not be sent): w may still be
 * queued, or be granted, in Redis. It is tried again each second until
 * nothing of w can live there any more: when its wait ends, since its
 * queue entries and a grant they get end with it in Redis time (lock.lua),
 * else once a lease has passed unrenewed; a grant it finds is undone. A
 * request that timed out hears ERR BACKEND only then; one its client still
 * wants waits on; a QUIT goes on at once.
 */
static void cancel_unanswered(struct wait *w)
{
    uint64_t now = now_ms();
    int over;

    if (w->cancel_until == 0)
        w->cancel_until = wait_redis_ends(w) ? w->ends : now + (uint64_t)w->d->cfg.lock_lease;
    over = now >= w->cancel_until;
    if (w->req && w->intent == WAIT_QUITTING)
        req_err(wait_take_req(w), PROTO_EBACKEND, NO_ANSWER);
    else if (w->req && over)
        req_err(wait_take_req(w), PROTO_EBACKEND, NO_ANSWER "; nothing was granted");
    if (over)
        wait_free(w);
    else
        deadline_arm(w->d->deadlines, &w->retry, now + CANCEL_RETRY_MS < w->cancel_until ? now + CANCEL_RETRY_MS
                                                                                          : w->cancel_until);
}

/* Takes w out of its queues; the reply says whether it was granted first. */
static void wait_cancel(struct wait *w)
{
    struct contract_args args;
    char *wid;

    if (w->phase != WAIT_QUEUED)
        return; /* the cancel or the submit in flight decides */
    wait_phase(w, WAIT_CANCELLING);
    deadline_cancel(w->d->deadlines, &w->retry);
    wid = wid_copy(w);
    contract_cancel_args(&args, w->wid, w->hid, 0);
    if (hold_script(w->d, OP_CANCEL, w->nnames, (const char *const *)w->names, &args, on_cancel, NULL, wid)) {
        free(wid);
        wait_phase(w, WAIT_QUEUED);
        cancel_unanswered(w);
    }
}

void wait_lapsed(struct dlockd *d, const char *wid)
{
    struct wait *w = dict_get(d->waits, wid);

    if (w == NULL || w->phase == WAIT_CANCELLING)
        return;
    log_debug("wait %s: checking its grant or queue entry", wid);
    if (w->intent == WAIT_WANTED)
        wait_intend(w, WAIT_RECHECK); /* else it is not to queue again */
    wait_cancel(w);
}

/* Forgets the request of w; the wait is cancelled in Redis. */
static void wait_abandon(struct wait *w)
{
    struct req *r = wait_take_req(w);

    wait_detach(w);
    if (r)
        req_drop(r);
    wait_intend(w, WAIT_ABANDONED);
    wait_cancel(w);
}

static void on_req_gone(struct req *r)
{
    struct wait *w = r->ctx;

    /* After EOF a request still on its way is answered if granted at once;
     * finish_submit abandons it if it has to queue. */
    if (r->c && r->c->eof && r->c->state != CONN_CLOSING && w->phase == WAIT_SENDING)
        return;
    wait_abandon(w);
}

/* QUIT: cancel in Redis, but keep the request (and so the QUIT) until the
 * cancel answers, so that a grant it may have won is released before QUIT's OK. */
static void on_req_quit(struct req *r)
{
    struct wait *w = r->ctx;

    wait_intend(w, WAIT_QUITTING);
    deadline_cancel(w->d->deadlines, &w->timeout);
    wait_cancel(w); /* not queued yet: finish_submit cancels it */
}

void wait_abandon_session(struct session *s)
{
    struct wait *w;

    while ((w = TAILQ_FIRST(&s->waits)) != NULL)
        wait_abandon(w);
}

static int free_one(const char *key, void *val, void *arg)
{
    (void)key;
    (void)arg;
    wait_free(val);
    return 0;
}

void wait_free_all(struct dlockd *d)
{
    dict_each(d->waits, free_one, NULL);
    if (heard.ends) {
        /* hints heard but not swept yet: nothing waits for them any more */
        deadline_cancel(d->deadlines, &heard.sweep);
        dict_each(heard.ends, free_end, NULL);
        dict_free(heard.ends);
        heard.ends = NULL;
    }
}

/* Copies str to *p and moves *p past its '\0'; returns the copy. */
static char *put(char **p, const char *str)
{
    char *copy = *p;
    size_t n = strlen(str) + 1;

    memcpy(copy, str, n);
    *p += n;
    return copy;
}

struct wait *wait_new_names(struct req *r, struct session *s, enum wait_kind kind, char mode, int nnames,
                            const char *const *names)
{
    struct dlockd *d = r->d;
    const struct proto_req *pr = &r->pr;
    char hid[HID_MAX + 1], *p;
    size_t size;
    struct wait *w;

    struct strbuf b = sb_on(hid, sizeof(hid));
    sb_chr(&b, mode);
    sb_str(&b, s->id);
    sb_chr(&b, ':');
    sb_str(&b, pr->owner);
    size = sizeof(*w) + (size_t)nnames * sizeof(char *) + strlen(hid) + 1 + strlen(s->name) + 1;
    for (int i = 0; i < nnames; i++)
        size += strlen(names[i]) + 1;
    w = must(calloc(1, size));
    w->d = d;
    w->kind = kind;
    w->req = r;
    w->lease = pr->lease_ms;
    w->wait_ms = pr->wait_ms;
    w->k = kind == WAIT_SEM ? pr->permits : 1;
    w->limit = pr->limit;
    w->nnames = nnames;
    p = (char *)&w->names[w->nnames];
    w->hid = put(&p, hid);
    w->client = put(&p, s->name);
    for (int i = 0; i < w->nnames; i++)
        w->names[i] = put(&p, names[i]);
    w->edges = (struct deadlock_edges){ w->hid, w->nnames, (const char *const *)w->names };
    deadline_init(&w->timeout, on_timeout);
    deadline_init(&w->retry, on_retry);
    if (w->wait_ms > 0) {
        w->ends = r->arrived + (uint64_t)w->wait_ms;
        deadline_arm(d->deadlines, &w->timeout, w->ends);
    }
    wait_attach(w, s);
    d->nwaiting += w->wait_ms != 0;
    r->gone = on_req_gone;
    r->quit = on_req_quit;
    r->ctx = w;
    return w;
}

struct wait *wait_new(struct req *r, struct session *s, enum wait_kind kind, char mode)
{
    return wait_new_names(r, s, kind, mode, r->pr.nnames, (const char *const *)r->pr.names);
}
