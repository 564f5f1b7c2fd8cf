/* dict.c - chained hash table with FNV-1a, doubled when full. None of the
 * libraries dlockd links exports a general-purpose table, so it is here. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dict.h"
#include "log.h"
#include "mem.h"

struct entry {
    struct entry *next;
    void *val;
    char key[]; /* NUL-terminated copy */
};

struct dict {
    struct entry **slots;
    size_t nslots; /* a power of two */
    size_t n;      /* entries */
};

/* Entries are as small and as long-lived as the holds they often index. */
static void entry_free(struct entry *e)
{
    mem_free(e, sizeof(*e) + strlen(e->key) + 1);
}

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;

    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 1099511628211ULL;
    }
    return h;
}

static struct entry **slot_of(const struct dict *d, const char *key)
{
    return &d->slots[hash(key) & (d->nslots - 1)];
}

struct dict *dict_new(void)
{
    struct dict *d = must(calloc(1, sizeof(*d)));

    d->slots = must(calloc(16, sizeof(*d->slots)));
    d->nslots = 16;
    return d;
}

void dict_free(struct dict *d)
{
    for (size_t i = 0; i < d->nslots; i++) {
        struct entry *e = d->slots[i];
        while (e) {
            struct entry *next = e->next;
            entry_free(e);
            e = next;
        }
    }
    free(d->slots);
    free(d);
}

static struct entry **find(const struct dict *d, const char *key)
{
    struct entry **ep = slot_of(d, key);

    while (*ep && strcmp((*ep)->key, key) != 0)
        ep = &(*ep)->next;
    return ep;
}

void *dict_get(const struct dict *d, const char *key)
{
    struct entry *e = *find(d, key);

    return e ? e->val : NULL;
}

static void grow(struct dict *d)
{
    struct entry **old = d->slots;
    size_t nold = d->nslots;

    d->nslots *= 2;
    d->slots = must(calloc(d->nslots, sizeof(*d->slots)));
    for (size_t i = 0; i < nold; i++) {
        struct entry *e = old[i];
        while (e) {
            struct entry *next = e->next, **sp = slot_of(d, e->key);
            e->next = *sp;
            *sp = e;
            e = next;
        }
    }
    free(old);
}

const char *dict_set(struct dict *d, const char *key, void *val)
{
    struct entry **ep = find(d, key), *e = *ep;
    size_t len;

    if (e) {
        e->val = val;
        return e->key;
    }
    len = strlen(key);
    e = mem_alloc(sizeof(*e) + len + 1);
    e->next = NULL;
    e->val = val;
    memcpy(e->key, key, len + 1);
    *ep = e;
    if (++d->n > d->nslots)
        grow(d);
    return e->key;
}

void *dict_del(struct dict *d, const char *key)
{
    struct entry **ep = find(d, key), *e = *ep;
    void *val;

    if (e == NULL)
        return NULL;
    *ep = e->next;
    val = e->val;
    entry_free(e);
    d->n--;
    return val;
}

size_t dict_size(const struct dict *d)
{
    return d->n;
}

int dict_each(struct dict *d, int (*fn)(const char *key, void *val, void *arg), void *arg)
{
    for (size_t i = 0; i < d->nslots; i++) {
        struct entry *e = d->slots[i];
        while (e) {
            struct entry *next = e->next;
            int rc = fn(e->key, e->val, arg);
            if (rc)
                return rc;
            e = next;
        }
    }
    return 0;
}

size_t dict_scan(struct dict *d, size_t cursor, int (*fn)(const char *key, void *val, void *arg), void *arg)
{
    struct entry *e, *next;

    if (cursor >= d->nslots)
        return 0;
    for (e = d->slots[cursor]; e != NULL; e = next) {
        next = e->next;
        fn(e->key, e->val, arg);
    }
    return cursor + 1 < d->nslots ? cursor + 1 : 0;
}
