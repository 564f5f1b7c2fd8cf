/* contract.c - the one place where C meets the Lua scripts' keys, argument orders and replies. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "contract.h"
#include "redis.h"
#include "strbuf.h"

/* "<prefix>{<tag>}<rest>" in buf, cut to fit; returns the length written. */
static size_t tagged_key(char *buf, size_t len, const char *prefix, const char *tag, const char *rest, size_t restlen)
{
    struct strbuf b = sb_on(buf, len);

    sb_str(&b, prefix);
    sb_chr(&b, '{');
    sb_str(&b, tag);
    sb_chr(&b, '}');
    sb_mem(&b, rest, restlen);
    return b.len < len ? b.len : len - 1;
}

size_t contract_key(char *buf, size_t len, const char *prefix, const char *name, char suffix)
{
    char rest[2] = { ':', suffix };

    return tagged_key(buf, len, prefix, name, rest, 2);
}

size_t contract_session_key(char *buf, size_t len, const char *prefix, const char *sid)
{
    return tagged_key(buf, len, prefix, sid, ":session", 8);
}

size_t contract_ack_key(char *buf, size_t len, const char *prefix, const char *id)
{
    return tagged_key(buf, len, prefix, id, ":ack", 4);
}

/* --- ARGV of the batch, and of the operations in the order of the header of each script */

void contract_batch_head(const char **head, const char *prefix, const char *id, const char *deadline,
                         const char *nops)
{
    head[0] = prefix;
    head[1] = id;
    head[2] = deadline;
    head[3] = nops;
}

void contract_op_frame(struct contract_frame *f, enum op_id op, int nnames, const char *const *names,
                       const struct contract_args *args)
{
    int nargs = args ? args->n : 0;

    f->n = 0;
    f->v[f->n++] = op_names[op];
    str_ll(f->nnames, sizeof(f->nnames), nnames);
    f->v[f->n++] = f->nnames;
    for (int i = 0; i < nnames; i++)
        f->v[f->n++] = names[i];
    f->v[f->n++] = args && args->record ? "1" : "0";
    str_ll(f->nargs, sizeof(f->nargs), nargs);
    f->v[f->n++] = f->nargs;
    for (int i = 0; i < nargs; i++)
        f->v[f->n++] = args->v[i];
}

/* An empty a, carrying no record. */
static void begin(struct contract_args *a)
{
    a->n = 0;
    a->record = NULL;
}

static void add(struct contract_args *a, const char *s)
{
    assert(a->n < CONTRACT_ARGS_MAX);
    a->v[a->n++] = s;
}

static void add_num(struct contract_args *a, long long n)
{
    str_ll(a->num[a->n], sizeof(a->num[a->n]), n);
    add(a, a->num[a->n]);
}

static void add_char(struct contract_args *a, char c)
{
    a->num[a->n][0] = c;
    a->num[a->n][1] = '\0';
    add(a, a->num[a->n]);
}

/* What lock.lua and acquire.lua both take, in this order: session:owner,
 * client name, wid, wait, the leases (of a grant now, recorded with the
 * hold, bounded, of the queue entry); lock.lua has the mode after the first. */
static void add_request(struct contract_args *a, const struct contract_lock *l, char mode)
{
    begin(a);
    add(a, l->who);
    if (mode)
        add_char(a, mode);
    add(a, l->client);
    add(a, l->wid);
    add_num(a, l->wait);
    add_num(a, l->ttl);
    add_num(a, l->lease);
    add_num(a, l->bounded);
    add_num(a, l->qttl);
}

/* lock.lua: session:owner, mode, client name, wid, wait, Redis lease of a
 * grant now, lease recorded with the hold, bounded, lease of the queue
 * entries, known per name, ends. */
void contract_lock_args(struct contract_args *a, const struct contract_lock *l)
{
    add_request(a, l, l->mode);
    add(a, l->known);
    add_num(a, l->ends);
}

/* acquire.lua: session:owner, client name, wid, wait, Redis lease of a
 * grant now, lease recorded with the hold, bounded, lease of the queue
 * entry, permits, limit, known, ends. */
void contract_acquire_args(struct contract_args *a, const struct contract_lock *l)
{
    add_request(a, l, '\0');
    add_num(a, l->permits);
    add_num(a, l->limit);
    add(a, l->known);
    add_num(a, l->ends);
}

/* unlock.lua: session:owner, mode, all, token, counts to drop, lock-delay,
 * per name 1 when the daemon knows of the hold, else 0, and per name 1 when
 * a hold that ends leaves the record. */
