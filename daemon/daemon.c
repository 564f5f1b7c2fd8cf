/* daemon.c - builds and frees a whole daemon, and wires its layers: the calls
 * of the lower ones up (hooks.h, the owner of the Redis link) are made here,
 * the only place that knows every layer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "ack.h"
#include "admin.h"
#include "batch.h"
#include "cmd.h"
#include "conn.h"
#include "daemon.h"
#include "deadlock.h"
#include "dict.h"
#include "hold.h"
#include "hooks.h"
#include "latch.h"
#include "log.h"
#include "oper.h"
#include "record.h"
#include "redis.h"
#include "renew.h"
#include "reqid.h"
#include "resume.h"
#include "server.h"
#include "session.h"
#include "share.h"
#include "wait.h"

static void session_ending(struct session *s, enum session_end why)
{
    struct hold *h;

    reqid_free_session(s); /* first: no repeat may start on a session that is ending */
    wait_abandon_session(s);
    if (why == SESSION_FORGOTTEN) { /* here only, Redis untold (shutdown) */
        while ((h = TAILQ_FIRST(&s->holds)) != NULL)
            hold_remove(s->d, h);
        return;
    }
    hold_release_session(s, why == SESSION_EXPIRED);
    record_delete(s);
}

/* A QUIT waiting to learn whether its session was still this daemon's when it ended. */
struct quitting {
    struct req *r;
};

static void on_quit_read(struct dlockd *d, const struct contract_record *rec, int answered, void *arg)
{
    struct quitting *q = arg;

    if (q->r) {
        q->r->gone = NULL;
        if (!answered)
            log_info("c%llu: QUIT not answered: Redis did not say whether another daemon had the session",
                     q->r->c ? (unsigned long long)q->r->c->id : 0ULL);
        conn_quit_answer(q->r, !answered                                   ? QUIT_UNKNOWN
                               : rec && strcmp(rec->daemon, d->id) != 0 ? QUIT_MOVED
                                                                        : QUIT_ENDED);
    }
    free(q);
}

/*
 * Ends s for its QUIT r, then reads its record (after the delete, on the
 * same link): when another daemon had taken the session over, the delete
 * changed nothing and the session goes on there, so r is not answered OK;
 * nor when Redis does not answer, and nobody can know.
 */
static void session_quit(struct session *s, struct req *r)
{
    struct dlockd *d = s->d;
    char sid[DLOCKD_ID_LEN + 1];
    struct quitting *q = must(malloc(sizeof(*q)));

    memcpy(sid, s->id, sizeof(sid));
    session_end(s, SESSION_QUIT);
    q->r = r;
    if (record_fetch(d, sid, on_quit_read, q)) {
        on_quit_read(d, NULL, 0, q);
        return;
    }
    req_await(r, &q->r);
}

/* A hold of s on name ended here: its record no longer lists it unless a wait may still be granted it,
 * or s has no connection to hear its LOST (a resume elsewhere tells it from the record). One that
 * Redis unindexed with its release (dropped: its token) but that must stay is indexed again. */
static void hold_ended(struct session *s, const char *hid, const char *name, const char *dropped)
{
    int keep = wait_owner_knows(s->d, s, hid + 1, name, NULL, 0);

    if (dropped && (keep || conn_gone(s->conn)))
        record_granted(s, hid, name, dropped);
    if (keep)
        return;
    if (conn_gone(s->conn))
        session_untold(s, hid, name);
    else if (!dropped)
        record_index(s, hid, name, 0);
}

static void each_index(struct session *s, void (*fn)(const char *hid, const char *name, const char *token, void *arg),
                       void *arg)
{
    const struct hold *h;
    const struct wait *w;

    TAILQ_FOREACH(h, &s->holds, in_session) {
        char token[TOKEN_MAX];
        snprintf(token, sizeof(token), "%llu", h->token);
        fn(h->hid, h->ln->name, token, arg);
    }
    TAILQ_FOREACH(w, &s->waits, in_session) {
        char value[80];
        snprintf(value, sizeof(value), "w%s", w->wid);
        for (int i = 0; i < w->nnames; i++)
            fn(w->hid, w->names[i], value, arg);
    }
}

/* A read of a session's record, to learn whether the session moved. */
struct check {
    char sid[DLOCKD_ID_LEN + 1];
    void (*done)(struct dlockd *d, int answered, void *arg);
    void *arg;
};

