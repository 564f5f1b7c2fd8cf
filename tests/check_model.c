/* check_model.c - randomized model test: random LOCK/UNLOCK/ACQUIRE/RELEASE/STATUS requests against a real dlockd, each reply compared with an in-memory model of the semantics. */
#include "harness.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Every request uses wait=0 (the default), so no request ever queues and
 * the model is exact: a request either fits the holds the model knows of
 * or it is BUSY. The model:
 *  - locks: a hold belongs to (session, owner, mode); an exclusive request
 *    conflicts with any hold of another (session, owner), a shared request
 *    with another (session, owner)'s exclusive hold; asking again for a
 *    mode one holds is reentrant (count + 1, the held token); an upgrade
 *    or downgrade is a new hold in the other mode; a new hold's token is
 *    greater than every token granted before for that name. UNLOCK without
 *    `shared` drops from the exclusive hold if there is one, else from the
 *    shared one; `all` drops every count. Several names: all or nothing.
 *  - semaphores: permits of a (session, owner) are one hold with one
 *    token; at most `limit` permits are held; a different limit while held
 *    is ERR MISMATCH; an idle semaphore takes the limit of the next ACQUIRE.
 *  - type safety: a name in use as a lock is ERR WRONGTYPE for ACQUIRE,
 *    AWAIT and COUNTDOWN, and the other way round.
 * After a divergence the model is resynchronised from STATUS, so one bug
 * does not count as a cascade of divergences.
 */

#define NL 4 /* lock names */
#define NS 2 /* semaphore names */
#define NC 4 /* sessions, one connection each */
#define NO 2 /* owners per session */
#define SESSION_TTL_MS 600000 /* of every session: the upper bound of BUSY ttl= (longer than lock-lease) */
#define MAX_REPORTED 30 /* divergences printed in full */

static const char *const LNAME[NL] = {"m.a", "m.b", "m.c", "m.d"};
static const char *const SNAME[NS] = {"m.s1", "m.s2"};
static const char *const OWNER[NO] = {"", "t1"}; /* "": the default owner, sent without owner= */
static const char *const MODE[2] = {"exclusive", "shared"};

struct hold {
    int count;      /* 0: no hold */
    long long tok;
};

struct permits {
    int n;          /* 0: no hold */
    long long tok;
};

static struct hold L[NL][NC][NO][2]; /* [name][session][owner][0 exclusive, 1 shared] */
static long long Llast[NL];          /* greatest token granted per lock name */
static struct permits S[NS][NC][NO];
static int Slimit[NS];
static long long Slast[NS];

static struct h_conn *C[NC];

static uint64_t rng;
static long long nops, ndiv, ntagged;
static int need_resync;
static char cur_req[512]; /* the request being checked, for messages */

/* Reply statistics: [verb][outcome]. */
enum { V_LOCK, V_LOCK2, V_UNLOCK, V_UNLOCK2, V_ACQUIRE, V_RELEASE, V_STATUS, V_PROBE, V_N };
enum { O_OK, O_BUSY, O_NOTHELD, O_MISMATCH, O_WRONGTYPE, O_N };
static const char *const VNAME[V_N] = {"LOCK", "LOCK x2", "UNLOCK", "UNLOCK x2", "ACQUIRE", "RELEASE", "STATUS", "probe"};
static long long stats[V_N][O_N];

