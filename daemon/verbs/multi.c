/* multi.c - a LOCK of names in several Redis Cluster slots. One script runs
 * on one slot only, so the names are taken one slot at a time, in ascending
 * slot order, each slot all or nothing with its own wait. A refusal, a
 * timeout or a close releases what the slots before were granted. Every such
 * LOCK takes its slots in the same order, so no two of them wait for each
 * other in a cycle. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ack.h"
#include "conn.h"
#include "dlockd.h"
#include "hold.h"
#include "log.h"
#include "multi.h"
#include "record.h"
#include "session.h"
#include "wait.h"

struct multi {
    struct dlockd *d;
    char mode;                              /* x or s */
    int nnames;
    int sent;                               /* names of order[] sent to Redis so far */
    int granted;                            /* names of order[] granted so far */
    int reserved;                           /* names not sent yet, counted in nreserved */
    struct session *s;                      /* counts reserved */
    int order[PROTO_MAX_NAMES];             /* name indexes by slot, then by place */
    int slot[PROTO_MAX_NAMES];              /* by name index */
    char tokens[PROTO_MAX_NAMES][TOKEN_MAX];
    long long counts[PROTO_MAX_NAMES];
    char hid[HID_MAX + 1];
    char *names[PROTO_MAX_NAMES];           /* copies, in the request's order */
};

static void reserve(struct multi *m, int n)
{
    m->reserved += n;
    m->s->nreserved += n;
    m->d->nreserved += (uint64_t)(int64_t)n;
}

/* Orders the names by slot, keeping the request's order within a slot. */
static void sort_by_slot(struct multi *m)
{
    for (int i = 0; i < m->nnames; i++) {
        int j = i;
        for (; j > 0 && m->slot[m->order[j - 1]] > m->slot[i]; j--)
            m->order[j] = m->order[j - 1];
        m->order[j] = i;
    }
}

static void free_multi(struct multi *m)
{
    reserve(m, -m->reserved);
    for (int i = 0; i < m->nnames; i++)
        free(m->names[i]);
    free(m);
}

static void on_granted(void *arg, struct req *r, char *const *tokens, char *const *counts);
static void on_failed(void *arg, struct req *r);

static const struct wait_parent as_parent = { on_granted, on_failed };

/* Sends the wait for the names of the next slot. */
static void send_next(struct multi *m, struct req *r)
{
    const char *names[PROTO_MAX_NAMES];
    int first = m->sent, n = 0;
    struct wait *w;

    while (first + n < m->nnames && m->slot[m->order[first + n]] == m->slot[m->order[first]]) {
        names[n] = m->names[m->order[first + n]];
        n++;
    }
    m->sent += n;
    reserve(m, -n);
    w = wait_new_names(r, m->s, WAIT_LOCK, m->mode, n, names);
    w->parent = &as_parent;
    w->parent_arg = m;
    wait_submit(w);
}

void multi_lock(struct req *r, struct session *s, char mode, const int *slots)
{
    struct multi *m = must(calloc(1, sizeof(*m)));

    m->d = r->d;
    m->mode = mode;
    m->s = s;
    m->nnames = r->pr.nnames;
    snprintf(m->hid, sizeof(m->hid), "%c%s:%s", mode, s->id, r->pr.owner);
    for (int i = 0; i < m->nnames; i++) {
        m->names[i] = must(strdup(r->pr.names[i]));
        m->slot[i] = slots[i];
    }
    sort_by_slot(m);
    reserve(m, m->nnames);
    send_next(m, r);
}

static void answer(struct multi *m, struct req *r)
{
    char list[2][CONTRACT_LIST_MAX], body[2 * CONTRACT_LIST_MAX + 32], *tokens[PROTO_MAX_NAMES];
    struct ack_grant ag = { m->hid, 1, m->nnames, m->names, tokens };
    size_t tl = 0, cl = 0;

    for (int i = 0; i < m->nnames; i++) {
        struct hold *h = hold_find(m->d, m->names[i], m->hid);

        tokens[i] = m->tokens[i];
        if (h)
            h->untold = 0;
        if (m->counts[i] == 1) /* a new hold: the session's now, for a resume elsewhere to adopt */
            record_granted(m->s, m->hid, m->names[i], m->tokens[i]);
        tl += (size_t)snprintf(list[0] + tl, sizeof(list[0]) - tl, "%s%s", i ? "," : "", m->tokens[i]);
        cl += (size_t)snprintf(list[1] + cl, sizeof(list[1]) - cl, "%s%lld", i ? "," : "", m->counts[i]);
    }
    m->d->stats.grants++;
    histo_add_in(&m->d->stats.waited, histo_long_bounds_us, (now_ms() - r->arrived) * 1000);
    snprintf(body, sizeof(body), "OK tokens=%s counts=%s", list[0], list[1]);
    ack_answer(r, &ag, body);
}

/* Whether a hold of m's earlier slots ended (its lease= ran out, or it was lost) before m was answered. */
static int earlier_lost(const struct multi *m, int before)
{
    for (int i = 0; i < before; i++)
        if (!hold_has(m->d, m->names[m->order[i]], m->hid, m->tokens[m->order[i]]))
            return 1;
    return 0;
}

/* The wait of m's current slot was granted: on to the next slot, or the answer; TIMEOUT, releasing them
 * all, when a hold of an earlier slot ended meanwhile. */
static void on_granted(void *arg, struct req *r, char *const *tokens, char *const *counts)
{
    struct multi *m = arg;
    int before = m->granted;

    for (int i = m->granted; i < m->sent; i++) {
        int at = m->order[i];
        snprintf(m->tokens[at], sizeof(m->tokens[at]), "%s", tokens[i - m->granted]);
        m->counts[at] = atoll(counts[i - m->granted]);
    }
    m->granted = m->sent;
    if (earlier_lost(m, before)) {
        /* Its OK would name a hold that is gone, maybe someone else's now. */
        log_info("audit: timeout name=%s names=%d session=%s client=%s", m->names[m->order[0]], m->nnames, m->s->id,
                 m->s->name);
        m->d->stats.timeouts++;
        on_failed(m, r);
        req_reply(r, "TIMEOUT", NULL);
        return;
    }
    if (m->sent < m->nnames) {
        send_next(m, r);
        return;
    }
    answer(m, r);
    free_multi(m);
}

static void on_undone(struct dlockd *d, const struct contract_reply *rep, void *arg)
{
    (void)d;
    (void)rep;
    req_unhold(arg);
}

static void on_failed(void *arg, struct req *r)
{
    struct multi *m = arg;

    for (int i = 0; i < m->granted; i++) {
        int at = m->order[i];

        if (r == NULL) {
            hold_undo(m->d, m->names[at], m->hid, m->tokens[at], 1, NULL, NULL);
            continue;
        }
        req_hold(r); /* first: a batch that fills up is sent at once, and one that fails answers at once */
        if (hold_undo(m->d, m->names[at], m->hid, m->tokens[at], 1, on_undone, r))
            req_unhold(r);
    }
    if (m->granted)
        log_debug("multi %s: %d names of earlier slots released", m->hid, m->granted);
    free_multi(m);
}
