/* counter.c - libdlock example: add 1 to the number in a file, N times, each time under the
 * exclusive lock "counter:FILE", so that any number of copies can run at once without losing
 * an update. The server is $DLOCK_ADDR (default 127.0.0.1:7411).
 *
 *     counter FILE [N]
 *
 * Build it against an installed libdlock with
 *     cc counter.c $(pkg-config --cflags --libs libdlock) -o counter */
#include <dlock.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_int lost; /* set by the callback: stop writing */

/* Runs on libdlock's thread: only note it, the main loop decides. */
static void on_event(dlock_t *h, const struct dlock_event *ev, void *arg)
{
    (void)h;
    (void)arg;
    if (ev->type == DLOCK_EVENT_LOST) {
        fprintf(stderr, "counter: lost %s (%s)\n", ev->name, ev->reason);
        atomic_store(&lost, 1);
    }
}

/* Reads the number, adds one, writes it back. Returns the new value, or -1. */
static long bump(const char *path)
{
    FILE *f = fopen(path, "r+");
    long v = 0;

    if (f == NULL && (f = fopen(path, "w+")) == NULL)
        return -1;
    if (fscanf(f, "%ld", &v) != 1)
        v = 0;
    rewind(f);
    fprintf(f, "%ld\n", ++v);
    return fclose(f) == 0 ? v : -1;
}

int main(int argc, char **argv)
{
    dlock_options_t *o = dlock_options_new();
    struct dlock_grant g;
    char name[256];
    dlock_t *h;
    int n = argc > 2 ? atoi(argv[2]) : 1, rc;

    if (argc < 2 || o == NULL) {
        fprintf(stderr, "usage: counter FILE [N]\n");
        return 2;
    }
    snprintf(name, sizeof name, "counter:%s", argv[1]);
    dlock_options_set_name(o, "counter-example");
    dlock_options_set_event_callback(o, on_event, NULL);
    rc = dlock_connect(&h, o); /* no address given: $DLOCK_ADDR */
    dlock_options_free(o);
    if (rc != 0) {
        fprintf(stderr, "counter: connect: %s\n", dlock_strerror(rc));
        return 1;
    }
    for (int i = 0; i < n && !atomic_load(&lost); i++) {
        if ((rc = dlock_lock(h, name, 0, 10000, &g)) != 0) {
            fprintf(stderr, "counter: lock %s: %s\n", name, dlock_strerror(rc));
            break;
        }
        /* A real resource would be handed g.token and refuse writes with older tokens. */
        long v = dlock_held(h, name) > 0 ? bump(argv[1]) : -1;
        printf("%s: %ld (token %llu)\n", argv[1], v, g.token);
        if ((rc = dlock_unlock(h, name, 0)) < 0)
            fprintf(stderr, "counter: unlock: %s\n", dlock_strerror(rc));
    }
    dlock_close(h);
    return rc < 0 || atomic_load(&lost) ? 1 : 0;
}
