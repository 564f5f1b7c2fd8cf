/* dict.c - chained hash table, doubled when full. None of the
 * libraries dlockd links exports a general-purpose table, so it is here. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

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
    uint64_t seed;
};

/* Entries are as small and as long-lived as the holds they often index. */
static void entry_free(struct entry *e)
{
    mem_free(e, sizeof(*e) + strlen(e->key) + 1);
}

/* Eight bytes a step (the keys are ids and names of 16 to 40 bytes, and a
 * request looks up several), then SplitMix64's finalizer, so that the low
 * bits that pick a slot depend on every byte. The seed is random per table:
 * names come from clients, who should not be able to pick colliding ones. */
static uint64_t hash(const struct dict *d, const char *s)
{
    size_t n = strlen(s);
    uint64_t h = d->seed ^ n, w;

    for (; n >= 8; n -= 8, s += 8) {
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    w = 0;
    memcpy(&w, s, n);
    h ^= w;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

static struct entry **slot_of(const struct dict *d, const char *key)
{
    return &d->slots[hash(d, key) & (d->nslots - 1)];
}

struct dict *dict_new(void)
{
    struct dict *d = must(calloc(1, sizeof(*d)));

    d->slots = must(calloc(16, sizeof(*d->slots)));
    d->nslots = 16;
    if (getrandom(&d->seed, sizeof(d->seed), 0) != sizeof(d->seed))
        d->seed = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)d;
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
