/* holds.c - the hold table of a handle: (name, owner, mode) -> count, token, lost. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static unsigned bucket(const char *name, const char *owner, enum dl_mode mode)
{
    uint32_t h = 2166136261u; /* FNV-1a */

    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ 0xffu) * 16777619u;
    for (const char *p = owner; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    h = (h ^ (unsigned)mode) * 16777619u;
    return h % DL_HOLD_BUCKETS;
}

struct dl_hold *holds_find(struct dl_holds *t, const char *name, const char *owner, enum dl_mode mode)
{
    for (struct dl_hold *hd = t->b[bucket(name, owner, mode)]; hd; hd = hd->next)
        if (hd->mode == mode && strcmp(hd->name, name) == 0 && strcmp(hd->owner, owner) == 0)
            return hd;
    return NULL;
}

static void hold_free(struct dl_hold *hd)
{
    free(hd->name);
    free(hd->owner);
    free(hd);
}

void holds_remove(struct dl_holds *t, struct dl_hold *hd)
{
    struct dl_hold **pp = &t->b[bucket(hd->name, hd->owner, hd->mode)];

    while (*pp != hd)
        pp = &(*pp)->next;
    *pp = hd->next;
    hold_free(hd);
}

int holds_set(struct dl_holds *t, const char *name, const char *owner, enum dl_mode mode, int count,
              unsigned long long token)
{
    struct dl_hold *hd = holds_find(t, name, owner, mode);

    if (count <= 0) {
        if (hd != NULL)
            holds_remove(t, hd);
        return 0;
    }
    if (hd == NULL) {
        unsigned b = bucket(name, owner, mode);

        if ((hd = calloc(1, sizeof(*hd))) == NULL || (hd->name = strdup(name)) == NULL ||
            (hd->owner = strdup(owner)) == NULL) {
            if (hd)
                free(hd->name);
            free(hd);
            return -1;
        }
        hd->mode = mode;
        hd->next = t->b[b];
        t->b[b] = hd;
    }
    hd->count = count;
    if (token != 0)
        hd->token = token;
    hd->lost = 0;
    return 0;
}

void holds_foreach(struct dl_holds *t, void (*fn)(struct dl_hold *hd, void *arg), void *arg)
{
    for (int i = 0; i < DL_HOLD_BUCKETS; i++)
        for (struct dl_hold *hd = t->b[i]; hd; hd = hd->next)
            fn(hd, arg);
}

void holds_clear(struct dl_holds *t)
{
    for (int i = 0; i < DL_HOLD_BUCKETS; i++) {
        while (t->b[i]) {
            struct dl_hold *hd = t->b[i];
            t->b[i] = hd->next;
            hold_free(hd);
        }
    }
}

int holds_count(const struct dl_hold *hd)
{
    return hd->lost ? DLOCK_ERR_LOST : hd->count;
}