/*
 * The holds of s that moved away are the new daemon's, which adopted those
 * its record listed before it claimed s. One granted here since is still
 * this daemon's in Redis and nobody else knows of it: it is released (Redis
 * refuses to release an adopted one: its daemon is another).
 */
static void release_unadopted(struct session *s)
{
    const struct hold *h;

    TAILQ_FOREACH(h, &s->holds, in_session) {
        char token[TOKEN_MAX];
        snprintf(token, sizeof(token), "%llu", h->token);
        hold_release(s->d, h->ln->name, h->hid, token, 1, 0, 0);
    }
}

/* When another daemon has the session now, it goes from here, record left as it is. */
static void on_moved(struct dlockd *d, const struct contract_record *rec, int answered, void *arg)
{
    struct check *ck = arg;
    struct session *s = session_find(d, ck->sid);

    /* No record proves nothing: the message may be forged, or Redis lost it. A session being
     * claimed is not a copy: the claim decides (resume.c). */
    if (s && s->claiming)
        s = NULL;
    if (s && rec && strcmp(rec->daemon, d->id) != 0 && rec->killed) {
        oper_killed_elsewhere(s);
    } else if (s && rec && strcmp(rec->daemon, d->id) != 0) {
        log_info("s%s: session moved to daemon %s", s->id, rec->daemon);
        release_unadopted(s);
        conn_moved_away(s);
        session_drop(s);
    }
    if (ck->done)
        ck->done(d, answered, ck->arg);
    free(ck);
}

static int check_moved(struct dlockd *d, const char *sid, void (*done)(struct dlockd *d, int answered, void *arg),
                       void *arg)
{
    struct check *ck = must(malloc(sizeof(*ck)));

    snprintf(ck->sid, sizeof(ck->sid), "%s", sid);
    ck->done = done;
    ck->arg = arg;
    if (record_fetch(d, sid, on_moved, ck) == 0)
        return 0;
    free(ck);
    return -1;
}

/* 1 when s is 1..max bytes of 0x21-0x7E. */
static int graphic(const char *s, size_t max)
{
    size_t n = 0;

    for (; s[n]; n++)
        if (n == max || (unsigned char)s[n] < 0x21 || (unsigned char)s[n] > 0x7e)
            return 0;
    return n > 0;
}

/*
 * "H name hid token": a takeover that did not complete gave this daemon's
 * hold back. When the session went from here meanwhile (it ended, say,
 * its release refused while the hold was the other daemon's), nobody has
 * it: released. Anyone may publish, but Redis releases only a hold that
 * names this daemon, with that token.
 */
static void handed_back(struct dlockd *d, const char *msg)
{
    char buf[PROTO_NAME_MAX + HID_MAX + TOKEN_MAX + 8], sid[DLOCKD_ID_LEN + 1], *name, *hid, *token, *save;

    if (strlen(msg) >= sizeof(buf))
        return;
    memcpy(buf, msg, strlen(msg) + 1);
    if (strtok_r(buf, " ", &save) == NULL || (name = strtok_r(NULL, " ", &save)) == NULL ||
        (hid = strtok_r(NULL, " ", &save)) == NULL || (token = strtok_r(NULL, " ", &save)) == NULL ||
        strlen(hid) < 2 + DLOCKD_ID_LEN || strlen(name) > PROTO_NAME_MAX)
        return;
    snprintf(sid, sizeof(sid), "%.*s", DLOCKD_ID_LEN, hid + 1);
    if (!proto_valid_name(name) || !graphic(hid, HID_MAX))
        return;
    if (session_find(d, sid) == NULL) {
        log_info("s%s: hold of %s handed back after the session ended here: released", sid, name);
        hold_release(d, name, hid, token, 1, 0, 0);
    }
}

/*
 * "L i<hid> <name> <token>": the daemon a session moved from wrote back a
 * hold whose release it could not answer (hold_ended). The client may
 * believe it still holds it: told LOST, unless the session holds the name
 * here or its resume here told it already (anyone may publish: a name and
 * hold id the protocol allows only, and nothing else changes).
 */
