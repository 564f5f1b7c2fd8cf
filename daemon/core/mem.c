/* mem.c - small objects that live as long as a hold (holds, names, table
 * entries) are packed in blocks of their own, one size class per block, as
 * memcached's slabs are. Allocated on the heap, between the much larger
 * requests, waits and Redis buffers of the burst that made them, they would
 * keep every page of that burst resident once it is freed. Blocks are mapped
 * apart from the heap, and a block whose objects are all freed is unmapped
 * (one empty block per class is kept). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/queue.h>

#ifdef HAVE_MALLOC_H
#include <malloc.h>
#endif

#include "log.h"
#include "mem.h"

#if defined(__SANITIZE_ADDRESS__)
#define MEM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEM_ASAN 1
#endif
#endif

#ifdef MEM_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define BLOCK_SIZE ((size_t)64 * 1024) /* a block is aligned to its size */
#define STEP 16                        /* size classes: 16, 32, ... MEM_SMALL_MAX */
#define CLASSES (MEM_SMALL_MAX / STEP)

struct cell {
    struct cell *next;
};

struct block {
    LIST_ENTRY(block) room; /* in its class's list of blocks with room, unless full or spare */
    struct cell *free;      /* cells freed, to be handed out again */
    char *fresh;            /* cells never handed out start here */
    size_t size;            /* of its cells */
    size_t used;            /* cells handed out */
};

#define CELLS_AT (((sizeof(struct block) + STEP - 1) / STEP) * STEP)

struct sizeclass {
    LIST_HEAD(, block) room; /* blocks with a cell free or fresh */
    struct block *spare; /* an empty block, kept so that one object coming and going maps nothing */
};

static struct sizeclass classes[CLASSES];
static size_t nblocks, nobjects;

static struct block *block_of(void *p)
{
    return (struct block *)((uintptr_t)p & ~(uintptr_t)(BLOCK_SIZE - 1));
}

static void block_reset(struct block *b, size_t size)
{
    *b = (struct block){ .size = size, .fresh = (char *)b + CELLS_AT };
    POISON(b->fresh, BLOCK_SIZE - CELLS_AT);
}

/* Maps twice the size and unmaps what lies outside one aligned block. */
static struct block *block_new(size_t size)
{
    char *p = mmap(NULL, 2 * BLOCK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *b, *end;

    if (p == MAP_FAILED)
        fatal("mem: mmap");
    b = (char *)(((uintptr_t)p + BLOCK_SIZE - 1) & ~(uintptr_t)(BLOCK_SIZE - 1));
    end = p + 2 * BLOCK_SIZE;
    if (b > p)
        munmap(p, (size_t)(b - p));
    if (end > b + BLOCK_SIZE)
        munmap(b + BLOCK_SIZE, (size_t)(end - b - BLOCK_SIZE));
    block_reset((struct block *)b, size);
    nblocks++;
    return (struct block *)b;
}

static void block_drop(struct block *b)
{
    UNPOISON(b, BLOCK_SIZE); /* whatever is mapped here next starts clean */
    munmap(b, BLOCK_SIZE);
    nblocks--;
}

static int block_full(const struct block *b)
{
    return b->free == NULL && b->fresh + b->size > (const char *)b + BLOCK_SIZE;
}

void *mem_alloc(size_t size)
{
    struct sizeclass *sc;
    struct block *b;
    void *p;

    if (size > MEM_SMALL_MAX) {
        p = must(calloc(1, size));
        return p;
    }
    sc = &classes[size == 0 ? 0 : (size - 1) / STEP];
    if ((b = LIST_FIRST(&sc->room)) == NULL) {
        if ((b = sc->spare) != NULL)
            sc->spare = NULL;
        else
            b = block_new((size_t)(sc - classes + 1) * STEP);
        LIST_INSERT_HEAD(&sc->room, b, room);
    }
    if (b->free) {
        p = b->free;
        UNPOISON(p, sizeof(struct cell));
        b->free = b->free->next;
        POISON(p, b->size);
    } else {
        p = b->fresh;
        b->fresh += b->size;
    }
    if (++b->used, block_full(b))
        LIST_REMOVE(b, room);
    nobjects++;
    UNPOISON(p, size); /* under ASan, the rest of the cell stays out of bounds */
    memset(p, 0, size);
    return p;
}

void mem_free(void *p, size_t size)
{
    struct sizeclass *sc;
    struct block *b;
    struct cell *c = p;
    int was_full;

    if (p == NULL)
        return;
    if (size > MEM_SMALL_MAX) {
        free(p);
        return;
    }
    sc = &classes[size == 0 ? 0 : (size - 1) / STEP];
    b = block_of(p);
    was_full = block_full(b);
    UNPOISON(c, sizeof(*c));
    c->next = b->free;
    b->free = c;
    POISON(c, b->size);
    b->used--;
    nobjects--;
    if (b->used == 0) {
        if (!was_full)
            LIST_REMOVE(b, room);
        if (sc->spare == NULL) {
            block_reset(b, b->size);
            sc->spare = b;
        } else {
            block_drop(b);
        }
    } else if (was_full) {
        LIST_INSERT_HEAD(&sc->room, b, room);
    }
}

void mem_trim(void)
{
#ifdef HAVE_MALLOC_TRIM
    malloc_trim(0); /* a few ms for a heap of 50 MB */
#endif
}

void mem_usage(struct mem_usage *u)
{
    u->blocks = nblocks;
    u->objects = nobjects;
}
