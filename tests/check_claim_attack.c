/* check_claim_attack.c - hostile review of the resume claim (commit 1f3f8d2): the record of a
 * session decides which daemon has it, a takeover is attached and answered only once it has
 * claimed the record, and a QUIT is answered OK only when the session ended everywhere. Each
 * test states the property it checks and how it is broken. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <check.h>

#include "harness.h"

/* ---- a TCP proxy in front of Redis: when a daemon sends a chunk naming pattern it either holds
 * back the answers on that connection (PX_HOLD), or drops the chunk, cuts the connection and
 * refuses connections for blackout_ms (PX_CUT: the daemon's link is down meanwhile). */

enum { PX_HOLD = 1, PX_CUT = 2 };

struct proxy_ctl {
    volatile int armed;       /* PX_HOLD or PX_CUT: what the next chunk naming pattern triggers */
    char pattern[32];
    volatile int triggered;   /* the pattern was seen */
    volatile int release;     /* deliver what was held, then forward as usual */
    volatile int blackout_ms;
    volatile int64_t dark_until;
};

struct proxy {
    pid_t pid;
    int port;
    struct proxy_ctl *ctl;
};

#define PX_MAX 16

static void proxy_run(int lfd, int target, struct proxy_ctl *ctl)
{
    int cfd[PX_MAX], rfd[PX_MAX], held[PX_MAX], n = 0;
    char *hbuf[PX_MAX];
    size_t hlen[PX_MAX];

    memset(hbuf, 0, sizeof(hbuf));
    memset(hlen, 0, sizeof(hlen));
    for (;;) {
        struct pollfd p[1 + 2 * PX_MAX];
        int np = 0;

        p[np++] = (struct pollfd){ .fd = lfd, .events = POLLIN };
        for (int i = 0; i < n; i++) {
            p[np++] = (struct pollfd){ .fd = cfd[i], .events = POLLIN };
            p[np++] = (struct pollfd){ .fd = rfd[i], .events = POLLIN };
        }
        poll(p, (nfds_t)np, 20);
        if (ctl->release) {
            for (int i = 0; i < n; i++)
                if (held[i]) {
                    if (hlen[i])
                        (void)!write(cfd[i], hbuf[i], hlen[i]);
                    free(hbuf[i]);
                    hbuf[i] = NULL;
                    hlen[i] = 0;
                    held[i] = 0;
                }
            ctl->release = 0;
        }
        if ((p[0].revents & POLLIN) && n < PX_MAX) {
            int c = accept(lfd, NULL, NULL);
            struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)target),
                                      .sin_addr.s_addr = htonl(0x7f000001) };
            int r = socket(AF_INET, SOCK_STREAM, 0);
            if (c >= 0 && h_now_ms() >= ctl->dark_until && connect(r, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
                cfd[n] = c;
                rfd[n] = r;
                held[n] = 0;
                n++;
            } else {
                close(c);
                close(r);
            }
        }
        for (int i = 0; i < n; i++) {
            char buf[65536];
            ssize_t k;
            short ce = p[1 + 2 * i].revents, re = p[2 + 2 * i].revents;
            int dead = h_now_ms() < ctl->dark_until;

            if (!dead && (ce & (POLLIN | POLLHUP | POLLERR))) {
                if ((k = read(cfd[i], buf, sizeof(buf))) <= 0) {
                    dead = 1;
                } else {
                    int hit = ctl->armed && memmem(buf, (size_t)k, ctl->pattern, strlen(ctl->pattern));
                    if (hit && ctl->armed == PX_CUT) {
                        ctl->dark_until = h_now_ms() + ctl->blackout_ms;
                        dead = 1;
                    } else if (hit) {
                        held[i] = 1;
                    }
                    if (hit) {
                        ctl->armed = 0;
                        ctl->triggered = 1;
                    }
                    if (!dead)
                        (void)!write(rfd[i], buf, (size_t)k);
                }
            }
            if (!dead && (re & (POLLIN | POLLHUP | POLLERR))) {
                if ((k = read(rfd[i], buf, sizeof(buf))) <= 0) {
                    dead = 1;
                } else if (held[i]) {
                    hbuf[i] = realloc(hbuf[i], hlen[i] + (size_t)k);
                    memcpy(hbuf[i] + hlen[i], buf, (size_t)k);
                    hlen[i] += (size_t)k;
                } else {
                    (void)!write(cfd[i], buf, (size_t)k);
                }
            }
            if (dead) {
                close(cfd[i]);
                close(rfd[i]);
                free(hbuf[i]);
                cfd[i] = cfd[n - 1];
                rfd[i] = rfd[n - 1];
                held[i] = held[n - 1];
                hbuf[i] = hbuf[n - 1];
                hlen[i] = hlen[n - 1];
                hbuf[n - 1] = NULL;
                n--;
                i--;
            }
        }
    }
}

