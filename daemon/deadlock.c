/* deadlock.c - finds a cycle in the wait-for graph before a request waits:
 * an edge runs from a waiting owner to every local owner holding a name it
 * waits for in a conflicting mode. */
#include <string.h>

#include "deadlock.h"
#include "dict.h"
#include "dlockd.h"
#include "hold.h"
#include "session.h"
#include "wait.h"

/* 1 when hold h keeps who from holding its name in mode. */
static int blocks(const struct hold *h, const char *who, char mode)
{
    if (h->hid[0] == 'p' || strcmp(h->hid + 1, who) == 0)
        return 0;
    return mode == 'x' || h->hid[0] == 'x';
}

/* 1 when who's holders (transitively) include target. */
static int reaches(struct dlockd *d, struct dict *seen, const char *target, const char *who, char mode, int nnames,
                   const char *const *names)
{
    for (int i = 0; i < nnames; i++) {
        struct lname *ln = hold_name(d, names[i]);
        struct hold *h;

        if (ln == NULL)
            continue;
        TAILQ_FOREACH(h, &ln->holds, in_name) {
            const char *holder = h->hid + 1;
            struct wait *w;

            if (!blocks(h, who, mode) || dict_get(seen, holder))
                continue;
            if (strcmp(holder, target) == 0)
                return 1;
            dict_set(seen, holder, h);
            TAILQ_FOREACH(w, &h->s->waits, in_session) {
                if (w->kind == WAIT_LOCK && strcmp(w->hid + 1, holder) == 0 &&
                    reaches(d, seen, target, holder, w->hid[0], w->nnames, (const char *const *)w->names))
                    return 1;
            }
        }
    }
    return 0;
}

int deadlock_check(struct dlockd *d, const char *who, char mode, int nnames, const char *const *names)
{
    struct dict *seen = dict_new();
    int cycle = reaches(d, seen, who, who, mode, nnames, names);

    dict_free(seen);
    return cycle;
}
