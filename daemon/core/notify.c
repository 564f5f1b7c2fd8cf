/* notify.c - tells systemd about readiness, reloads, stopping and liveness
 * through the datagram socket in $NOTIFY_SOCKET. The protocol is a few lines
 * of text, so dlockd speaks it itself rather than link libsystemd for it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "notify.h"

void notify(const char *fmt, ...)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sun;
    char msg[1024];
    socklen_t len;
    va_list ap;
    int fd, n;

    if (path == NULL || (path[0] != '/' && path[0] != '@') || strlen(path) >= sizeof(sun.sun_path))
        return;
    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(msg))
        return;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    memcpy(sun.sun_path, path, strlen(path));
    if (path[0] == '@')
        sun.sun_path[0] = '\0'; /* abstract namespace */
    len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) {
        log_warn("notify: socket");
        return;
    }
    if (sendto(fd, msg, (size_t)n, MSG_NOSIGNAL, (struct sockaddr *)&sun, len) < 0)
        log_warn("notify: %s", path);
    close(fd);
}

uint64_t notify_watchdog_ms(void)
{
    const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    unsigned long long v;

    if (usec == NULL || (pid && strtol(pid, NULL, 10) != (long)getpid()))
        return 0;
    v = strtoull(usec, NULL, 10);
    return v / 2000;
}