void contract_unlock_args(struct contract_args *a, const char *who, char mode, int all, const char *token,
                          long long count, long long delay, const char *known, const char *unindex)
{
    begin(a);
    add(a, who);
    add_char(a, mode);
    add_num(a, all != 0);
    add(a, token);
    add_num(a, count);
    add_num(a, delay);
    add(a, known);
    add(a, unindex ? unindex : "");
}

/* cancel.lua: wid, hid, "check" or "". */
void contract_cancel_args(struct contract_args *a, const char *wid, const char *hid, int check)
{
    begin(a);
    add(a, wid);
    add(a, hid);
    add(a, check ? "check" : "");
}

/* adopt.lua: lease, the hids space-separated, the wids ("-" for none) space-separated, to, from. */
void contract_adopt_args(struct contract_args *a, long long lease, const char *hids, const char *wids,
                         const char *to, const char *from)
{
    begin(a);
    add_num(a, lease);
    add(a, hids);
    add(a, wids);
    add(a, to);
    add(a, from);
}

/* reassert.lua: hid, token, count, ttl, lease, bounded, client. */
void contract_reassert_args(struct contract_args *a, const char *hid, const char *token, long long count,
                            long long ttl, long long lease, int bounded, const char *client)
{
    begin(a);
    add(a, hid);
    add(a, token);
    add_num(a, count);
    add_num(a, ttl);
    add_num(a, lease);
    add(a, bounded ? "1" : "0");
    add(a, client);
}

/* latch.lua: op, n, ttl. */
void contract_latch_args(struct contract_args *a, const char *op, long long n, long long ttl)
{
    begin(a);
    add(a, op);
    add_num(a, n);
    add_num(a, ttl);
}

/* --- replies. The batch's: status, Redis time (ms), the names with more to
 * hand on, the number of grants, BATCH_GRANT fields of each grant, then the
 * reply of each operation, laid out the same way (with no grants), then the
 * operation's own fields. */

enum { BATCH_STATUS, BATCH_NOW, BATCH_MORE, BATCH_NGRANTS, BATCH_GRANTS };
#define BATCH_GRANT 5 /* wid tokens counts free left */

static const char *const status_names[] = {
    [CONTRACT_OK] = "OK",
    [CONTRACT_BUSY] = "BUSY",
    [CONTRACT_WAIT] = "WAIT",
    [CONTRACT_WRONGTYPE] = "WRONGTYPE",
    [CONTRACT_MISMATCH] = "MISMATCH",
    [CONTRACT_DEADLOCK] = "DEADLOCK",
    [CONTRACT_NOTHELD] = "NOTHELD",
    [CONTRACT_CANCELLED] = "CANCELLED",
    [CONTRACT_QUEUED] = "QUEUED",
    [CONTRACT_GRANTED] = "GRANTED",
    [CONTRACT_GONE] = "GONE",
    [CONTRACT_LATE] = "LATE",
};

static enum contract_status status_of(const char *text)
{
    for (int s = 0; s < CONTRACT_UNKNOWN; s++)
        if (strcmp(text, status_names[s]) == 0)
            return (enum contract_status)s;
    return CONTRACT_UNKNOWN;
}

/* Copies element i of rep (a string, or an integer formatted) into out; "" when absent. */
static void str(const redisReply *rep, size_t i, char *out, size_t len)
{
    char buf[32];

    str_copy(out, len, redis_elem(rep, i, buf, sizeof(buf)));
}

/* Element i of rep as a string reply in place, or "". */
static const char *str_in(const redisReply *rep, size_t i)
{
    const redisReply *e = rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements ? rep->element[i] : NULL;

    return e && e->type == REDIS_REPLY_STRING ? e->str : "";
}

/* The index of the first field after the grants of a reply laid out as the batch's. */
static size_t fields(const redisReply *rep)
{
    long long n = redis_elem_int(rep, BATCH_NGRANTS);

    return BATCH_GRANTS + BATCH_GRANT * (size_t)(n > 0 ? n : 0);
}

void contract_batch(struct contract_batch *b, const redisReply *rep)
{
    char text[16];

    str(rep, BATCH_STATUS, text, sizeof(text));
    b->status = status_of(text);
    b->now = redis_elem_int(rep, BATCH_NOW);
    b->more = str_in(rep, BATCH_MORE);
    b->ngrants = redis_elem_int(rep, BATCH_NGRANTS);
    if (b->ngrants < 0)
        b->ngrants = 0;
    b->rep = rep;
    b->next = fields(rep);
    b->next_op = 0;
}

/* An operation's grant: the fields tokens counts free from index at. */
static void grant_at(const redisReply *rep, size_t at, struct contract_grant *g)
{
    g->wid[0] = '\0';
    str(rep, at, g->tokens, sizeof(g->tokens));
    str(rep, at + 1, g->counts, sizeof(g->counts));
    g->free = redis_elem_int(rep, at + 2);
    g->left = -1;
}

