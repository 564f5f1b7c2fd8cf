/* proxy.c - see proxy.h. */
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
#include "proxy.h"

#define PX_MAX 16

static void proxy_run(int lfd, int target, struct h_proxy_ctl *ctl)
{
    int cfd[PX_MAX], rfd[PX_MAX], held[PX_MAX], n = 0;
    char *hbuf[PX_MAX], *sbuf[PX_MAX]; /* answers held; requests stalled */
    size_t hlen[PX_MAX], slen[PX_MAX];

    memset(hbuf, 0, sizeof(hbuf));
    memset(hlen, 0, sizeof(hlen));
    memset(sbuf, 0, sizeof(sbuf));
    memset(slen, 0, sizeof(slen));
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
                    if (slen[i])
                        (void)!write(rfd[i], sbuf[i], slen[i]);
                    free(hbuf[i]);
                    free(sbuf[i]);
                    hbuf[i] = sbuf[i] = NULL;
                    hlen[i] = slen[i] = 0;
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
                    if (hit && ctl->armed == H_PX_CUT) {
                        ctl->dark_until = h_now_ms() + ctl->blackout_ms;
                        dead = 1;
                    } else if (hit) {
                        held[i] = ctl->armed;
                    }
                    if (hit) {
                        ctl->armed = 0;
                        ctl->triggered = 1;
                    }
                    if (!dead && held[i] == H_PX_STALL) {
                        sbuf[i] = realloc(sbuf[i], slen[i] + (size_t)k);
                        memcpy(sbuf[i] + slen[i], buf, (size_t)k);
                        slen[i] += (size_t)k;
                    } else if (!dead) {
                        (void)!write(rfd[i], buf, (size_t)k);
                    }
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
                free(sbuf[i]);
                cfd[i] = cfd[n - 1];
                rfd[i] = rfd[n - 1];
                held[i] = held[n - 1];
                hbuf[i] = hbuf[n - 1];
                hlen[i] = hlen[n - 1];
                sbuf[i] = sbuf[n - 1];
                slen[i] = slen[n - 1];
                hbuf[n - 1] = sbuf[n - 1] = NULL;
                n--;
                i--;
            }
        }
    }
}

struct h_proxy h_proxy_start(int target)
{
    struct h_proxy px = { 0 };
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

void h_proxy_arm(struct h_proxy *px, int how, const char *pattern, int blackout_ms)
{
    snprintf(px->ctl->pattern, sizeof(px->ctl->pattern), "%s", pattern);
    px->ctl->blackout_ms = blackout_ms;
    px->ctl->triggered = 0;
    px->ctl->armed = how;
}

int h_proxy_triggered(const struct h_proxy *px, int ms)
{
    for (int64_t end = h_now_ms() + ms; h_now_ms() < end; h_sleep_ms(5))
        if (px->ctl->triggered)
            return 1;
    return px->ctl->triggered;
}

void h_proxy_release(struct h_proxy *px)
{
    px->ctl->release = 1;
}

void h_proxy_stop(struct h_proxy *px)
{
    if (px->pid > 0) {
        kill(px->pid, SIGKILL);
        waitpid(px->pid, NULL, 0);
        px->pid = 0;
    }
}
