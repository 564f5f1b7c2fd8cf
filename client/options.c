/* options.c - libdlock connection options and server addresses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void dl_options_defaults(struct dlock_options *o)
{
    memset(o, 0, sizeof(*o));
    o->connect_ms = 5000;
    o->request_ms = 5000;
}

/* "HOST:PORT", "HOST", "[V6]:PORT", "[V6]" or "unix:PATH". 0, or -1 when malformed. */
int dl_addr_parse(const char *text, struct dl_addr *a)
{
    const char *colon, *host = text, *port = NULL;
    size_t hlen;

    memset(a, 0, sizeof(*a));
    if (strlen(text) >= sizeof(a->text) || *text == '\0')
        return -1;
    snprintf(a->text, sizeof(a->text), "%s", text);
    if (strncmp(text, "unix:", 5) == 0) {
        if (text[5] == '\0' || strlen(text + 5) >= sizeof(a->path))
            return -1;
        snprintf(a->path, sizeof(a->path), "%s", text + 5);
        return 0;
    }
    if (*text == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || (close[1] != '\0' && close[1] != ':'))
            return -1;
        host = text + 1;
        hlen = (size_t)(close - host);
        port = close[1] == ':' ? close + 2 : NULL;
    } else {
        colon = strrchr(text, ':');
        if (colon != NULL && strchr(text, ':') != colon)
            colon = NULL; /* a bare IPv6 address */
        hlen = colon ? (size_t)(colon - text) : strlen(text);
        port = colon ? colon + 1 : NULL;
    }
    if (hlen == 0 || hlen >= sizeof(a->host))
        return -1;
    memcpy(a->host, host, hlen);
    if (port != NULL && (*port == '\0' || strlen(port) >= sizeof(a->port) ||
                         strspn(port, "0123456789") != strlen(port)))
        return -1;
    snprintf(a->port, sizeof(a->port), "%s", port ? port : DL_DEFAULT_PORT);
    return 0;
}

dlock_options_t *dlock_options_new(void)
{
    struct dlock_options *o = malloc(sizeof(*o));

    if (o != NULL)
        dl_options_defaults(o);
    return o;
}

void dlock_options_free(dlock_options_t *o)
{
    if (o != NULL)
        memset(o->password, 0, sizeof(o->password));
    free(o);
}

int dlock_options_add_address(dlock_options_t *o, const char *addrs)
{
    char *copy, *tok, *save = NULL;
    int rc = 0, n;

    if (o == NULL || addrs == NULL)
        return DLOCK_ERR_INVAL;
    if ((copy = strdup(addrs)) == NULL)
        return DLOCK_ERR_NOMEM;
    n = o->naddrs;
    for (tok = strtok_r(copy, ", \t", &save); tok != NULL && rc == 0; tok = strtok_r(NULL, ", \t", &save)) {
        if (n >= DL_MAX_ADDRS || dl_addr_parse(tok, &o->addrs[n]) < 0)
            rc = DLOCK_ERR_INVAL;
        else
            n++;
    }
    free(copy);
    if (rc == 0 && n == o->naddrs)
        rc = DLOCK_ERR_INVAL;
    if (rc == 0)
        o->naddrs = n; /* all or nothing */
    return rc;
}

int dlock_options_set_ttl(dlock_options_t *o, long long ttl_ms)
{
    if (o == NULL || ttl_ms < 0 || ttl_ms > PROTO_DURATION_MAX)
        return DLOCK_ERR_INVAL;
    o->ttl_ms = ttl_ms;
    return 0;
}

int dlock_options_set_name(dlock_options_t *o, const char *name)
{
    if (o == NULL || name == NULL || !dl_valid_value(name))
        return DLOCK_ERR_INVAL;
    snprintf(o->name, sizeof(o->name), "%s", name);
    return 0;
}

int dlock_options_set_password(dlock_options_t *o, const char *password)
{
    if (o == NULL || password == NULL || !dl_valid_value(password))
        return DLOCK_ERR_INVAL;
    snprintf(o->password, sizeof(o->password), "%s", password);
    return 0;
}

int dlock_options_set_timeouts(dlock_options_t *o, long long connect_ms, long long request_ms)
{
    if (o == NULL || connect_ms < 0 || request_ms < 0 || connect_ms > PROTO_DURATION_MAX ||
        request_ms > PROTO_DURATION_MAX)
        return DLOCK_ERR_INVAL;
    if (connect_ms > 0)
        o->connect_ms = connect_ms;
    if (request_ms > 0)
        o->request_ms = request_ms;
    return 0;
}

int dlock_options_set_event_callback(dlock_options_t *o, dlock_event_cb cb, void *arg)
{
    if (o == NULL)
        return DLOCK_ERR_INVAL;
    o->cb = cb;
    o->cbarg = arg;
    return 0;
}
