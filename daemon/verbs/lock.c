/* lock.c - the verbs on locks and semaphores: LOCK, UNLOCK, ACQUIRE, RELEASE, STATUS. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "batch.h"
#include "conn.h"
#include "deadlock.h"
#include "dlockd.h"
#include "hold.h"
#include "lock.h"
#include "log.h"
#include "multi.h"
#include "record.h"
#include "redis.h"
#include "session.h"
#include "wait.h"
#include "strbuf.h"

/* STATUS lists holders while their JSON stays within this many bytes, so
 * that its line stays within about 4 KiB; "more" counts the others. */
#define STATUS_HOLDERS_BYTES 3000

/* An UNLOCK, RELEASE or STATUS in flight, or one slot's part of an UNLOCK across cluster slots. */
struct op {
    struct req *req;
    struct split *split;   /* the UNLOCK across slots this is a part of, or NULL */
    char who[HID_MAX + 1]; /* session:owner */
    int nnames;
    const char *names[PROTO_MAX_NAMES]; /* point into req's line */
    int at[PROTO_MAX_NAMES]; /* a part's names' places in the request */
    char unindex[PROTO_MAX_NAMES + 1]; /* per name '1' when Redis unindexes a hold that ends (record_carried) */
};

/* An UNLOCK across cluster slots: answered once every slot's part is. */
struct split {
    struct req *req;
    int pending;                      /* parts not answered yet */
    enum proto_err err;               /* the first part's error */
    char why[512];     /* empty while no part failed */
    char counts[PROTO_MAX_NAMES][24]; /* by place in the request */
};

static struct op *op_new(struct req *r, const char *sid)
{
    struct op *op = must(calloc(1, sizeof(*op)));

    op->req = r;
    struct strbuf b = sb_on(op->who, sizeof(op->who));
    sb_str(&b, sid);
    sb_chr(&b, ':');
    sb_str(&b, r->pr.owner);
    op->nnames = r->pr.nnames;
    memcpy(op->names, r->pr.names, sizeof(op->names));
    return op;
}

static int script_or_backend(struct op *op, enum op_id id, const struct contract_args *args, contract_cb *cb)
{
    if (hold_script(op->req->d, id, op->nnames, op->names, args, cb, NULL, op) == 0)
        return 0;
    req_err(op->req, PROTO_EBACKEND, "%s", redis_unavailable(op->req->d->redis));
    free(op);
    return -1;
}

static int spans_slots(const struct req *r)
{
    return batch_spans(r->d, r->pr.nnames, (const char *const *)r->pr.names);
}

/* Checks the limits that apply before asking Redis. The names of a
 * session's waits count as holds already, so no grant can pass max-holds.
 * Returns 0, or -1 after replying. */
static int within_limits(struct req *r, struct session *s)
{
    struct dlockd *d = r->d;
    int n = r->pr.nnames;

    if (s->nholds + s->nreserved + n > d->cfg.max_holds) {
        req_err(r, PROTO_ELIMIT, "session has %d holds and waits for %d more, max-holds is %lld", s->nholds,
                s->nreserved, (long long)d->cfg.max_holds);
        return -1;
    }
    if ((int64_t)(d->nholds + d->nreserved) + n > d->cfg.max_holds_total) {
        req_err(r, PROTO_ELIMIT, "this server has %llu holds and waits for %llu more, max-holds-total is %lld",
                (unsigned long long)d->nholds, (unsigned long long)d->nreserved, (long long)d->cfg.max_holds_total);
        return -1;
    }
    return wait_within_limits(r, s);
}

void lock_lock(struct req *r)
{
    struct session *s = req_session(r);
    char mode = (r->pr.flags & PROTO_F_SHARED) ? 's' : 'x', who[HID_MAX + 1];

    if (within_limits(r, s))
        return;
    struct strbuf b = sb_on(who, sizeof(who));
    sb_str(&b, s->id);
    sb_chr(&b, ':');
    sb_str(&b, r->pr.owner);
    if (r->pr.wait_ms != 0 && deadlock_check(r->d, who, mode, r->pr.nnames, r->pr.names)) {
        req_err(r, PROTO_EDEADLOCK, "waiting would close a cycle of waits on this server");
        return;
    }
    if (spans_slots(r)) {
        int slots[PROTO_MAX_NAMES];
        for (int i = 0; i < r->pr.nnames; i++)
            slots[i] = batch_slot(r->d, r->pr.names[i]);
        multi_lock(r, s, mode, slots);
    } else {
        wait_submit(wait_new(r, s, WAIT_LOCK, mode));
    }
}