static struct proxy proxy_start(int target)
{
    struct proxy px = { 0 };
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);

    px.ctl = mmap(NULL, sizeof(*px.ctl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(px.ctl != MAP_FAILED);
    memset((void *)px.ctl, 0, sizeof(*px.ctl));
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    px.port = h_free_port();
    sa.sin_port = htons((uint16_t)px.port);
    ck_assert(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 16) == 0);
    if ((px.pid = fork()) == 0) {
        signal(SIGTERM, SIG_DFL);
        proxy_run(lfd, target, px.ctl);
        _exit(0);
    }
    close(lfd);
    return px;
}

static void proxy_arm(struct proxy *px, int how, const char *pattern, int blackout_ms)
{
    snprintf(px->ctl->pattern, sizeof(px->ctl->pattern), "%s", pattern);
    px->ctl->blackout_ms = blackout_ms;
    px->ctl->triggered = 0;
    px->ctl->armed = how;
}

static void proxy_stop(struct proxy *px)
{
    if (px->pid > 0) {
        kill(px->pid, SIGKILL);
        waitpid(px->pid, NULL, 0);
        px->pid = 0;
    }
}

static int wait_flag(volatile int *flag, int want, int ms)
{
    for (int64_t end = h_now_ms() + ms; h_now_ms() < end; h_sleep_ms(5))
        if (*flag == want)
            return 1;
    return *flag == want;
}

/* Closes c's socket and keeps the struct (its session and secret) readable. */
static __attribute__((unused)) void drop_conn(struct h_conn *c)
{
    shutdown(c->fd, SHUT_RDWR);
    close(c->fd);
    c->fd = -1;
    c->eof = 1;
}

/* Prints the record of sid and the holds of name in Redis. */
static void show_state(const char *why, const char *sid, const char *name)
{
    char key[80], *rec, *holds = h_holds_at(R->port, name);

    snprintf(key, sizeof key, "dlock:{%s}:session", sid);
    rec = h_redis_cmd(R->port, "HGETALL", key, NULL);
    fprintf(stderr, "%s: record '%s'; holds of %s '%s'\n", why, rec ? rec : "(none)", name, holds);
    free(rec);
    free(holds);
}

/*
 * The claim goes unanswered (the resumer's link to Redis breaks as it sends it) and the link
 * stays down past the next claim try: record_put, finding no link, marks the record dirty. When
 * the link is back, the renewal writes the dirty record with a plain put (no from) before the
 * claim is tried again; the record still names the old daemon, so the put is refused and
 * check_moved lets the session go from the resumer -- releasing, as "granted here since", the
 * holds it had just adopted (they are the resumer's in Redis, so Redis lets them go). The
 * session lives on where it was, its client still connected there and told nothing, while its
 * lock is granted to another client; the resuming HELLO hears ERR NOSESSION.
 */
START_TEST(test_claim_cut_then_dirty_renewal)
{
    struct proxy px = proxy_start(R->port);
    struct h_dlockd *d2 = h_dlockd_start(px.port, H_ARGS("--backend-timeout", "1s"));
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *b = H_CLIENT(D, "name=bob");
    struct h_conn *n = H_CONNECT(d2->port);
    const char *r;
    int granted;

    H_LOCK_NEW(a, "x");
    proxy_arm(&px, PX_CUT, "put", 2500);
    h_send(n, "HELLO session=%s secret=%s", a->session, a->secret);
    ck_assert_msg(wait_flag(&px.ctl->triggered, 1, 5000), "d2 sent no claim");
    r = h_reply(n, 10000);
    fprintf(stderr, "the resume: %s\n", r ? r : "(none)");
    h_sleep_ms(500);
    show_state("after the resume", a->session, "x");
    /* The session is D's (the resume was not answered OK), a holds x there. */
    h_send(b, "LOCK x");
    r = h_reply(b, 3000);
    granted = r && h_match(r, "OK token=%d count=1");
    fprintf(stderr, "bob's LOCK x: %s\n", r ? r : "(none)");
    r = h_request(a, 3000, "STATUS x");
    fprintf(stderr, "alice (on D) STATUS x: %s\n", r ? r : "(none)");
    proxy_stop(&px);
    ck_assert_msg(!granted, "x granted to bob while alice's session holds it on D: %s", r);
}
END_TEST

/*
 * A QUIT is answered OK only once a read of its record shows no other daemon had the session
 * (daemon.c session_quit). When that read is not answered (Redis silent, or no link), on_quit_read
 * answers OK anyway: here the session was resumed on d2 (claim written, d2 answered OK resumed)
 * while D was stopped, then Redis stalls as D reads the QUIT. The old connection hears OK -- "the
 * session ended" -- though the QUIT ended nothing: the session and its hold of x go on at d2.
 */
