/* check_starve.c - what one client or a failover can make the daemon hold or
 * delay: max-requests behind the failover gate, gate-wait, the turns of
 * STATUS, health while gated. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef DLOCK_CLI
#define DLOCK_CLI "client/dlock"
#endif

#define GATE_CONNS 40   /* connections pipelining behind the gate */
#define GATE_EACH 2000  /* requests each */
#define GATE_CAP 5000   /* max-requests of that daemon */
#define FLOOD_CONNS 24  /* connections flooding STATUS */
#ifdef __SANITIZE_ADDRESS__
/* ASan keeps freed memory in quarantine (RSS says nothing of the cap) and runs several times
 * slower: the bounds are checked by the plain build, the rest at a pace ASan keeps up with. */
#define RSS_CHECKED 0
#define FLOOD_BURST 1000
#else
#define RSS_CHECKED 1
#define FLOOD_BURST 8000 /* STATUS each sends at once, then reads */
#endif

/* VmRSS of pid in kB; -1 when unknown. */
static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    FILE *f;

    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    fclose(f);
    return kb;
}

/* Sends n tagged requests "#<i> <line>" on c in one write. */
static void send_burst(struct h_conn *c, int n, const char *line)
{
    size_t cap = (size_t)n * (strlen(line) + 16), len = 0;
    char *buf = malloc(cap);

    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, cap - len, "#%d %s\n", i, line);
    if (h_send_raw(c, buf, len) != 0)
        H_FAIL("cannot send %d requests", n);
    free(buf);
}

/* Restarts R empty (no persistence): the daemon sees another Redis and closes its gate. */
static void restart_empty(struct h_conn *c)
{
    h_redis_restart(R);
    h_wait_info(c, "\"backend\":\"up\"", 10000);
    for (int64_t end = h_now_ms() + 10000; h_now_ms() < end; h_sleep_ms(50))
        if (strstr(H_REQ(c, "OK {%*}", "INFO"), "\"gated_until\":\"20") != NULL)
            return;
    H_FAIL("the gate did not close after a restart of Redis");
}

/* `dlock ping` against d: its output in out; returns its exit status. */
static int ping(const struct h_dlockd *d, char *out, size_t cap)
{
    char cmd[512];
    FILE *p;
    size_t n;

    snprintf(cmd, sizeof cmd, "%s -a 127.0.0.1:%d ping 2>&1", DLOCK_CLI, d->port);
    if ((p = popen(cmd, "r")) == NULL)
        H_FAIL("cannot run %s", cmd);
    n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    return WEXITSTATUS(pclose(p));
}

/* 1: 40 connections pipelining LOCK behind the failover gate: past
 * max-requests they get ERR LIMIT at once and the daemon's memory stays
 * bounded; the ones it holds get ERR BACKEND naming the gate once gate-wait
 * is over, long before the gate opens. */
START_TEST(test_gate_cap_and_wait)
{
    struct h_conn *by, *c[GATE_CONNS];
    int limited = 0, gated = 0;
    long rss0, rss;
    int64_t t0, first = 0, last = 0;
    const char *line;

    D = h_dlockd_start(R->port, H_ARGS("--failover-delay", "20s", "--gate-wait", "4s", "--max-requests", "5000"));
    by = H_CLIENT(D, "name=by");
    for (int i = 0; i < GATE_CONNS; i++)
        c[i] = H_CLIENT(D, "");
    restart_empty(by);
    rss0 = rss_kb(D->pid);
    t0 = h_now_ms();
    for (int i = 0; i < GATE_CONNS; i++)
        send_burst(c[i], GATE_EACH, "LOCK g wait=0");
    h_sleep_ms(2500); /* all read, none answered by the gate yet */
    rss = rss_kb(D->pid);
    for (int i = 0; i < GATE_CONNS; i++) {
        for (int k = 0; k < GATE_EACH; k++) {
            if ((line = h_reply(c[i], 10000)) == NULL)
                H_FAIL("connection %d: %d of %d answered", i, k, GATE_EACH);
            if (h_match(line, "#%d ERR LIMIT %*max-requests%*")) {
                limited++;
            } else if (h_match(line, "#%d ERR BACKEND waited 4000ms behind the failover gate (gated until 20%*")) {
                last = h_now_ms() - t0;
                first = first ? first : last;
                gated++;
            } else {
                H_FAIL("connection %d: unexpected %s", i, line);
            }
        }
    }
    fprintf(stderr, "gate: %d ERR LIMIT, %d ERR BACKEND after %lld..%lldms, RSS %ld -> %ld kB\n", limited, gated,
            (long long)first, (long long)last, rss0, rss);
    ck_assert_msg(limited >= GATE_CONNS * GATE_EACH - 2 * GATE_CAP, "%d ERR LIMIT", limited);
    ck_assert_msg(gated >= GATE_CAP && gated <= 2 * GATE_CAP, "%d ERR BACKEND", gated);
    ck_assert_msg(first >= 3500 && last < 9000, "ERR BACKEND after %lld..%lldms, gate-wait 4s", (long long)first,
                  (long long)last);
    ck_assert_msg(!RSS_CHECKED || rss - rss0 < 64 * 1024, "RSS grew by %ld kB", rss - rss0);
    ck_assert_msg(strstr(H_REQ(by, "OK {%*}", "INFO"), "\"gated_until\":\"20"), "the gate opened early");
}
END_TEST

