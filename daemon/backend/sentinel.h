/* sentinel.h - finds the Redis master through Redis Sentinel and hears when it switches. */
#ifndef DLOCKD_SENTINEL_H
#define DLOCKD_SENTINEL_H

struct dlockd;
struct addr;

/* The answer of sentinel_ask: master is the address the sentinels gave
 * (valid during the call only), or NULL with why no sentinel gave one. */
typedef void sentinel_found_cb(const struct addr *master, const char *why, void *arg);
/* Told when a sentinel announces +switch-master for our master: every
 * sentinel announces each switch, and one may announce an old one late. */
typedef void sentinel_switch_cb(const char *to, void *arg);

/*
 * The sentinels of d's config (sentinel, sentinel-master,
 * sentinel-password), not contacted yet; on_switch(to, arg) is called
 * with the new master's "HOST:PORT" on every switch heard.
 */
struct sentinel *sentinel_new(struct dlockd *d, sentinel_switch_cb *on_switch, void *arg);
/* Stops asking and watching; pending answers are not given. */
void sentinel_close(struct sentinel *s);
void sentinel_free(struct sentinel *s);
/* Keeps a pub/sub connection to every sentinel, on +switch-master, each
 * opened again with backoff whenever it drops. */
void sentinel_watch(struct sentinel *s);
/*
 * Asks the sentinels in turn, from the one that answered last, for the
 * master's address, each within backend-timeout; found is called once,
 * maybe before this returns. A new ask replaces one still running (whose
 * found is then not called).
 */
void sentinel_ask(struct sentinel *s, sentinel_found_cb *found, void *arg);

#endif
