/* cli_reach.c - why dlock could not reach dlockd: each address is tried again by hand, so that
 * the message tells a refused connection, an unknown host and a silent server apart. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli.h"

#define REACH_MAX_ADDRS 16 /* addresses looked at; a longer list is cut there */

/* Why a connection to sa failed ("connection refused", "timed out", ...), or NULL when it succeeded. */
static const char *why_connect(const struct sockaddr *sa, socklen_t len, long long timeout_ms)
{
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), err = 0;
    socklen_t elen = sizeof(err);
    struct pollfd p;

    if (fd < 0)
        return strerror(errno);
    if (connect(fd, sa, len) < 0) {
        err = errno;
        if (err == EINPROGRESS) {
            p = (struct pollfd){.fd = fd, .events = POLLOUT};
            err = poll(&p, 1, (int)timeout_ms) == 1 ? 0 : ETIMEDOUT;
            if (err == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
                err = errno;
        }
    }
    close(fd);
    if (err == 0)
        return NULL;
    if (err == ETIMEDOUT)
        return "timed out connecting";
    if (err == ECONNREFUSED)
        return "connection refused (nothing listens there)";
    if (err == ENOENT)
        return "no such socket";
    return strerror(err);
}

/* Splits "HOST:PORT", "[V6]:PORT", "HOST" or "[V6]" into host and port (7411 when none). -1 when malformed. */
static int split_host(char *text, char **host, const char **port)
{
    char *colon;

    *port = "7411";
    if (*text == '[') {
        char *close = strchr(text, ']');
        if (close == NULL || (close[1] != '\0' && close[1] != ':'))
            return -1;
        *close = '\0';
        *host = text + 1;
        if (close[1] == ':')
            *port = close + 2;
        return 0;
    }
    *host = text;
    colon = strrchr(text, ':');
    if (colon != NULL && strchr(text, ':') == colon) {
        *colon = '\0';
        *port = colon + 1;
    }
    return 0;
}

/* Why addr does not let dlock in. */
static const char *why_addr(char *addr, long long timeout_ms)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
    const char *port, *why = "no address";
    char *host;
    int rc;

    if (strncmp(addr, "unix:", 5) == 0) {
        struct sockaddr_un sun = {.sun_family = AF_UNIX};

        snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", addr + 5);
        why = why_connect((struct sockaddr *)&sun, sizeof(sun), timeout_ms);
        return why ? why : "no answer from dlockd (timed out)";
    }
    if (split_host(addr, &host, &port) < 0)
        return "malformed address";
    if ((rc = getaddrinfo(host, port, &hints, &res)) != 0)
        return rc == EAI_NONAME || rc == EAI_NODATA || rc == EAI_FAIL ? "no such host" : gai_strerror(rc);
    for (ai = res; ai && why; ai = ai->ai_next)
        why = why_connect(ai->ai_addr, ai->ai_addrlen, timeout_ms);
    freeaddrinfo(res);
    return why ? why : "no answer from dlockd (timed out)";
}

void cli_why_unreachable(const char *addrs, long long timeout_ms, char *buf, size_t len)
{
    char *copy = strdup(addrs), *tok, *save = NULL;
    size_t used = 0;
    int n = 0;

    snprintf(buf, len, "%s", copy ? "" : "out of memory");
    for (tok = copy ? strtok_r(copy, ", \t", &save) : NULL; tok && n < REACH_MAX_ADDRS && used < len;
         tok = strtok_r(NULL, ", \t", &save), n++) {
        char shown[300];

        snprintf(shown, sizeof(shown), "%s", tok);
        used += (size_t)snprintf(buf + used, len - used, "%s%s: %s", n ? "; " : "", shown, why_addr(tok, timeout_ms));
    }
    free(copy);
}