void lock_acquire(struct req *r)
{
    struct session *s = req_session(r);

    if (r->pr.permits > r->pr.limit) {
        req_err(r, PROTO_ESYNTAX, "permits=%lld exceeds limit=%lld", (long long)r->pr.permits,
                (long long)r->pr.limit);
        return;
    }
    if (within_limits(r, s))
        return;
    wait_submit(wait_new(r, s, WAIT_SEM, 'p'));
}

/* --- UNLOCK and RELEASE */

/* Applies Redis's answer to op's UNLOCK or RELEASE to the holds here.
 * Returns 0, or -1 after filling err and why. */
static int unlock_applied(struct dlockd *d, const struct op *op, const struct contract_reply *rep,
                          enum proto_err *err, char *why, size_t len)
{
    struct session *s = req_session(op->req);
    char counts[CONTRACT_LIST_MAX], hid[HID_MAX + 2], *save;
    const char *count, *modes;

    *err = rep && rep->status == CONTRACT_NOTHELD ? PROTO_ENOTHELD : PROTO_EBACKEND;
    if (rep == NULL) {
        snprintf(why, len, "%s", dlockd_silence(d));
        return -1;
    }
    if (rep->status != CONTRACT_OK) {
        if (rep->status == CONTRACT_NOTHELD)
            snprintf(why, len, "'%s' is not held by this session and owner", rep->name);
        else
            snprintf(why, len, "unexpected answer '%s' from Redis", rep->text);
        return -1;
    }
    modes = rep->unlock.modes;
    str_copy(counts, sizeof(counts), rep->unlock.counts);
    count = strtok_r(counts, ",", &save);
    for (int i = 0; i < op->nnames && count && 2 * (size_t)i < strlen(modes); i++) {
        struct strbuf b = sb_on(hid, sizeof(hid));
        sb_chr(&b, modes[2 * i]);
        sb_str(&b, op->who);
        hold_count(d, op->names[i], hid, atoll(count), op->unindex[i] == '1');
        log_info("audit: release name=%s session=%s client=%s count=%s", op->names[i], op->req->sid,
                 s ? s->name : "-", count);
        if (op->split)
            str_copy(op->split->counts[op->at[i]], sizeof(op->split->counts[0]), count);
        count = strtok_r(NULL, ",", &save);
    }
    return 0;
}

static void on_unlock(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct op *op = arg;
    enum proto_err err;
    char why[512];

    if (unlock_applied(d, op, rep, &err, why, sizeof(why)))
        req_err(op->req, err, "%s", why);
    else if (rep->unlock.modes[0] == 'p')
        req_reply(op->req, "OK", "held=%s free=%lld", rep->unlock.counts, rep->unlock.free);
    else {
        char body[CONTRACT_LIST_MAX + 16];
        struct strbuf b = sb_on(body, sizeof(body));
        sb_str(&b, op->nnames > 1 ? "OK counts=" : "OK count=");
        sb_str(&b, rep->unlock.counts);
        req_reply(op->req, body, NULL);
    }
    free(op);
}

/* One part of an UNLOCK across slots is done: the last one answers. */
static void split_done(struct split *sp)
{
    char counts[CONTRACT_LIST_MAX];
    size_t len = 0;

    if (--sp->pending > 0)
        return;
    if (sp->why[0]) {
        req_err(sp->req, sp->err, "%s", sp->why);
    } else {
        for (int i = 0; i < sp->req->pr.nnames; i++)
            len += (size_t)snprintf(counts + len, sizeof(counts) - len, "%s%s", i ? "," : "", sp->counts[i]);
        req_reply(sp->req, "OK", "counts=%s", counts);
    }
    free(sp);
}

static void on_unlock_part(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct op *op = arg;
    struct split *sp = op->split;
    enum proto_err err;
    char why[sizeof(sp->why)];

    if (unlock_applied(d, op, rep, &err, why, sizeof(why)) && sp->why[0] == '\0') {
        sp->err = err;
        str_copy(sp->why, sizeof(sp->why), why);
    }
    free(op);
    split_done(sp);
}

