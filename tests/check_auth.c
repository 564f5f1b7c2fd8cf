/* check_auth.c - sessions with a secret, nothing before AUTH, per-connection limits, closes that free requests. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");

    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(auth_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
