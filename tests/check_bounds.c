/* check_bounds.c - bounded work in Redis: handoff in chunks, key expiry, STATUS size, limits on holds, waits and latches. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static Suite *bounds_suite(void)
{
    Suite *s = suite_create("bounds");

    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(bounds_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