/*
 * Fills known, for each name of op, with whether the client may know of its
 * hold there: this daemon answered its grant, or a LOCK or ACQUIRE of the
 * same session and owner is on its way to Redis and may be granted before
 * the release runs. A hold granted to a request still queued here (its
 * answer pending, or being confirmed) is not the client's to release yet.
 */
static void known_holds(const struct op *op, char *known)
{
    struct session *s = req_session(op->req);

    for (int i = 0; i < op->nnames; i++)
        known[i] = wait_owner_knows(op->req->d, s, op->who, op->names[i], NULL, 1) ? '1' : '0';
    known[op->nnames] = '\0';
}

/*
 * An UNLOCK across cluster slots: one script per slot. It starts only when
 * this daemon knows every hold, so that a name not held fails it whole; a
 * slot whose script then fails (a hold lost meanwhile) fails the answer, and
 * the other slots' names are released.
 */
static void unlock_split(struct op *all, const char *known, char shared)
{
    struct dlockd *d = all->req->d;
    const char *unknown = strchr(known, '0');
    struct split *sp;
    int slot[PROTO_MAX_NAMES], done[PROTO_MAX_NAMES] = { 0 };

    if (unknown) {
        req_err(all->req, PROTO_ENOTHELD, "'%s' is not held by this session and owner", all->names[unknown - known]);
        free(all);
        return;
    }
    sp = must(calloc(1, sizeof(*sp)));
    sp->req = all->req;
    sp->pending = 1;
    for (int i = 0; i < all->nnames; i++)
        slot[i] = batch_slot(d, all->names[i]);
    for (int i = 0; i < all->nnames; i++) {
        struct op *op;
        struct contract_args args;
        char ones[PROTO_MAX_NAMES + 1];

        if (done[i])
            continue;
        op = op_new(all->req, all->req->sid);
        op->split = sp;
        op->nnames = 0;
        for (int j = i; j < all->nnames; j++) {
            if (slot[j] != slot[i])
                continue;
            done[j] = 1;
            op->at[op->nnames] = j;
            op->names[op->nnames] = all->names[j];
            ones[op->nnames++] = '1';
        }
        ones[op->nnames] = '\0';
        contract_unlock_args(&args, op->who, shared, (all->req->pr.flags & PROTO_F_ALL) != 0, "", 1, 0, ones, NULL);
        sp->pending++;
        if (hold_script(d, OP_UNLOCK, op->nnames, op->names, &args, on_unlock_part, NULL, op)) {
            if (sp->why[0] == '\0') {
                sp->err = PROTO_EBACKEND;
                str_copy(sp->why, sizeof(sp->why), redis_unavailable(d->redis));
            }
            free(op);
            sp->pending--;
        }
    }
    free(all);
    split_done(sp);
}

/*
 * The key of op's session's record, in key, when the UNLOCK or RELEASE can
 * carry it (record_carried), else NULL; fills op->unindex: a hold that ends
 * leaves the record with it, in the same call, when it is its owner's only
 * hold on the name here and no wait of theirs is for the name.
 */
static const char *carry_record(struct op *op, char *key, size_t len)
{
    struct session *s = req_session(op->req);
    const char *record = s ? record_carried(s, key, len) : NULL;

    for (int i = 0; i < op->nnames; i++) {
        struct lname *ln = record ? hold_name(op->req->d, op->names[i]) : NULL;
        const struct hold *h;
        int n = 0;
        if (ln)
            TAILQ_FOREACH(h, &ln->holds, in_name)
                n += h->s == s && strcmp(h->hid + 1, op->who) == 0;
        op->unindex[i] = n == 1 && !wait_owner_waits(s, op->who, op->names[i], NULL, 0) ? '1' : '0';
    }
    op->unindex[op->nnames] = '\0';
    return record;
}

void lock_unlock(struct req *r)
{
    struct op *op;
    struct contract_args args;
    char known[PROTO_MAX_NAMES + 1], key[CONTRACT_KEY_MAX], shared = (r->pr.flags & PROTO_F_SHARED) ? 's' : '\0';
    const char *record;

    op = op_new(r, r->sid);
    known_holds(op, known);
    if (spans_slots(r)) {
        unlock_split(op, known, shared);
        return;
    }
    record = carry_record(op, key, sizeof(key));
    contract_unlock_args(&args, op->who, shared, (r->pr.flags & PROTO_F_ALL) != 0, "", 1, 0, known, op->unindex);
    args.record = record;
    script_or_backend(op, OP_UNLOCK, &args, on_unlock);
}