static void lost_elsewhere(struct dlockd *d, const char *msg)
{
    char hid[HID_MAX + 1], name[PROTO_NAME_MAX + 1], sid[DLOCKD_ID_LEN + 1];
    const char *h = msg + 3, *n, *t;
    unsigned long long token;
    struct session *s;

    if (strncmp(msg, "L i", 3) != 0 || (n = strchr(h, ' ')) == NULL || (t = strchr(n + 1, ' ')) == NULL ||
        (size_t)(n - h) >= sizeof(hid) || (size_t)(n - h) < 2 + DLOCKD_ID_LEN || (size_t)(t - n - 1) >= sizeof(name) ||
        t == n + 1 || t[1] == '\0' || strspn(t + 1, "0123456789") != strlen(t + 1))
        return;
    snprintf(hid, sizeof(hid), "%.*s", (int)(n - h), h);
    snprintf(name, sizeof(name), "%.*s", (int)(t - n - 1), n + 1);
    token = strtoull(t + 1, NULL, 10);
    snprintf(sid, sizeof(sid), "%.*s", DLOCKD_ID_LEN, hid + 1);
    if (!proto_valid_name(name) || !graphic(hid, HID_MAX) || (s = session_find(d, sid)) == NULL ||
        hold_find(d, name, hid) || session_lost_told(s, name, token))
        return;
    log_info("audit: lost name=%s session=%s client=%s token=%llu reason=backend", name, s->id, s->name, token);
    conn_session_event(s, "LOST %s token=%llu reason=backend", name, token);
}

static void on_message(struct dlockd *d, int latch, const char *msg)
{
    char sid[DLOCKD_ID_LEN + 1];

    if (latch) {
        latch_on_message(d, msg);
    } else if (sscanf(msg, "M %16s", sid) == 1) {
        /* Anyone may publish: the record says whether the session moved. */
        if (session_find(d, sid))
            check_moved(d, sid, NULL, NULL);
    } else if (msg[0] == 'F') {
        oper_on_message(d, msg);
    } else if (msg[0] == 'H') {
        handed_back(d, msg);
    } else if (msg[0] == 'L') {
        lost_elsewhere(d, msg);
    } else {
        wait_on_message(d, msg);
    }
}

/* A request ended: with its answer (sent), its id= remembers it for a repeat, unless the answer is
 * ERR BACKEND, which changed nothing (or is undone): then, as unanswered, its repeats run again. */
static void request_ended(struct req *r, const char *body)
{
    if (r->idrec && body && strncmp(body, "ERR BACKEND", 11) != 0)
        reqid_answered(r, body);
    else if (r->idrec)
        reqid_dropped(r);
    share_end(r);
}

static const struct hooks hooks = {
    .session_ending = session_ending,
    .session_left = conn_session_ended,
    .session_quit = session_quit,
    .dispatch = cmd_dispatch,
    .run = cmd_run,
    .ended = request_ended,
    .hold_ended = hold_ended,
    .each_index = each_index,
    .check_moved = check_moved,
};

static const struct batch_listener batch_listener = {
    .sending = record_flush,
    .granted = wait_apply_grants,
};

static const struct redis_owner redis_owner = {
    .broadcast = conn_broadcast,
    .message = on_message,
    .renew = renew_now,
    .failover = renew_failover,
    .resubscribed = latch_recheck,
};

void daemon_init(struct dlockd *d)
{
    if ((d->base = event_base_new()) == NULL)
        fatalx("event_base_new failed");
    d->hooks = &hooks;
    d->started = now_ms();
    d->deadlines = deadlines_new(d->base);
    d->sessions = dict_new();
    d->waits = dict_new();
    d->deadlock = deadlock_new();
    d->names = dict_new();
    d->latches = dict_new();
    d->latch_peers = dict_new();
    conn_init(d);
    d->redis = redis_new(d, &redis_owner);
    batch_listen(d, &batch_listener);
}

void daemon_free(struct dlockd *d)
{
    batch_close(d);
    redis_close(d->redis);
    server_close(d);
    admin_stop(d);
    conn_close_all(d);
    share_close(d);
    session_free_all(d);
    wait_free_all(d);
    resume_free_all();
    ack_free(d);
    latch_free_all(d);
    record_free_all(d);
    redis_free(d->redis);
    if (d->watchdog)
        event_free(d->watchdog);
    if (d->renew_timer)
        event_free(d->renew_timer);
    dict_free(d->sessions);
    dict_free(d->waits);
    deadlock_free(d->deadlock);
    dict_free(d->names);
    dict_free(d->latches);
    dict_free(d->latch_peers);
    deadlines_free(d->deadlines);
    config_free(&d->cfg);
    event_base_free(d->base);
}
