/* api.c - libdlock's public calls: connect and close, one function per verb, the hold queries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

/* ---------------------------------------------------------------- handle */

static void handle_free(struct dlock *h)
{
    while (h->reqs) {
        struct dl_req *r = h->reqs;
        h->reqs = r->next;
        req_free(r);
    }
    while (h->evq) {
        struct dl_event *e = h->evq;
        h->evq = e->next;
        free(e->name);
        free(e->owner);
        free(e->reason);
        free(e);
    }
    holds_clear(&h->holds);
    proto_lines_free(&h->lines);
    if (h->fd >= 0)
        close(h->fd);
    if (h->wake[0] >= 0)
        close(h->wake[0]);
    if (h->wake[1] >= 0)
        close(h->wake[1]);
    free(h->line);
    free(h->out);
    memset(h->opt.password, 0, sizeof(h->opt.password));
    explicit_bzero(h->secret, sizeof(h->secret));
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* A copy of the options with the address list filled in. */
static int options_copy(struct dlock_options *dst, const dlock_options_t *o)
{
    const char *env = getenv("DLOCK_ADDR");

    if (o)
        *dst = *o;
    else
        dl_options_defaults(dst);
    if (dst->naddrs == 0 && dlock_options_add_address(dst, env && *env ? env : DL_DEFAULT_ADDR) < 0)
        return DLOCK_ERR_INVAL;
    return 0;
}

int dlock_connect(dlock_t **hp, const dlock_options_t *o)
{
    struct dlock *h;
    int rc;

    if (hp == NULL)
        return DLOCK_ERR_INVAL;
    *hp = NULL;
    if ((h = calloc(1, sizeof(*h))) == NULL)
        return DLOCK_ERR_NOMEM;
    h->fd = h->wake[0] = h->wake[1] = -1;
    h->evtail = &h->evq;
    h->first_rc = 1;
    pthread_mutex_init(&h->mu, NULL);
    if (dl_cond_init(&h->cv) < 0) {
        free(h);
        return DLOCK_ERR_SYSTEM;
    }
    if ((rc = options_copy(&h->opt, o)) != 0 || (rc = io_start(h)) != 0) {
        handle_free(h);
        return rc;
    }
    pthread_mutex_lock(&h->mu);
    while (h->first_rc == 1)
        pthread_cond_wait(&h->cv, &h->mu);
    rc = h->first_rc;
    pthread_mutex_unlock(&h->mu);
    if (rc != 0) {
        pthread_join(h->io, NULL);
        handle_free(h);
        return rc;
    }
    *hp = h;
    return 0;
}

/* Starts an API call: locks h->mu and counts the call. 0, or an error (h->mu not held). */
static int enter(struct dlock *h)
{
    if (h == NULL)
        return DLOCK_ERR_INVAL;
    if (h->io_started && pthread_equal(pthread_self(), h->io))
        return DLOCK_ERR_INVAL; /* a blocking call from the event callback would wait for itself */
    pthread_mutex_lock(&h->mu);
    if (h->closing) {
        pthread_mutex_unlock(&h->mu);
        return DLOCK_ERR_CLOSED;
    }
    h->active++;
    return 0;
}

static void leave(struct dlock *h)
{
    if (--h->active == 0 && h->closing)
        pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void dlock_shutdown(dlock_t *h)
{
    struct dl_req *r, *next;

    if (h == NULL || pthread_equal(pthread_self(), h->io))
        return;
    pthread_mutex_lock(&h->mu);
    if (h->closing) {
        pthread_mutex_unlock(&h->mu);
        return;
    }
    h->closing = 1;
    for (r = h->reqs; r; r = next) {
        next = r->next;
        req_finish(h, r, DLOCK_ERR_CLOSED);
    }
    if (h->up && !h->session_dead && (r = req_new(K_QUIT, "QUIT", DL_NO_WAIT)) != NULL) {
        /* QUIT releases every hold at once instead of when the session expires. */
        r->deadline = dl_now() + (h->opt.request_ms < 2000 ? h->opt.request_ms : 2000);
        req_submit(h, r);
        req_wait(h, r);
        if (!r->abandoned)
            req_free(r);
    }
    pthread_mutex_unlock(&h->mu);
}

void dlock_close(dlock_t *h)
{
    if (h == NULL || pthread_equal(pthread_self(), h->io))
        return;
    dlock_shutdown(h);
    pthread_mutex_lock(&h->mu);
    while (h->active > 0)
        pthread_cond_wait(&h->cv, &h->mu);
    h->stop = 1;
    pthread_mutex_unlock(&h->mu);
    io_wake(h);
    pthread_join(h->io, NULL);
    handle_free(h);
}

void dlock_debug_drop_connection(dlock_t *h)
{
    pthread_mutex_lock(&h->mu);
    if (h->fd >= 0)
        shutdown(h->fd, SHUT_RDWR);
    pthread_mutex_unlock(&h->mu);
}

int dlock_session(dlock_t *h, char *buf, size_t len)
{
    if (h == NULL || buf == NULL)
        return DLOCK_ERR_INVAL;
    pthread_mutex_lock(&h->mu);
    int rc = len > strlen(h->session) ? 0 : DLOCK_ERR_INVAL;
    if (rc == 0)
        memcpy(buf, h->session, strlen(h->session) + 1);
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* ---------------------------------------------------------------- requests */

/* What a finished request hands back to its caller. */
struct out {
    struct dlock_grant *g; /* n grants, or NULL */
    int *counts;           /* n counts, or NULL */
    char **json;           /* STATUS/INFO */
};

static void collect(struct dl_req *r, struct out *o)
{
    for (int i = 0; i < r->nnames; i++) {
        if (o->g) {
            o->g[i].token = r->tokens[i];
            o->g[i].count = r->counts[i];
            o->g[i].free = r->kind == K_ACQUIRE ? r->free_permits : -1;
        }
        if (o->counts)
            o->counts[i] = r->counts[i];
    }
    if (o->json) {
        *o->json = r->json;
        r->json = NULL;
    }
}

/* Runs r between enter() and leave(): send, wait, collect. Returns the rc, or counts[0] for counting verbs. */
static int exec(struct dlock *h, struct dl_req *r, struct out *o, int want_count)
{
    int rc;

    req_submit(h, r);
    rc = req_wait(h, r);
    if (rc == 0) {
        collect(r, o);
        if (want_count)
            rc = r->counts[0];
    }
    if (!r->abandoned)
        req_free(r);
    return rc;
}

/* Builds, checks and runs one request. body is the request without tag and wait=. */
static int run(struct dlock *h, struct dl_req *r, struct out *o, int want_count)
{
    int rc;

    if (r == NULL)
        return DLOCK_ERR_NOMEM;
    if (strlen(r->body) + 64 > DL_LINE_MAX) {
        req_free(r);
        return DLOCK_ERR_TOOBIG;
    }
    if ((rc = enter(h)) != 0) {
        req_free(r);
        return rc;
    }
    rc = exec(h, r, o, want_count);
    leave(h);
    return rc;
}

static int valid_wait(long long wait_ms)
{
    return wait_ms == DLOCK_WAIT_INF || (wait_ms >= 0 && wait_ms <= PROTO_DURATION_MAX);
}

static int valid_names(const char *const *names, int n)
{
    if (names == NULL || n < 1 || n > PROTO_MAX_NAMES)
        return 0;
    for (int i = 0; i < n; i++)
        if (names[i] == NULL || !proto_valid_name(names[i]))
            return 0;
    return 1;
}

/* The owner to use: the given one, or the calling thread's. NULL when invalid. */
static const char *pick_owner(const char *owner)
{
    if (owner == NULL)
        return dl_thread_owner();
    return dl_valid_owner(owner) ? owner : NULL;
}

/* "VERB n1 n2 ..." followed by the formatted tail; NULL out of memory. */
static char *body_of(const char *verb, const char *const *names, int n, const char *flags, long long lease_ms,
                     const char *owner, const char *extra)
{
    char *b = NULL;
    size_t len = 0, cap = 0;
    int bad = dl_appendf(&b, &len, &cap, "%s", verb);

    for (int i = 0; i < n && !bad; i++)
        bad = dl_appendf(&b, &len, &cap, " %s", names[i]);
    if (!bad && flags && *flags)
        bad = dl_appendf(&b, &len, &cap, "%s", flags);
    if (!bad && extra && *extra)
        bad = dl_appendf(&b, &len, &cap, " %s", extra);
    if (!bad && lease_ms > 0)
        bad = dl_appendf(&b, &len, &cap, " lease=%lld", lease_ms);
    if (!bad && owner && *owner)
        bad = dl_appendf(&b, &len, &cap, " owner=%s", owner);
    if (bad) {
        free(b);
        return NULL;
    }
    return b;
}

/* A request about names and owner; NULL out of memory. */
static struct dl_req *make(enum dl_kind kind, char *body, long long wait_ms, const char *const *names, int n,
                           const char *owner)
{
    struct dl_req *r = body ? req_new(kind, body, wait_ms) : NULL;

    free(body);
    if (r && req_set_subject(r, names, n, owner) < 0) {
        req_free(r);
        r = NULL;
    }
    return r;
}

/* ---------------------------------------------------------------- locks */

int dlock_lock_ex(dlock_t *h, const char *const *names, int n, unsigned flags, long long wait_ms, long long lease_ms,
                  const char *owner, struct dlock_grant *g)
{
    struct out o = {.g = g};
    struct dl_req *r;

    owner = pick_owner(owner);
    if (!valid_names(names, n) || (flags & ~DLOCK_SHARED) || !valid_wait(wait_ms) || lease_ms < 0 ||
        lease_ms > PROTO_DURATION_MAX || owner == NULL)
        return DLOCK_ERR_INVAL;
    r = make(K_LOCK, body_of("LOCK", names, n, (flags & DLOCK_SHARED) ? " shared" : "", lease_ms, owner, NULL),
             wait_ms, names, n, owner);
    if (r) {
        r->mode = (flags & DLOCK_SHARED) ? M_SHARED : M_EXCL;
        r->flags = flags;
    }
    return run(h, r, &o, 0);
}

int dlock_lock(dlock_t *h, const char *name, unsigned flags, long long wait_ms, struct dlock_grant *g)
{
    return dlock_lock_ex(h, &name, 1, flags, wait_ms, 0, NULL, g);
}

int dlock_trylock(dlock_t *h, const char *name, unsigned flags, struct dlock_grant *g)
{
    return dlock_lock_ex(h, &name, 1, flags, 0, 0, NULL, g);
}

/* The local hold an UNLOCK of name acts on, or NULL. */
static struct dl_hold *unlock_target(struct dlock *h, const char *name, const char *owner, unsigned flags)
{
    struct dl_hold *x = (flags & DLOCK_SHARED) ? NULL : holds_find(&h->holds, name, owner, M_EXCL);

    return x ? x : holds_find(&h->holds, name, owner, M_SHARED);
}

int dlock_unlock_ex(dlock_t *h, const char *const *names, int n, unsigned flags, const char *owner, int *counts)
{
    struct out o = {.counts = counts};
    const char *left[PROTO_MAX_NAMES];
    int rc, nleft = 0;
    struct dl_req *r;

    owner = pick_owner(owner);
    if (!valid_names(names, n) || (flags & ~(DLOCK_SHARED | DLOCK_ALL)) || owner == NULL)
        return DLOCK_ERR_INVAL;
    if ((rc = enter(h)) != 0)
        return rc;
    for (int i = 0; i < n; i++) {
        struct dl_hold *hd = unlock_target(h, names[i], owner, flags);

        if (hd && hd->lost)
            holds_remove(&h->holds, hd); /* the application has now heard about the loss */
        else
            left[nleft++] = names[i];
        if (counts)
            counts[i] = 0;
    }
    if (nleft == 0) {
        leave(h);
        return DLOCK_ERR_LOST;
    }
    r = make(K_UNLOCK,
             body_of("UNLOCK", left, nleft, (flags & DLOCK_SHARED) ? ((flags & DLOCK_ALL) ? " shared all" : " shared")
                                                                   : ((flags & DLOCK_ALL) ? " all" : ""),
                     0, owner, NULL),
             DL_NO_WAIT, left, nleft, owner);
    if (r == NULL || strlen(r->body) + 64 > DL_LINE_MAX) {
        rc = r ? DLOCK_ERR_TOOBIG : DLOCK_ERR_NOMEM;
        req_free(r);
    } else {
        r->flags = flags;
        r->mode = (flags & DLOCK_SHARED) ? M_SHARED : M_EXCL;
        o.counts = nleft == n ? counts : NULL; /* with lost names the counts no longer line up */
        rc = exec(h, r, &o, 1);
    }
    leave(h);
    /* Lost names were released too, in a way: the others are released now, but the caller must hear of the loss. */
    return nleft < n && rc >= 0 ? DLOCK_ERR_LOST : rc;
}

int dlock_unlock(dlock_t *h, const char *name, unsigned flags)
{
    return dlock_unlock_ex(h, &name, 1, flags, NULL, NULL);
}

/* ---------------------------------------------------------------- semaphores */

int dlock_acquire_ex(dlock_t *h, const char *name, int limit, int permits, long long wait_ms, long long lease_ms,
                     const char *owner, struct dlock_grant *g)
{
    struct out o = {.g = g};
    char extra[64];
    struct dl_req *r;

    owner = pick_owner(owner);
    if (!valid_names(&name, 1) || limit < 1 || permits < 1 || permits > limit || !valid_wait(wait_ms) ||
        lease_ms < 0 || lease_ms > PROTO_DURATION_MAX || owner == NULL)
        return DLOCK_ERR_INVAL;
    snprintf(extra, sizeof(extra), "limit=%d permits=%d", limit, permits);
    r = make(K_ACQUIRE, body_of("ACQUIRE", &name, 1, NULL, lease_ms, owner, extra), wait_ms, &name, 1, owner);
    if (r) {
        r->mode = M_SEM;
        r->permits = permits;
    }
    return run(h, r, &o, 0);
}

int dlock_acquire(dlock_t *h, const char *name, int limit, int permits, long long wait_ms, struct dlock_grant *g)
{
    return dlock_acquire_ex(h, name, limit, permits, wait_ms, 0, NULL, g);
}

int dlock_release_ex(dlock_t *h, const char *name, int permits, const char *owner)
{
    struct out o = {0};
    char extra[32];
    struct dl_hold *hd;
    struct dl_req *r;
    int rc;

    owner = pick_owner(owner);
    if (!valid_names(&name, 1) || permits < 1 || owner == NULL)
        return DLOCK_ERR_INVAL;
    snprintf(extra, sizeof(extra), "permits=%d", permits);
    r = make(K_RELEASE, body_of("RELEASE", &name, 1, NULL, 0, owner, extra), DL_NO_WAIT, &name, 1, owner);
    if (r == NULL)
        return DLOCK_ERR_NOMEM;
    r->mode = M_SEM;
    r->permits = permits;
    if ((rc = enter(h)) != 0) {
        req_free(r);
        return rc;
    }
    if ((hd = holds_find(&h->holds, name, owner, M_SEM)) != NULL && hd->lost) {
        holds_remove(&h->holds, hd);
        req_free(r);
        rc = DLOCK_ERR_LOST;
    } else {
        rc = exec(h, r, &o, 1);
    }
    leave(h);
    return rc;
}

int dlock_release(dlock_t *h, const char *name, int permits)
{
    return dlock_release_ex(h, name, permits, NULL);
}

/* ---------------------------------------------------------------- latches */

int dlock_latch(dlock_t *h, const char *name, int count, long long ttl_ms)
{
    struct out o = {0};
    char extra[64];
    int n;

    if (!valid_names(&name, 1) || count < 0 || ttl_ms < 0 || ttl_ms > PROTO_DURATION_MAX)
        return DLOCK_ERR_INVAL;
    n = snprintf(extra, sizeof(extra), "count=%d", count);
    if (ttl_ms > 0)
        snprintf(extra + n, sizeof(extra) - (size_t)n, " ttl=%lld", ttl_ms);
    return run(h, make(K_LATCH, body_of("LATCH", &name, 1, NULL, 0, NULL, extra), DL_NO_WAIT, &name, 1, ""), &o, 1);
}

int dlock_countdown(dlock_t *h, const char *name, int n)
{
    struct out o = {0};
    char extra[32];

    if (!valid_names(&name, 1) || n < 1)
        return DLOCK_ERR_INVAL;
    snprintf(extra, sizeof(extra), "n=%d", n);
    return run(h, make(K_COUNTDOWN, body_of("COUNTDOWN", &name, 1, NULL, 0, NULL, extra), DL_NO_WAIT, &name, 1, ""),
               &o, 1);
}

int dlock_await(dlock_t *h, const char *name, long long wait_ms)
{
    struct out o = {0};

    if (!valid_names(&name, 1) || !valid_wait(wait_ms))
        return DLOCK_ERR_INVAL;
    return run(h, make(K_AWAIT, body_of("AWAIT", &name, 1, NULL, 0, NULL, NULL), wait_ms, &name, 1, ""), &o, 0);
}

/* ---------------------------------------------------------------- introspection */

int dlock_status(dlock_t *h, const char *name, char **json)
{
    struct out o = {.json = json};

    if (!valid_names(&name, 1) || json == NULL)
        return DLOCK_ERR_INVAL;
    *json = NULL;
    return run(h, make(K_STATUS, body_of("STATUS", &name, 1, NULL, 0, NULL, NULL), DL_NO_WAIT, &name, 1, ""), &o,
               0);
}

int dlock_info(dlock_t *h, char **json)
{
    struct out o = {.json = json};

    if (json == NULL)
        return DLOCK_ERR_INVAL;
    *json = NULL;
    return run(h, make(K_INFO, strdup("INFO"), DL_NO_WAIT, NULL, 0, ""), &o, 0);
}

int dlock_ping(dlock_t *h)
{
    struct out o = {0};

    return run(h, make(K_PING, strdup("PING"), DL_NO_WAIT, NULL, 0, ""), &o, 0);
}

int dlock_held_ex(dlock_t *h, const char *name, const char *owner, unsigned flags)
{
    static const enum dl_mode order[] = {M_EXCL, M_SHARED, M_SEM};
    int rc = 0;

    owner = pick_owner(owner);
    if (h == NULL || name == NULL || owner == NULL || (flags & ~DLOCK_SHARED))
        return DLOCK_ERR_INVAL;
    pthread_mutex_lock(&h->mu);
    for (size_t i = (flags & DLOCK_SHARED) ? 1 : 0; i < ((flags & DLOCK_SHARED) ? 2 : 3); i++) {
        struct dl_hold *hd = holds_find(&h->holds, name, owner, order[i]);

        if (hd && !hd->lost) {
            rc = hd->count;
            break;
        }
        if (hd)
            rc = DLOCK_ERR_LOST;
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

int dlock_held(dlock_t *h, const char *name)
{
    return dlock_held_ex(h, name, NULL, 0);
}