void lock_release(struct req *r)
{
    struct op *op;
    struct contract_args args;
    char known[PROTO_MAX_NAMES + 1], key[CONTRACT_KEY_MAX];
    const char *record;

    op = op_new(r, r->sid);
    known_holds(op, known);
    record = carry_record(op, key, sizeof(key));
    contract_unlock_args(&args, op->who, 'p', 0, "", (long long)r->pr.permits, 0, known, op->unindex);
    args.record = record;
    script_or_backend(op, OP_UNLOCK, &args, on_unlock);
}

/* --- STATUS */

static json_t *holder_json(const struct contract_holder *ch, int semaphore)
{
    char hid[HID_MAX + 1], sid[DLOCKD_ID_LEN + 1];
    const char *owner, *mode;

    str_copy(hid, sizeof(hid), ch->hid);
    snprintf(sid, sizeof(sid), "%.*s", DLOCKD_ID_LEN, hid + 1);
    if (ch->orphaned)
        snprintf(sid, sizeof(sid), "-"); /* kept for lock-delay: its session is gone */
    owner = strlen(hid) > DLOCKD_ID_LEN + 2 ? hid + DLOCKD_ID_LEN + 2 : "";
    mode = hid[0] == 'x' ? "exclusive" : "shared";
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I}", "session", sid, "client", ch->client, "owner", owner,
                     semaphore ? "kind" : "mode", semaphore ? "permits" : mode, semaphore ? "permits" : "count",
                     (json_int_t)ch->count, "token", (json_int_t)ch->token, "held_ms", (json_int_t)ch->held_ms);
}

/* Adds the holders of a STATUS reply to holders while their JSON fits in
 * STATUS_HOLDERS_BYTES. Returns how many did not fit. */
static long long add_holders(json_t *holders, const struct contract_reply *rep, int semaphore)
{
    size_t bytes = 0;
    long long left = 0;

    for (int i = 0; i < rep->state.nholders; i++) {
        struct contract_holder ch = contract_holder(rep, i);
        json_t *h = holder_json(&ch, semaphore);
        char *text = json_dumps(h, JSON_COMPACT);
        size_t len = text ? strlen(text) + 1 : SIZE_MAX;

        free(text);
        if (left == 0 && len <= STATUS_HOLDERS_BYTES - bytes) {
            bytes += len;
            json_array_append_new(holders, h);
        } else {
            left++;
            json_decref(h);
        }
    }
    return left;
}

static json_t *status_json(const char *name, const struct contract_reply *rep)
{
    const char *kind = rep->state.kind;
    json_t *doc, *holders;
    long long more;

    if (strcmp(kind, "latch") == 0)
        return json_pack("{s:s, s:s, s:I}", "name", name, "type", "latch", "count",
                         (json_int_t)rep->state.latch_count);
    holders = json_array();
    more = rep->state.more + add_holders(holders, rep, strcmp(kind, "semaphore") == 0);
    doc = json_pack("{s:s, s:o, s:o, s:I}", "name", name, "type", kind[0] ? json_string(kind) : json_null(),
                    "holders", holders, "waiters", (json_int_t)rep->state.waiters);
    if (strcmp(kind, "semaphore") == 0) {
        json_object_set_new(doc, "limit", json_integer(rep->state.limit));
        json_object_set_new(doc, "free", json_integer(rep->state.free));
    }
    json_object_set_new(doc, "more", json_integer(more));
    return doc;
}

static void on_status(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    struct op *op = arg;
    json_t *doc;
    char *text;

    if (rep == NULL) {
        req_err(op->req, PROTO_EBACKEND, "%s", dlockd_silence(d));
        free(op);
        return;
    }
    (void)d;
    doc = status_json(op->names[0], rep);
    text = json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER);
    req_reply(op->req, "OK", "%s", text);
    free(text);
    json_decref(doc);
    free(op);
}

void lock_status(struct req *r)
{
    script_or_backend(op_new(r, r->sid), OP_STATUS, NULL, on_status);
}