START_TEST(test_quit_ok_when_record_unread)
{
    struct h_dlockd *d2 = h_dlockd_start(R->port, NULL);
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=30s"), *n = H_CONNECT(d2->port);
    const char *r;
    char pat[300];
    int quit_ok;

    H_LOCK_NEW(a, "x");
    ck_assert_int_eq(kill(D->pid, SIGSTOP), 0); /* D hears of the move only later */
    snprintf(pat, sizeof pat, "OK session=%s secret=%s ttl=%%d proto=1 server=dlockd/%%w resumed=1 lease=%%d",
             a->session, a->secret);
    H_REQ(n, pat, "HELLO session=%s secret=%s", a->session, a->secret);
    h_redis_pause(R);
    h_send(a, "QUIT");
    ck_assert_int_eq(kill(D->pid, SIGCONT), 0);
    r = h_reply(a, 6000);
    quit_ok = r && strcmp(r, "OK") == 0;
    fprintf(stderr, "the QUIT on D: %s\n", r ? r : "(no answer)");
    h_redis_resume(R);
    h_sleep_ms(500);
    show_state("after the QUIT", a->session, "x");
    r = h_request(n, 5000, "LOCK x");
    fprintf(stderr, "the resumed session's LOCK x on d2: %s\n", r ? r : "(none)");
    ck_assert_msg(!(quit_ok && r && h_match(r, "OK token=%d count=2")),
                  "QUIT answered OK on D, yet the session lives on d2 and still holds x: %s", r);
}
END_TEST

/*
 * The claim is cut and the resumer's link stays down longer than the session's ttl: d2's copy of
 * the session (never attached) expires there, its release of x cannot be sent ("left to its lease
 * in Redis"), and on_claimed, finding no session, gives up without handing x back
 * (resume.c on_claimed, the s == NULL branch: "its holds released" is not so). x stays d2's in
 * Redis while the session goes on at D: alice's UNLOCK x there is ERR NOTHELD though D lists x
 * as hers, and after her QUIT is answered OK (holds released at once, says PROTOCOL.md) x stays
 * taken, owned by a daemon that has no such session, until the adopted lease (30 s) runs out.
 */
START_TEST(test_claim_cut_copy_expires)
{
    struct proxy px = proxy_start(R->port);
    struct h_dlockd *d2 = h_dlockd_start(px.port, H_ARGS("--backend-timeout", "1s"));
    struct h_conn *a = H_CLIENT(D, "name=alice ttl=2s"), *b = H_CLIENT(D, "name=bob");
    struct h_conn *n = H_CONNECT(d2->port);
    const char *r, *u;
    int granted;

    H_LOCK_NEW(a, "x");
    proxy_arm(&px, PX_CUT, "put", 5000);
    h_send(n, "HELLO session=%s secret=%s", a->session, a->secret);
    ck_assert_msg(wait_flag(&px.ctl->triggered, 1, 5000), "d2 sent no claim");
    for (int i = 0; i < 8; i++) { /* alice stays with D; the blackout ends, d2 is back */
        ck_assert(h_request(a, 3000, "PING") != NULL);
        h_sleep_ms(1000);
    }
    r = h_reply(n, 3000);
    fprintf(stderr, "the resume: %s\n", r ? r : "(none)");
    show_state("after the resume", a->session, "x");
    u = h_request(a, 3000, "UNLOCK x");
    fprintf(stderr, "alice (on D) UNLOCK x: %s\n", u ? u : "(none)");
    r = h_request(a, 3000, "QUIT");
    fprintf(stderr, "alice's QUIT: %s\n", r ? r : "(none)");
    h_send(b, "LOCK x wait=5s");
    r = h_reply(b, 7000);
    granted = r && h_match(r, "OK token=%d count=1");
    fprintf(stderr, "bob's LOCK x after alice's UNLOCK and QUIT: %s\n", r ? r : "(none)");
    show_state("at the end", a->session, "x");
    proxy_stop(&px);
    ck_assert_msg(granted, "x still taken 5 s after its holder unlocked it and quit (UNLOCK: %s)", u ? u : "(none)");
}
END_TEST

/* One case per test, so that CK_RUN_CASE=name runs one of them. */
static void add(Suite *s, const char *name, const TTest *t)
{
    TCase *tc = tcase_create(name);

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 90);
    _tcase_add_test(tc, t, 0, 0, 0, 1);
    suite_add_tcase(s, tc);
}

static Suite *attack_suite(void)
{
    Suite *s = suite_create("claim-attack");

    add(s, "claim_cut_then_dirty_renewal", test_claim_cut_then_dirty_renewal);
    add(s, "quit_ok_when_record_unread", test_quit_ok_when_record_unread);
    add(s, "claim_cut_copy_expires", test_claim_cut_copy_expires);
    return s;
}

int main(void)
{
    return h_run_suite(attack_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
