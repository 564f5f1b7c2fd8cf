/* mem.h - where the small objects that live as long as a hold live, and the
 * heap given back after a burst of requests. */
#ifndef DLOCKD_MEM_H
#define DLOCKD_MEM_H

#include <stddef.h>

#define MEM_SMALL_MAX 512 /* larger objects come from the heap */

/*
 * Returns size zeroed bytes, aligned to 16, from blocks kept apart from the
 * heap (objects over MEM_SMALL_MAX come from calloc). Never NULL: out of
 * memory is fatal. Free it with mem_free and the same size.
 */
void *mem_alloc(size_t size);
void mem_free(void *p, size_t size);

/* Gives the heap's free pages back to the system (a no-op without malloc_trim). */
void mem_trim(void);

/* Blocks mapped for small objects, and the objects in them (for tests). */
struct mem_usage {
    size_t blocks;
    size_t objects;
};
void mem_usage(struct mem_usage *u);

#endif
