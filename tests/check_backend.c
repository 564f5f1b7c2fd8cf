/* check_backend.c - Redis as a trustworthy backend: eviction policy, script errors, jeopardy and SAFE, reconnects. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static Suite *backend_suite(void)
{
    Suite *s = suite_create("backend");

    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(backend_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