void contract_batch_grant(const struct contract_batch *b, long long i, struct contract_grant *g)
{
    size_t at = BATCH_GRANTS + BATCH_GRANT * (size_t)i;

    grant_at(b->rep, at + 1, g);
    str(b->rep, at, g->wid, sizeof(g->wid));
    g->left = redis_elem_int(b->rep, at + 4);
}

/* OK of each operation: lock (tokens counts 0), acquire (token held free),
 * unlock (counts modes free), latch (count ttl-ms created), poke (retry-ms),
 * status (see status.lua), force (count more, then hid token of each). */
static void decode_ok(const redisReply *rep, size_t f, enum op_id op, struct contract_reply *r)
{
    switch (op) {
    case OP_LOCK:
    case OP_ACQUIRE:
        grant_at(rep, f, &r->grant);
        break;
    case OP_UNLOCK:
        str(rep, f, r->unlock.counts, sizeof(r->unlock.counts));
        str(rep, f + 1, r->unlock.modes, sizeof(r->unlock.modes));
        r->unlock.free = redis_elem_int(rep, f + 2);
        break;
    case OP_LATCH:
        r->latch.count = redis_elem_int(rep, f);
        r->latch.ttl = redis_elem_int(rep, f + 1);
        r->latch.created = redis_elem_int(rep, f + 2) == 1;
        break;
    case OP_POKE:
        r->retry_ms = redis_elem_int(rep, f);
        break;
    case OP_FORCE:
        r->force.count = redis_elem_int(rep, f);
        r->force.more = redis_elem_int(rep, f + 1) != 0;
        r->force.rep = rep;
        r->force.first = f + 2;
        if (r->force.count < 0 || rep->elements < f + 2 + 2 * (size_t)r->force.count)
            r->force.count = rep->elements > f + 2 ? (long long)(rep->elements - f - 2) / 2 : 0;
        break;
    case OP_STATUS:
        str(rep, f, r->state.kind, sizeof(r->state.kind));
        r->state.waiters = redis_elem_int(rep, f + 1);
        r->state.limit = redis_elem_int(rep, f + 2);
        r->state.free = redis_elem_int(rep, f + 3);
        r->state.latch_count = redis_elem_int(rep, f + 4);
        r->state.more = redis_elem_int(rep, f + 5);
        r->state.rep = rep;
        r->state.first = f + 6;
        r->state.nholders = rep->elements > f + 6 ? (int)((rep->elements - f - 6) / 6) : 0;
        break;
    case OP_ADOPT:
        r->adopt.rep = rep;
        r->adopt.first = f;
        break;
    case OP_REASSERT:
        str(rep, f, r->reassert.outcome, sizeof(r->reassert.outcome));
        break;
    default:
        break;
    }
}

/* The fields of r's status for op, from index f of rep. */
static void decode_fields(const redisReply *rep, size_t f, enum op_id op, struct contract_reply *r)
{
    switch (r->status) {
    case CONTRACT_OK:
        decode_ok(rep, f, op, r);
        break;
    case CONTRACT_GRANTED:
        grant_at(rep, f, &r->grant);
        break;
    case CONTRACT_BUSY: /* LOCK: holder ttl; ACQUIRE: free */
        if (op == OP_ACQUIRE) {
            r->busy.free = redis_elem_int(rep, f);
        } else {
            str(rep, f, r->busy.holder, sizeof(r->busy.holder));
            r->busy.ttl = redis_elem_int(rep, f + 1);
        }
        break;
    case CONTRACT_WAIT:
        r->retry_ms = redis_elem_int(rep, f);
        break;
    case CONTRACT_WRONGTYPE:
    case CONTRACT_NOTHELD:
        str(rep, f, r->name, sizeof(r->name));
        break;
    case CONTRACT_MISMATCH:
        r->limit = redis_elem_int(rep, f);
        break;
    default:
        break;
    }
}

const struct contract_reply *contract_op_reply(struct contract_batch *b, int i, enum op_id op,
                                               struct contract_reply *r)
{
    const redisReply *rep = b->rep;
    long long n = 0;

    if (rep->type != REDIS_REPLY_ARRAY)
        return NULL;
    if (i < b->next_op) {
        b->next = fields(rep);
        b->next_op = 0;
    }
    /* each operation's reply: the number of its fields, then them */
    for (; b->next < rep->elements; b->next += 1 + (size_t)n, b->next_op++) {
        n = redis_elem_int(rep, b->next);
        if (n < 1 || b->next + (size_t)n >= rep->elements)
            return NULL;
        if (b->next_op == i)
            break;
    }
    if (b->next >= rep->elements)
        return NULL;
    r->view = (redisReply){ .type = REDIS_REPLY_ARRAY, .elements = (size_t)n, .element = rep->element + b->next + 1 };
    str(&r->view, 0, r->text, sizeof(r->text));
    r->status = status_of(r->text);
    decode_fields(&r->view, 1, op, r);
    return r;
}

