/* proxy.h - a TCP proxy in front of Redis for tests that break a daemon's link at a chosen
 * call: when the daemon sends a chunk naming a pattern, the proxy either holds back the answers
 * on that connection until released (H_PX_HOLD), holds back that chunk and what follows it on
 * that connection, unsent to Redis, until released (H_PX_STALL), or drops the chunk, cuts the
 * connection and refuses connections for a while (H_PX_CUT: the daemon's link is down meanwhile). It runs in
 * a child process; the test steers it through shared memory. */
#ifndef DLOCKD_TESTS_PROXY_H
#define DLOCKD_TESTS_PROXY_H

#include <stdint.h>
#include <sys/types.h>

enum { H_PX_HOLD = 1, H_PX_CUT = 2, H_PX_STALL = 3 };

struct h_proxy_ctl {
    volatile int armed;       /* H_PX_HOLD, H_PX_STALL or H_PX_CUT: what the next chunk naming pattern triggers */
    char pattern[32];
    volatile int triggered;   /* the pattern was seen */
    volatile int release;     /* deliver what was held, then forward as usual */
    volatile int blackout_ms;
    volatile int64_t dark_until;
};

struct h_proxy {
    pid_t pid;
    int port;
    struct h_proxy_ctl *ctl;
};

/* Starts a proxy on a free loopback port forwarding to 127.0.0.1:target; fails the test if it cannot. */
struct h_proxy h_proxy_start(int target);
/* Arms it: the next chunk naming pattern triggers how (blackout_ms: for H_PX_CUT). */
void h_proxy_arm(struct h_proxy *px, int how, const char *pattern, int blackout_ms);
/* Waits up to ms for the armed pattern to be seen; 1 when it was. */
int h_proxy_triggered(const struct h_proxy *px, int ms);
/* Delivers what was held and forwards as usual from then on. */
void h_proxy_release(struct h_proxy *px);
void h_proxy_stop(struct h_proxy *px);

#endif
