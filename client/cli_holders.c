/* cli_holders.c - dlock run --verbose: who holds the names a run waits for and how many wait
 * before it, from STATUS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli.h"

#define HOLDERS_SHOWN 3 /* holders named per name; the others are counted */

/* "client (session S)" of the holders of st, the first few of them, into buf. */
static void holders_text(json_t *st, char *buf, size_t len)
{
    json_t *holders = json_object_get(st, "holders"), *hd;
    size_t i, n = json_array_size(holders), used = 0;
    long long more = json_integer_value(json_object_get(st, "more"));

    buf[0] = '\0';
    json_array_foreach(holders, i, hd) {
        const char *client = json_string_value(json_object_get(hd, "client"));
        const char *session = json_string_value(json_object_get(hd, "session"));

        if (i == HOLDERS_SHOWN || used >= len)
            break;
        used += (size_t)snprintf(buf + used, len - used, "%s%s (session %s)", i ? ", " : "", client ? client : "?",
                                 session ? session : "?");
    }
    more += n > HOLDERS_SHOWN ? (long long)(n - HOLDERS_SHOWN) : 0;
    if (more > 0 && used < len)
        snprintf(buf + used, len - used, " and %lld more", more);
}

/* One line about name from its STATUS document, when it is in use. */
static void tell_one(const struct cli *c, const char *name, json_t *st)
{
    long long waiters = json_integer_value(json_object_get(st, "waiters"));
    char who[1024];

    if (!json_is_string(json_object_get(st, "type")))
        return; /* free now: not what the wait is for */
    holders_text(st, who, sizeof(who));
    cli_msg(c, "waiting", "%s: held by %s; %lld waiting before us (position %lld in the queue)", name,
            who[0] ? who : "nobody (only queued requests)", waiters, waiters + 1);
}

void cli_tell_holders(const struct cli *c, dlock_t *h, const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        char *text = NULL;
        json_t *st;
        int rc = dlock_status(h, names[i], &text);

        if (rc != 0) {
            cli_msg(c, "waiting", "%s: cannot tell who holds it: %s", names[i], dlock_strerror(rc));
            continue;
        }
        if ((st = json_loads(text, 0, NULL)) != NULL)
            tell_one(c, names[i], st);
        json_decref(st);
        free(text);
    }
}