struct contract_holder contract_holder(const struct contract_reply *r, int i)
{
    const redisReply *rep = r->state.rep;
    size_t at = r->state.first + 6 * (size_t)i;

    return (struct contract_holder){
        .hid = str_in(rep, at),
        .client = str_in(rep, at + 1),
        .count = redis_elem_int(rep, at + 2),
        .token = redis_elem_int(rep, at + 3),
        .held_ms = redis_elem_int(rep, at + 4),
        .orphaned = redis_elem_int(rep, at + 5) != 0,
    };
}

/* adopt.lua: token count left of each name. */
struct contract_adopted contract_adopted(const struct contract_reply *r, int i)
{
    const redisReply *rep = r->adopt.rep;
    size_t at = r->adopt.first + 3 * (size_t)i;

    if (rep == NULL || at + 2 >= rep->elements)
        return (struct contract_adopted){ .token = "", .left = -1 };
    return (struct contract_adopted){
        .token = str_in(rep, at),
        .count = redis_elem_int(rep, at + 1),
        .left = redis_elem_int(rep, at + 2),
    };
}

/* session.lua get: field value pairs. */
int contract_record(const redisReply *rep, struct contract_record *rec)
{
    *rec = (struct contract_record){ .daemon = "", .client = "", .hash = "", .rep = rep };
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements == 0 || rep->elements % 2)
        return -1;
    for (size_t i = 0; i < rep->elements; i += 2) {
        const char *f = str_in(rep, i), *v = str_in(rep, i + 1);
        if (f[0] == CONTRACT_REC_INDEX)
            rec->nindex++;
        else if (strcmp(f, CONTRACT_REC_DAEMON) == 0)
            rec->daemon = v;
        else if (strcmp(f, CONTRACT_REC_CLIENT) == 0)
            rec->client = v;
        else if (strcmp(f, CONTRACT_REC_HASH) == 0)
            rec->hash = v;
        else if (strcmp(f, CONTRACT_REC_TTL) == 0)
            rec->ttl = strtoll(v, NULL, 10);
        else if (strcmp(f, CONTRACT_REC_KILLED) == 0)
            rec->killed = 1;
    }
    return rec->daemon[0] ? 0 : -1;
}

int contract_record_next(const struct contract_record *rec, size_t *pos, char *hid, size_t hidlen, char *name,
                         size_t namelen, unsigned long long *token, char *wid, size_t widlen)
{
    const redisReply *rep = rec->rep;

    for (size_t i = *pos; i + 1 < rep->elements; i += 2) {
        const char *f = str_in(rep, i), *sp, *v;
        if (f[0] != CONTRACT_REC_INDEX)
            continue;
        *pos = i + 2;
        if ((sp = strchr(f, ' ')) == NULL || (size_t)(sp - f - 1) >= hidlen || strlen(sp + 1) >= namelen ||
            sp[1] == '\0')
            return 1;
        snprintf(hid, hidlen, "%.*s", (int)(sp - f - 1), f + 1);
        snprintf(name, namelen, "%s", sp + 1);
        v = str_in(rep, i + 1);
        *token = strtoull(v, NULL, 10);
        snprintf(wid, widlen, "%s", v[0] == 'w' ? v + 1 : "");
        return 0;
    }
    return -1;
}

void contract_record_change(char *buf, size_t len, int add, const char *token, const char *hid, const char *name)
{
    struct strbuf b = sb_on(buf, len);

    if (token) {
        sb_chr(&b, '=');
        sb_str(&b, token);
        sb_chr(&b, ' ');
    } else {
        sb_chr(&b, add ? '+' : '-');
    }
    sb_chr(&b, CONTRACT_REC_INDEX);
    sb_str(&b, hid);
    sb_chr(&b, ' ');
    sb_str(&b, name);
}

void contract_forced(const struct contract_reply *r, long long i, const char **hid, const char **token)
{
    size_t at = r->force.first + 2 * (size_t)i;

    *hid = str_in(r->force.rep, at);
    *token = str_in(r->force.rep, at + 1);
}

/* renew.lua: item-index (counting pairs from 1), member, of each lease gone. */
int contract_renew_gone(const redisReply *rep, size_t j, long long *item)
{
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || 2 * j + 1 >= rep->elements)
        return -1;
    *item = redis_elem_int(rep, 2 * j) - 1;
    return 0;
}
