/* reply.c - the objects of a hiredis reply, built in one arena per reply:
 * a batch's reply has hundreds of elements, and hiredis's own functions
 * make two allocations for each and walk the tree to free them. Here a
 * reply's first chunk starts with its arena, then the root object; the
 * elements follow, and freeing the root frees the chunks. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/read.h>

#include "log.h"
#include "reply.h"

#define CHUNK_BYTES 8192
#define CHUNKS_KEPT 8 /* spare chunks of CHUNK_BYTES, so that a reply costs no malloc */

struct chunk {
    struct chunk *next;
    size_t size; /* of data */
    max_align_t data[];
};

/* Sits in the first chunk of a reply, just before its root object. */
struct arena {
    struct chunk *chunks; /* the one being filled first */
    size_t used;          /* bytes of its data used */
};

static struct {
    struct chunk *spare;
    int n;
} kept;

static struct chunk *chunk_new(size_t need)
{
    struct chunk *c;

    if (need <= CHUNK_BYTES && kept.spare) {
        c = kept.spare;
        kept.spare = c->next;
        kept.n--;
        return c;
    }
    if (need < CHUNK_BYTES)
        need = CHUNK_BYTES;
    c = must(malloc(sizeof(*c) + need));
    c->size = need;
    return c;
}

static void chunk_free(struct chunk *c)
{
    if (c->size == CHUNK_BYTES && kept.n < CHUNKS_KEPT) {
        c->next = kept.spare;
        kept.spare = c;
        kept.n++;
    } else {
        free(c);
    }
}

static size_t aligned(size_t n)
{
    return (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
}

/* n bytes for an object of task: in a new arena for a root, else in its root's. */
static void *alloc(const redisReadTask *task, size_t n)
{
    const redisReadTask *root = task;
    struct arena *a;
    struct chunk *c;
    char *p;

    n = aligned(n);
    if (task->parent == NULL) {
        c = chunk_new(aligned(sizeof(*a)) + n);
        c->next = NULL;
        a = (struct arena *)c->data;
        a->chunks = c;
        a->used = aligned(sizeof(*a)) + n;
        return (char *)c->data + aligned(sizeof(*a));
    }
    while (root->parent)
        root = root->parent;
    a = (struct arena *)((char *)root->obj - aligned(sizeof(*a)));
    c = a->chunks;
    if (a->used + n > c->size) {
        c = chunk_new(n);
        c->next = a->chunks;
        a->chunks = c;
        a->used = 0;
    }
    p = (char *)c->data + a->used;
    a->used += n;
    return p;
}

/* A new object of task's type with extra bytes after it, hung on its parent. */
static redisReply *object(const redisReadTask *task, size_t extra)
{
    redisReply *r = alloc(task, aligned(sizeof(*r)) + extra);

    memset(r, 0, sizeof(*r));
    r->type = task->type;
    if (task->parent) {
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    redisReply *r = object(task, len + 1);

    r->str = (char *)r + aligned(sizeof(*r));
    memcpy(r->str, str, len);
    r->str[len] = '\0';
    r->len = len;
    return r;
}

static void *create_array(const redisReadTask *task, int elements)
{
    redisReply *r = object(task, (size_t)elements * sizeof(redisReply *));

    r->elements = (size_t)elements;
    r->element = elements > 0 ? (redisReply **)((char *)r + aligned(sizeof(*r))) : NULL;
    if (elements > 0)
        memset(r->element, 0, (size_t)elements * sizeof(redisReply *));
    return r;
}

static void *create_integer(const redisReadTask *task, long long value)
{
    redisReply *r = object(task, 0);

    r->integer = value;
    return r;
}

static void *create_nil(const redisReadTask *task)
{
    return object(task, 0);
}

/* hiredis frees only roots: a reply whole. */
static void free_object(void *obj)
{
    struct arena *a = (struct arena *)((char *)obj - aligned(sizeof(struct arena)));
    struct chunk *c = a->chunks, *next;

    for (; c; c = next) {
        next = c->next;
        chunk_free(c);
    }
}

static redisReplyObjectFunctions functions = {
    create_string, create_array, create_integer, create_nil, free_object,
};

void reply_arena_attach(redisContext *c)
{
    c->reader->fn = &functions;
}

void reply_arena_free_all(void)
{
    while (kept.spare) {
        struct chunk *c = kept.spare;
        kept.spare = c->next;
        free(c);
    }
    kept.n = 0;
}
