/* dict.h - a string-keyed hash table of pointers. */
#ifndef DLOCKD_DICT_H
#define DLOCKD_DICT_H

#include <stddef.h>

struct dict;

struct dict *dict_new(void);
/* Frees the table and its key copies, not the values. */
void dict_free(struct dict *d);
/* The value stored under key, or NULL. */
void *dict_get(const struct dict *d, const char *key);
/*
 * Stores val under a copy of key, replacing any value there. Returns the
 * copy, which lives until the entry is deleted.
 */
const char *dict_set(struct dict *d, const char *key, void *val);
/* Removes key; returns its value, or NULL. */
void *dict_del(struct dict *d, const char *key);
size_t dict_size(const struct dict *d);
/*
 * Calls fn for every entry. fn may delete the entry it is given, and no
 * other. Returns the first non-zero result of fn, which stops the walk.
 */
int dict_each(struct dict *d, int (*fn)(const char *key, void *val, void *arg), void *arg);
/*
 * A walk in steps: calls fn (whose result is ignored) for the entries of the
 * slot at cursor, and returns the cursor of the next step, 0 when the walk
 * is over; the first step takes cursor 0. Between steps the table may
 * change: an entry there all along is seen at least once (twice if the
 * table grew meanwhile).
 */
size_t dict_scan(struct dict *d, size_t cursor, int (*fn)(const char *key, void *val, void *arg), void *arg);

#endif