/* 2: while the gate is closed /healthz answers 503 "gated until", INFO and
 * `dlock ping` say so; once it opens, 200 and a plain PONG. */
START_TEST(test_health_gated)
{
    char admin[32], out[1024], *body = NULL;
    struct h_conn *c;
    int code, rc;

    snprintf(admin, sizeof admin, "127.0.0.1:%d", h_free_port());
    D = h_dlockd_start(R->port, H_ARGS("--failover-delay", "5s", "--admin-listen", admin));
    c = H_CLIENT(D, "name=h");
    restart_empty(c);
    code = h_http_get(atoi(strchr(admin, ':') + 1), "/healthz", NULL, &body, 5000);
    ck_assert_msg(code == 503 && body && strncmp(body, "gated until 20", 14) == 0, "/healthz %d: %s", code,
                  body ? body : "");
    free(body);
    rc = ping(D, out, sizeof out);
    ck_assert_msg(rc == 75 && strstr(out, "backend up") && strstr(out, ", gated until 20"), "ping %d: %s", rc, out);
    H_REQ(c, "#t ERR BACKEND waited 3000ms behind the failover gate (gated until 20%*", "#t LOCK h wait=0");
    h_wait_info(c, "\"gated_until\":\"\"", 15000);
    code = h_http_get(atoi(strchr(admin, ':') + 1), "/healthz", NULL, &body, 5000);
    ck_assert_msg(code == 200, "/healthz %d after the gate: %s", code, body ? body : "");
    free(body);
    rc = ping(D, out, sizeof out);
    ck_assert_msg(rc == 0 && !strstr(out, "gated"), "ping %d: %s", rc, out);
    H_LOCK_NEW(c, "h");
}
END_TEST

/* One flooder: STATUS in bursts until end_ms, reading every reply. */
static void flood(int port, int64_t end_ms)
{
    struct h_conn *c = h_connect_try(port);
    char burst[FLOOD_BURST * 24];
    size_t len = 0;

    if (c == NULL || h_send(c, "HELLO name=flood") || h_reply(c, 5000) == NULL)
        _exit(2);
    for (int i = 0; i < FLOOD_BURST; i++)
        len += (size_t)snprintf(burst + len, sizeof burst - len, "#%d STATUS f%d\n", i, i % 50);
    while (h_now_ms() < end_ms) {
        if (h_send_raw(c, burst, len))
            _exit(3);
        for (int i = 0; i < FLOOD_BURST; i++)
            if (h_reply(c, 30000) == NULL)
                _exit(4);
    }
    _exit(0);
}

/* 3: 24 connections pipelining STATUS for seconds, with a short lock-lease:
 * a bystander that holds a lock hears no JEOPARDY, and its own STATUS is
 * answered promptly all along. */
START_TEST(test_status_flood)
{
    struct h_conn *by;
    pid_t kids[FLOOD_CONNS];
    int64_t end, worst = 0;
    int n = 0;

    D = h_dlockd_start(R->port, H_ARGS("--lock-lease", "900ms"));
    by = H_CLIENT(D, "name=by");
    H_LOCK_NEW(by, "held");
    end = h_now_ms() + 8000;
    for (int i = 0; i < FLOOD_CONNS; i++)
        if ((kids[i] = fork()) == 0)
            flood(D->port, end);
    h_sleep_ms(1000);
    while (h_now_ms() < end - 500) {
        int64_t t = h_now_ms(), took;
        H_REQ(by, "OK {%*}", "STATUS held");
        took = h_now_ms() - t;
        worst = took > worst ? took : worst;
        n++;
        h_sleep_ms(100);
    }
    for (int i = 0; i < FLOOD_CONNS; i++) {
        int st;
        waitpid(kids[i], &st, 0);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "flooder %d: status %d", i, st);
    }
    fprintf(stderr, "flood: %d STATUS of the bystander, the slowest %lldms; %lld renewals\n", n, (long long)worst,
            h_info_num(by, "renewed"));
    ck_assert_ptr_null(h_event(by, "* JEOPARDY", 0));
    ck_assert_msg(worst < 1000, "a STATUS took %lldms", (long long)worst);
    H_REQ(by, "OK count=0", "UNLOCK held");
}
END_TEST

static Suite *starve_suite(void)
{
    Suite *s = suite_create("starve");
    TCase *gate = tcase_create("gate"), *reads = tcase_create("reads");

    tcase_add_checked_fixture(gate, h_setup_redis, h_teardown);
    tcase_set_timeout(gate, 120);
    tcase_add_test(gate, test_gate_cap_and_wait);
    tcase_add_test(gate, test_health_gated);
    tcase_add_checked_fixture(reads, h_setup_redis, h_teardown);
    tcase_set_timeout(reads, 120);
    tcase_add_test(reads, test_status_flood);
    suite_add_tcase(s, gate);
    suite_add_tcase(s, reads);
    return s;
}

int main(void)
{
    return h_run_suite(starve_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