static uint64_t next_rand(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int rnd(int n)
{
    return (int)(next_rand() % (uint64_t)n);
}

/* Records a divergence: what was sent, what came back, what the model expected. */
static void diverge(const char *got, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void diverge(const char *got, const char *fmt, ...)
{
    char want[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(want, sizeof want, fmt, ap);
    va_end(ap);
    ndiv++;
    need_resync = 1;
    if (ndiv <= MAX_REPORTED)
        fprintf(stderr, "model: divergence at operation %lld: sent '%s', got '%s', expected %s\n", nops, cur_req,
                got ? got : "(nothing)", want);
}

/* Sends req on session ci (tagged at random) and returns the reply without its tag, or NULL. */
static const char *send_req(int ci, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *send_req(int ci, const char *fmt, ...)
{
    char req[400], tag[32] = "";
    const char *r;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(req, sizeof req, fmt, ap);
    va_end(ap);
    if (rnd(4) == 0) {
        snprintf(tag, sizeof tag, "#g%lld", nops);
        ntagged++;
    }
    snprintf(cur_req, sizeof cur_req, "[s%d] %s%s%s", ci, tag, tag[0] ? " " : "", req);
    r = h_request(C[ci], H_TIMEOUT, "%s%s%s", tag, tag[0] ? " " : "", req);
    if (r == NULL)
        return NULL;
    if (tag[0] != '\0') {
        size_t n = strlen(tag);

        if (strncmp(r, tag, n) != 0 || r[n] != ' ') {
            diverge(r, "a reply tagged %s", tag);
            return NULL;
        }
        return r + n + 1;
    }
    if (r[0] == '#') {
        diverge(r, "an untagged reply");
        return NULL;
    }
    return r;
}

static int outcome(const char *r)
{
    if (r == NULL)
        return O_N;
    if (strncmp(r, "OK", 2) == 0)
        return O_OK;
    if (strncmp(r, "BUSY", 4) == 0)
        return O_BUSY;
    if (strncmp(r, "ERR NOTHELD", 11) == 0)
        return O_NOTHELD;
    if (strncmp(r, "ERR MISMATCH", 12) == 0)
        return O_MISMATCH;
    if (strncmp(r, "ERR WRONGTYPE", 13) == 0)
        return O_WRONGTYPE;
    return O_N;
}

static void count_stat(int verb, const char *r)
{
    int o = outcome(r);

    if (o < O_N)
        stats[verb][o]++;
}

static const char *owner_opt(int oi)
{
    static char buf[40];

    if (OWNER[oi][0] == '\0')
        return "";
    snprintf(buf, sizeof buf, " owner=%s", OWNER[oi]);
    return buf;
}

static int lock_in_use(int n)
{
    for (int c = 0; c < NC; c++)
        for (int o = 0; o < NO; o++)
            if (L[n][c][o][0].count > 0 || L[n][c][o][1].count > 0)
                return 1;
    return 0;
}

static int sem_used(int s)
{
    int used = 0;

    for (int c = 0; c < NC; c++)
        for (int o = 0; o < NO; o++)
            used += S[s][c][o].n;
    return used;
}

/* Sessions (bit mask) holding name n in a mode that conflicts with (ci, oi) asking mode m. */
static unsigned conflicts(int n, int ci, int oi, int m)
{
    unsigned mask = 0;

    for (int c = 0; c < NC; c++)
        for (int o = 0; o < NO; o++) {
            if (c == ci && o == oi)
                continue;
            for (int m2 = 0; m2 < 2; m2++)
                if (L[n][c][o][m2].count > 0 && (m == 0 || m2 == 0))
                    mask |= 1u << c;
        }
    return mask;
}

/* Checks "BUSY holder=<name of a session in mask> ttl=<0..the sessions' ttl>". */
static void check_busy_lock(const char *r, unsigned mask)
{
    char holder[64];
    long long ttl;
    int ok = 0;

    if (r != NULL && h_match(r, "BUSY holder=%w ttl=%d") && h_kv(r, "holder", holder, sizeof holder) == 0) {
        ttl = h_kv_int(r, "ttl");
        for (int c = 0; c < NC; c++) {
            char name[16];

            snprintf(name, sizeof name, "s%d", c);
            if ((mask & (1u << c)) && strcmp(holder, name) == 0)
                ok = 1;
        }
        ok = ok && ttl >= 0 && ttl <= SESSION_TTL_MS;
    }
    if (!ok) {
        char want[64] = "";

        for (int c = 0; c < NC; c++)
            if (mask & (1u << c))
                snprintf(want + strlen(want), sizeof want - strlen(want), "%ss%d", want[0] ? "|" : "", c);
        diverge(r, "BUSY holder=%s ttl=0..%d", want, SESSION_TTL_MS);
    }
}

/* ---- operations */

static void op_lock(int ci, int oi, int n1, int n2, int m)
{
    int names[2] = {n1, n2}, k = n2 < 0 ? 1 : 2;
    int re[2];
    unsigned mask = 0;
    const char *r;

    for (int i = 0; i < k; i++) {
        re[i] = L[names[i]][ci][oi][m].count > 0;
        if (!re[i])
            mask |= conflicts(names[i], ci, oi, m);
    }
    if (k == 1)
        r = send_req(ci, "LOCK %s%s%s", LNAME[n1], m ? " shared" : "", owner_opt(oi));
    else
        r = send_req(ci, "LOCK %s %s%s%s", LNAME[n1], LNAME[n2], m ? " shared" : "", owner_opt(oi));
    count_stat(k == 1 ? V_LOCK : V_LOCK2, r);
    if (mask != 0) {
        check_busy_lock(r, mask);
        return;
    }
    if (k == 1) {
        struct hold *h = &L[n1][ci][oi][m];

        if (r == NULL || !h_match(r, "OK token=%d count=%d")) {
            diverge(r, "OK token=... count=%d", h->count + 1);
            return;
        }
        long long t = h_kv_int(r, "token"), cnt = h_kv_int(r, "count");

        if (re[0] ? t != h->tok : t <= Llast[n1])
            diverge(r, re[0] ? "the held token %lld" : "a token greater than %lld", re[0] ? h->tok : Llast[n1]);
        else if (cnt != h->count + 1)
            diverge(r, "count=%d", h->count + 1);
        else {
            if (!re[0]) {
                h->tok = t;
                Llast[n1] = t;
            }
            h->count++;
        }
        return;
    }
    long long t[2], cnt[2];
    char tv[80], cv[80];

    if (r == NULL || !h_match(r, "OK tokens=%d,%d counts=%d,%d") || h_kv(r, "tokens", tv, sizeof tv) < 0 ||
        h_kv(r, "counts", cv, sizeof cv) < 0 || sscanf(tv, "%lld,%lld", &t[0], &t[1]) != 2 ||
        sscanf(cv, "%lld,%lld", &cnt[0], &cnt[1]) != 2) {
        diverge(r, "OK tokens=...,... counts=%d,%d", L[n1][ci][oi][m].count + 1, L[n2][ci][oi][m].count + 1);
        return;
    }
    for (int i = 0; i < 2; i++) {
        struct hold *h = &L[names[i]][ci][oi][m];

        if (re[i] ? t[i] != h->tok : t[i] <= Llast[names[i]]) {
            diverge(r, "for %s %s %lld", LNAME[names[i]], re[i] ? "the held token" : "a token greater than",
                    re[i] ? h->tok : Llast[names[i]]);
            return;
        }
        if (cnt[i] != h->count + 1) {
            diverge(r, "count %d for %s", h->count + 1, LNAME[names[i]]);
            return;
        }
    }
    for (int i = 0; i < 2; i++) {
        struct hold *h = &L[names[i]][ci][oi][m];

        if (!re[i]) {
            h->tok = t[i];
            Llast[names[i]] = t[i];
        }
        h->count++;
    }
}

static void op_unlock(int ci, int oi, int n1, int n2, int shared, int all)
{
    int names[2] = {n1, n2}, k = n2 < 0 ? 1 : 2, mode[2], left[2] = {0, 0}, held = 1;
    char want[64];
    const char *r;

    for (int i = 0; i < k; i++) {
        mode[i] = shared ? 1 : (L[names[i]][ci][oi][0].count > 0 ? 0 : 1);
        if (L[names[i]][ci][oi][mode[i]].count == 0)
            held = 0;
        else
            left[i] = all ? 0 : L[names[i]][ci][oi][mode[i]].count - 1;
    }
    if (k == 1)
        r = send_req(ci, "UNLOCK %s%s%s%s", LNAME[n1], shared ? " shared" : "", owner_opt(oi), all ? " all" : "");
    else
        r = send_req(ci, "UNLOCK %s %s%s%s%s", LNAME[n1], LNAME[n2], shared ? " shared" : "", owner_opt(oi),
                     all ? " all" : "");
    count_stat(k == 1 ? V_UNLOCK : V_UNLOCK2, r);
    if (!held) {
        if (r == NULL || !h_match(r, "ERR NOTHELD%*"))
            diverge(r, "ERR NOTHELD");
        return;
    }
    if (k == 1)
        snprintf(want, sizeof want, "OK count=%d", left[0]);
    else
        snprintf(want, sizeof want, "OK counts=%d,%d", left[0], left[1]);
    if (r == NULL || strcmp(r, want) != 0) {
        diverge(r, "'%s'", want);
        return;
    }
    for (int i = 0; i < k; i++)
        L[names[i]][ci][oi][mode[i]].count = left[i];
}

static void op_acquire(int ci, int oi, int s, int limit, int k, int omit)
{
    int in_use = sem_used(s) > 0, lim = in_use ? Slimit[s] : limit, fr = lim - sem_used(s);
    struct permits *p = &S[s][ci][oi];
    char want[96];
    const char *r;

    r = send_req(ci, "ACQUIRE %s limit=%d%s%.0d%s", SNAME[s], limit, omit ? "" : " permits=", omit ? 0 : k,
                 owner_opt(oi));
    count_stat(V_ACQUIRE, r);
    if (in_use && limit != Slimit[s]) {
        if (r == NULL || !h_match(r, "ERR MISMATCH%*"))
            diverge(r, "ERR MISMATCH (limit is %d)", Slimit[s]);
        return;
    }
    if (k > fr) {
        snprintf(want, sizeof want, "BUSY free=%d", fr);
        if (r == NULL || strcmp(r, want) != 0)
            diverge(r, "'%s'", want);
        return;
    }
    if (p->n > 0) {
        snprintf(want, sizeof want, "OK token=%lld held=%d free=%d", p->tok, p->n + k, fr - k);
        if (r == NULL || strcmp(r, want) != 0) {
            diverge(r, "'%s'", want);
            return;
        }
    } else {
        char pat[64];
        long long t;

        snprintf(pat, sizeof pat, "OK token=%%d held=%d free=%d", k, fr - k);
        if (r == NULL || !h_match(r, pat)) {
            diverge(r, "'OK token=(> %lld) held=%d free=%d'", Slast[s], k, fr - k);
            return;
        }
        t = h_kv_int(r, "token");
        if (t <= Slast[s]) {
            diverge(r, "a token greater than %lld", Slast[s]);
            return;
        }
        p->tok = t;
        Slast[s] = t;
    }
    p->n += k;
    Slimit[s] = lim;
}

static void op_release(int ci, int oi, int s, int k, int omit)
{
    struct permits *p = &S[s][ci][oi];
    char want[64];
    const char *r;

    r = send_req(ci, "RELEASE %s%s%.0d%s", SNAME[s], omit ? "" : " permits=", omit ? 0 : k, owner_opt(oi));
    count_stat(V_RELEASE, r);
    if (p->n == 0 || k > p->n) {
        if (r == NULL || !h_match(r, "ERR NOTHELD%*"))
            diverge(r, "ERR NOTHELD (holds %d)", p->n);
        return;
    }
    snprintf(want, sizeof want, "OK held=%d free=%d", p->n - k, Slimit[s] - (sem_used(s) - k));
    if (r == NULL || strcmp(r, want) != 0) {
        diverge(r, "'%s'", want);
        return;
    }
    p->n -= k;
}

/* ---- STATUS: holders parsed from the JSON */

struct jholder {
    int ci, oi, mode;      /* -1 when unknown */
    long long count, tok;  /* count: "count" (locks) or "permits" (semaphores) */
};

static int json_str(const char *obj, const char *key, char *out, size_t cap)
{
    char needle[40];
    const char *p, *e;

    snprintf(needle, sizeof needle, "\"%s\":\"", key);
    p = strstr(obj, needle);
    if (p == NULL)
        return -1;
    p += strlen(needle);
    e = strchr(p, '"');
    if (e == NULL || (size_t)(e - p) >= cap)
        return -1;
    memcpy(out, p, (size_t)(e - p));
    out[e - p] = '\0';
    return 0;
}

/* Parses the "holders" array of a STATUS reply; returns the number of holders or -1 when malformed. */
static int parse_holders(const char *json, struct jholder *out, int max)
{
    const char *p = strstr(json, "\"holders\":[");
    int n = 0;

    if (p == NULL)
        return -1;
    p += strlen("\"holders\":[");
    while (*p == '{') {
        const char *e = strchr(p, '}');
        char obj[1024], s[64];

        if (e == NULL || n >= max || (size_t)(e - p) + 2 > sizeof obj)
            return -1;
        memcpy(obj, p, (size_t)(e - p + 1));
        obj[e - p + 1] = '\0';
        out[n].ci = out[n].oi = out[n].mode = -1;
        if (json_str(obj, "session", s, sizeof s) == 0)
            for (int c = 0; c < NC; c++)
                if (strcmp(s, C[c]->session) == 0)
                    out[n].ci = c;
        if (json_str(obj, "owner", s, sizeof s) == 0)
            for (int o = 0; o < NO; o++)
                if (strcmp(s, OWNER[o]) == 0)
                    out[n].oi = o;
        if (json_str(obj, "mode", s, sizeof s) == 0)
            out[n].mode = strcmp(s, "exclusive") == 0 ? 0 : strcmp(s, "shared") == 0 ? 1 : -1;
        out[n].count = h_json_int(obj, "count");
        if (out[n].count == LLONG_MIN)
            out[n].count = h_json_int(obj, "permits");
        out[n].tok = h_json_int(obj, "token");
        n++;
        p = e + 1;
        if (*p == ',')
            p++;
    }
    return *p == ']' ? n : -1;
}

/* STATUS of lock name n compared with the model; resync: take the reply as the truth instead. */
static void status_lock(int ci, int n, int resync)
{
    struct jholder jh[NC * NO * 2];
    int nh, want = 0;
    const char *r = send_req(ci, "STATUS %s", LNAME[n]);

    if (!resync)
        count_stat(V_STATUS, r);
    if (r == NULL || strncmp(r, "OK {", 4) != 0 || (nh = parse_holders(r, jh, NC * NO * 2)) < 0) {
        diverge(r, "OK {...\"holders\":[...]...}");
        return;
    }
    if (resync) {
        memset(L[n], 0, sizeof L[n]);
        for (int i = 0; i < nh; i++) {
            if (jh[i].ci < 0 || jh[i].oi < 0 || jh[i].mode < 0)
                continue;
            L[n][jh[i].ci][jh[i].oi][jh[i].mode].count = (int)jh[i].count;
            L[n][jh[i].ci][jh[i].oi][jh[i].mode].tok = jh[i].tok;
            if (jh[i].tok > Llast[n])
                Llast[n] = jh[i].tok;
        }
        return;
    }
    for (int c = 0; c < NC; c++)
        for (int o = 0; o < NO; o++)
            for (int m = 0; m < 2; m++)
                want += L[n][c][o][m].count > 0;
    if (want == 0) {
        if (!h_json_has(r, "\"type\":null") || nh != 0 || !h_json_has(r, "\"waiters\":0"))
            diverge(r, "an unused name (type null, no holders)");
        return;
    }
    if (!h_json_has(r, "\"type\":\"lock\"") || !h_json_has(r, "\"waiters\":0") || nh != want) {
        diverge(r, "type lock, no waiters, %d holders", want);
        return;
    }
    for (int i = 0; i < nh; i++) {
        const struct hold *h;

        if (jh[i].ci < 0 || jh[i].oi < 0 || jh[i].mode < 0) {
            diverge(r, "only holders of the model's sessions and owners");
            return;
        }
        h = &L[n][jh[i].ci][jh[i].oi][jh[i].mode];
        if (h->count != jh[i].count || h->tok != jh[i].tok) {
            diverge(r, "s%d owner '%s' %s: count %d token %lld", jh[i].ci, OWNER[jh[i].oi], MODE[jh[i].mode], h->count,
                    h->tok);
            return;
        }
    }
}

static void status_sem(int ci, int s, int resync)
{
    struct jholder jh[NC * NO];
    int nh, want = 0;
    const char *r = send_req(ci, "STATUS %s", SNAME[s]);

    if (!resync)
        count_stat(V_STATUS, r);
    if (r == NULL || strncmp(r, "OK {", 4) != 0 || (nh = parse_holders(r, jh, NC * NO)) < 0) {
        diverge(r, "OK {...\"holders\":[...]...}");
        return;
    }
    if (resync) {
        memset(S[s], 0, sizeof S[s]);
        for (int i = 0; i < nh; i++) {
            if (jh[i].ci < 0 || jh[i].oi < 0)
                continue;
            S[s][jh[i].ci][jh[i].oi].n = (int)jh[i].count;
            S[s][jh[i].ci][jh[i].oi].tok = jh[i].tok;
            if (jh[i].tok > Slast[s])
                Slast[s] = jh[i].tok;
        }
        if (nh > 0 && h_json_int(r, "limit") > 0)
            Slimit[s] = (int)h_json_int(r, "limit");
        return;
    }
    for (int c = 0; c < NC; c++)
        for (int o = 0; o < NO; o++)
            want += S[s][c][o].n > 0;
    if (want == 0) {
        if (!h_json_has(r, "\"type\":null") || nh != 0)
            diverge(r, "an unused name (type null, no holders)");
        return;
    }
    if (!h_json_has(r, "\"type\":\"semaphore\"") || !h_json_has(r, "\"waiters\":0") || nh != want ||
        h_json_int(r, "limit") != Slimit[s] || h_json_int(r, "free") != Slimit[s] - sem_used(s)) {
        diverge(r, "type semaphore, no waiters, %d holders, limit %d, free %d", want, Slimit[s],
                Slimit[s] - sem_used(s));
        return;
    }
    for (int i = 0; i < nh; i++) {
        const struct permits *p;

        if (jh[i].ci < 0 || jh[i].oi < 0) {
            diverge(r, "only holders of the model's sessions and owners");
            return;
        }
        p = &S[s][jh[i].ci][jh[i].oi];
        if (p->n != jh[i].count || p->tok != jh[i].tok) {
            diverge(r, "s%d owner '%s': permits %d token %lld", jh[i].ci, OWNER[jh[i].oi], p->n, p->tok);
            return;
        }
    }
}

/* A request of the wrong type on a name: WRONGTYPE while the name is in use as the other type. */
static void op_probe(int ci, int oi)
{
    int kind = rnd(6), n = rnd(NL), s = rnd(NS);
    const char *r;

    switch (kind) {
    case 0: /* ACQUIRE on a lock name: only while in use (an idle one would become a semaphore) */
        if (!lock_in_use(n)) {
            status_lock(ci, n, 0);
            return;
        }
        r = send_req(ci, "ACQUIRE %s limit=3%s", LNAME[n], owner_opt(oi));
        count_stat(V_PROBE, r);
        if (r == NULL || !h_match(r, "ERR WRONGTYPE%*"))
            diverge(r, "ERR WRONGTYPE (a lock in use)");
        return;
    case 1: /* LOCK on a semaphore name */
        if (sem_used(s) == 0) {
            status_sem(ci, s, 0);
            return;
        }
        r = send_req(ci, "LOCK %s%s%s", SNAME[s], rnd(2) ? " shared" : "", owner_opt(oi));
        count_stat(V_PROBE, r);
        if (r == NULL || !h_match(r, "ERR WRONGTYPE%*"))
            diverge(r, "ERR WRONGTYPE (a semaphore in use)");
        return;
    case 2: /* RELEASE on a lock name: the caller holds no permits of it either way */
        r = send_req(ci, "RELEASE %s%s", LNAME[n], owner_opt(oi));
        count_stat(V_PROBE, r);
        if (r == NULL || !(h_match(r, "ERR NOTHELD%*") || (lock_in_use(n) && h_match(r, "ERR WRONGTYPE%*"))))
            diverge(r, "ERR NOTHELD%s", lock_in_use(n) ? " or ERR WRONGTYPE" : "");
        return;
    case 3: /* UNLOCK on a semaphore name */
        r = send_req(ci, "UNLOCK %s%s", SNAME[s], owner_opt(oi));
        count_stat(V_PROBE, r);
        if (r == NULL || !(h_match(r, "ERR NOTHELD%*") || (sem_used(s) > 0 && h_match(r, "ERR WRONGTYPE%*"))))
            diverge(r, "ERR NOTHELD%s", sem_used(s) > 0 ? " or ERR WRONGTYPE" : "");
        return;
    case 4: { /* COUNTDOWN on either */
        int in_use = rnd(2) ? lock_in_use(n) : -1;
        const char *name = in_use >= 0 ? LNAME[n] : SNAME[s];

        if (in_use < 0)
            in_use = sem_used(s) > 0;
        r = send_req(ci, "COUNTDOWN %s", name);
        count_stat(V_PROBE, r);
        if (r == NULL || !h_match(r, in_use ? "ERR WRONGTYPE%*" : "OK count=0"))
            diverge(r, "%s", in_use ? "ERR WRONGTYPE" : "OK count=0 (no latch)");
        return;
    }
    default: { /* AWAIT on either */
        int in_use = rnd(2) ? lock_in_use(n) : -1;
        const char *name = in_use >= 0 ? LNAME[n] : SNAME[s];

        if (in_use < 0)
            in_use = sem_used(s) > 0;
        r = send_req(ci, "AWAIT %s", name);
        count_stat(V_PROBE, r);
        if (r == NULL || !h_match(r, in_use ? "ERR WRONGTYPE%*" : "OK"))
            diverge(r, "%s", in_use ? "ERR WRONGTYPE" : "OK (no latch)");
        return;
    }
    }
}

static void resync(void)
{
    long long before = ndiv;

    for (int n = 0; n < NL; n++)
        status_lock(0, n, 1);
    for (int s = 0; s < NS; s++)
        status_sem(0, s, 1);
    ndiv = before; /* a malformed STATUS while resyncing is not another divergence */
    need_resync = 0;
}

/* A name (ci, oi) holds (lock names when sem is 0), at random; -1 when none. */
static int held_name(int ci, int oi, int sem)
{
    int cand[NL], k = 0;

    for (int n = 0; n < (sem ? NS : NL); n++)
        if (sem ? S[n][ci][oi].n > 0 : (L[n][ci][oi][0].count > 0 || L[n][ci][oi][1].count > 0))
            cand[k++] = n;
    return k == 0 ? -1 : cand[rnd(k)];
}

/* A (session, owner) that holds something (a lock when sem is 0, else permits), at random; 0 when none. */
static int pick_holder(int sem, int *ci, int *oi)
{
    int cand[NC * NO], k = 0;

    for (int c = 0; c < NC; c++)
        for (int o = 0; o < NO; o++)
            if (held_name(c, o, sem) >= 0)
                cand[k++] = c * NO + o;
    if (k == 0)
        return 0;
    k = cand[rnd(k)];
    *ci = k / NO;
    *oi = k % NO;
    return 1;
}

static void one_op(void)
{
    int ci = rnd(NC), oi = rnd(NO), p = rnd(100);
    int n1 = rnd(NL), n2 = (n1 + 1 + rnd(NL - 1)) % NL;

    if (p < 30) {
        op_lock(ci, oi, n1, -1, rnd(5) < 2);
    } else if (p < 50) {
        /* mostly an UNLOCK by someone who holds the name; sometimes any */
        if (rnd(10) < 7 && pick_holder(0, &ci, &oi))
            n1 = held_name(ci, oi, 0);
        op_unlock(ci, oi, n1, -1, rnd(4) == 0, rnd(7) == 0);
    } else if (p < 58) {
        op_lock(ci, oi, n1, n2, rnd(5) < 2);
    } else if (p < 65) {
        if (rnd(10) < 7 && pick_holder(0, &ci, &oi)) {
            n1 = held_name(ci, oi, 0);
            n2 = held_name(ci, oi, 0);
            if (n2 == n1)
                n2 = (n1 + 1 + rnd(NL - 1)) % NL;
        }
        op_unlock(ci, oi, n1, n2, rnd(4) == 0, rnd(7) == 0);
    } else if (p < 79) {
        int k = 1 + rnd(2);

        op_acquire(ci, oi, rnd(NS), rnd(10) == 0 ? 2 : 3, k, k == 1 && rnd(2));
    } else if (p < 90) {
        int s = rnd(NS), k = 1 + rnd(2);

        if (rnd(10) < 8 && pick_holder(1, &ci, &oi)) {
            s = held_name(ci, oi, 1);
            if (rnd(4) != 0 && k > S[s][ci][oi].n)
                k = S[s][ci][oi].n;
        }
        op_release(ci, oi, s, k, k == 1 && rnd(2));
    } else if (p < 96) {
        if (rnd(3) == 0)
            status_sem(ci, rnd(NS), 0);
        else
            status_lock(ci, n1, 0);
    } else {
        op_probe(ci, oi);
    }
}

START_TEST(test_model)
{
    const char *env = getenv("DLOCK_SEED"), *envn = getenv("DLOCK_MODEL_OPS");
    uint64_t seed = env != NULL && *env ? strtoull(env, NULL, 0)
                                        : ((uint64_t)h_now_ms() * 1000003u) ^ ((uint64_t)getpid() << 20);
    long long total = envn != NULL && *envn ? strtoll(envn, NULL, 10) : 20000;
    int64_t t0;

    fprintf(stderr, "model: seed %" PRIu64 " (DLOCK_SEED=%" PRIu64 " reproduces it), %lld operations\n", seed, seed,
            total);
    rng = seed;
    memset(L, 0, sizeof L);
    memset(S, 0, sizeof S);
    memset(Llast, 0, sizeof Llast);
    memset(Slast, 0, sizeof Slast);
    memset(stats, 0, sizeof stats);
    for (int s = 0; s < NS; s++)
        Slimit[s] = 3;
    nops = ndiv = ntagged = 0;
    need_resync = 0;
    for (int c = 0; c < NC; c++) {
        char hello[40];

        snprintf(hello, sizeof hello, "name=s%d ttl=%dms", c, SESSION_TTL_MS);
        C[c] = H_CLIENT(D, hello);
    }
    t0 = h_now_ms();
    for (nops = 0; nops < total; nops++) {
        one_op();
        for (int c = 0; c < NC; c++)
            if (C[c]->eof)
                H_FAIL("model: the daemon closed session s%d's connection at operation %lld (%s)", c, nops, cur_req);
        if (need_resync)
            resync();
    }
    /* Then the whole state, name by name. */
    for (int n = 0; n < NL; n++)
        status_lock(0, n, 0);
    for (int s = 0; s < NS; s++)
        status_sem(0, s, 0);
    for (int c = 0; c < NC; c++) {
        const char *e = h_event(C[c], NULL, 0);

        if (e != NULL) {
            snprintf(cur_req, sizeof cur_req, "(nothing: an event on s%d)", c);
            diverge(e, "no event");
        }
    }
    fprintf(stderr, "model: %lld operations (%lld tagged) in %lld ms; replies OK/BUSY/NOTHELD/MISMATCH/WRONGTYPE:\n",
            nops, ntagged, (long long)(h_now_ms() - t0));
    for (int v = 0; v < V_N; v++)
        fprintf(stderr, "model:   %-9s %5lld %5lld %5lld %5lld %5lld\n", VNAME[v], stats[v][O_OK], stats[v][O_BUSY],
                stats[v][O_NOTHELD], stats[v][O_MISMATCH], stats[v][O_WRONGTYPE]);
    fprintf(stderr, "model: %lld operations, %lld divergences, seed %" PRIu64 "\n", nops, ndiv, seed);
    ck_assert_msg(ndiv == 0, "model: %lld divergences in %lld operations (seed %" PRIu64 ")", ndiv, nops, seed);
    ck_assert_int_ge(nops, 3000 < total ? 3000 : total);

    /* QUIT releases everything of every session. */
    for (int c = 0; c < NC; c++) {
        H_REQ(C[c], "OK", "QUIT");
        H_EOF(C[c], 3000);
    }
    C[0] = H_CLIENT(D, "name=after");
    for (int n = 0; n < NL + NS; n++) {
        const char *r = H_REQ(C[0], "OK {%*", "STATUS %s", n < NL ? LNAME[n] : SNAME[n - NL]);

        ck_assert_msg(h_json_has(r, "\"type\":null") && h_json_has(r, "\"holders\":[]"), "after QUIT: %s", r);
    }
}
END_TEST

/*
 * Bursts: a few tagged requests of one session in one write, so that they
 * run in one batch script, in order (untagged ones would go one at a time). A name
 * an earlier request of the batch read (STATUS, a refused or slow LOCK, an
 * UNLOCK) and a fast-path grant on it later in the same batch must see each
 * other: two owners, two names, exclusive and shared holds, reentry.
 */
#define BN 2 /* names */
#define BO 2 /* owners */

struct bhold {
    int count;
    long long tok;
};

static struct bhold B[BN][BO][2]; /* [name][owner][0 exclusive, 1 shared] */
static long long Blast[BN];

/* Whether owner o's request in mode m (0 exclusive) on name n must be refused. */
static int b_blocked(int n, int o, int m)
{
    for (int k = 0; k < BO; k++)
        if (k != o && (B[n][k][0].count > 0 || (m == 0 && B[n][k][1].count > 0)))
            return 1;
    return 0;
}

static int b_holds(int n)
{
    int k = 0;

    for (int o = 0; o < BO; o++)
        k += (B[n][o][0].count > 0) + (B[n][o][1].count > 0);
    return k;
}

/* Checks reply r to request req against the model, and applies it. */
static void b_check(const char *req, const char *r, int verb, int n, int o, int m, int all)
{
    struct bhold *h = &B[n][o][m];
    char want[160] = "";

    if (r == NULL) {
        H_FAIL("burst: no reply to '%s'", req);
        return;
    }
    if (verb == 0) { /* LOCK */
        if (b_blocked(n, o, m)) {
            if (!h_match(r, "BUSY%*"))
                snprintf(want, sizeof want, "BUSY");
        } else if (!h_match(r, "OK token=%d count=%d")) {
            snprintf(want, sizeof want, "OK token= count=%d", h->count + 1);
        } else {
            long long tok = h_kv_int(r, "token"), count = h_kv_int(r, "count");
            if (count != h->count + 1 || (h->count > 0 && tok != h->tok) || (h->count == 0 && tok <= Blast[n]))
                snprintf(want, sizeof want, "count=%d and token %s %lld", h->count + 1,
                         h->count > 0 ? "=" : ">", h->count > 0 ? h->tok : Blast[n]);
            h->count++;
            h->tok = tok;
            if (tok > Blast[n])
                Blast[n] = tok;
        }
    } else if (verb == 1) { /* UNLOCK; m: 1 with shared, else the exclusive hold if any */
        if (m == 0 && h->count == 0)
            h = &B[n][o][1];
        if (h->count == 0) {
            if (!h_match(r, "ERR NOTHELD %*"))
                snprintf(want, sizeof want, "ERR NOTHELD");
        } else {
            h->count = all ? 0 : h->count - 1;
            if (!h_match(r, "OK count=%d") || h_kv_int(r, "count") != h->count)
                snprintf(want, sizeof want, "OK count=%d", h->count);
        }
    } else { /* STATUS: one holder per hold */
        int k = 0;
        for (const char *p = strstr(r, "\"token\":"); p; p = strstr(p + 1, "\"token\":"))
            k++;
        if (!h_match(r, "OK {%*") || k != b_holds(n))
            snprintf(want, sizeof want, "%d holders", b_holds(n));
    }
    if (want[0])
        H_FAIL("burst: '%s' -> '%s', expected %s", req, r, want);
}

START_TEST(test_bursts)
{
    static const char *const name[BN] = {"b.a", "b.b"}, *const owner[BO] = {"o1", "o2"};
    const char *env = getenv("DLOCK_SEED");
    uint64_t seed = env != NULL && *env ? strtoull(env, NULL, 0) : (uint64_t)h_now_ms() ^ ((uint64_t)getpid() << 20);
    struct h_conn *c = H_CLIENT(D, "name=burst ttl=600000ms");
    long long nreq = 0;

    fprintf(stderr, "bursts: seed %" PRIu64 " (DLOCK_SEED=%" PRIu64 " reproduces it)\n", seed, seed);
    rng = seed;
    memset(B, 0, sizeof B);
    memset(Blast, 0, sizeof Blast);
    for (int burst = 0; burst < 1500; burst++) {
        char buf[2048], req[8][80], tag[8][16];
        int k = 2 + rnd(7), verb[8], n[8], o[8], m[8], all[8];
        size_t len = 0;

        for (int i = 0; i < k; i++) {
            int p = rnd(10);
            /* as many UNLOCKs as LOCKs, half of them all: names are often free */
            verb[i] = p < 4 ? 0 : p < 8 ? 1 : 2;
            n[i] = rnd(BN);
            o[i] = rnd(BO);
            m[i] = rnd(3) == 0;
            all[i] = verb[i] == 1 && rnd(2);
            snprintf(tag[i], sizeof tag[i], "#b%d", i);
            if (verb[i] == 0)
                snprintf(req[i], sizeof req[i], "LOCK %s owner=%s%s", name[n[i]], owner[o[i]], m[i] ? " shared" : "");
            else if (verb[i] == 1)
                snprintf(req[i], sizeof req[i], "UNLOCK %s owner=%s%s%s", name[n[i]], owner[o[i]], m[i] ? " shared" : "",
                         all[i] ? " all" : "");
            else
                snprintf(req[i], sizeof req[i], "STATUS %s", name[n[i]]);
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s %s\r\n", tag[i], req[i]);
        }
        ck_assert_int_eq(h_send_raw(c, buf, len), 0);
        for (int i = 0; i < k; i++) {
            const char *r = h_reply_tag(c, tag[i] + 1, H_TIMEOUT);
            b_check(req[i], r ? r + strlen(tag[i]) + 1 : NULL, verb[i], n[i], o[i], m[i], all[i]);
        }
        nreq += k;
    }
    fprintf(stderr, "bursts: %lld requests in 1500 bursts, no divergence\n", nreq);
}
END_TEST

static Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("model");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_model);
    tcase_add_test(tc, test_bursts);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return h_run_suite(model_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
