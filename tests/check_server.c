/* check_server.c - listeners, admin endpoint and wait-for graph under attack: EMFILE, protected mode, deep chains. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static Suite *server_suite(void)
{
    Suite *s = suite_create("server");

    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(server_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
