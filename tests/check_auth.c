/* check_auth.c - sessions with a secret, nothing before AUTH, per-connection limits, closes that free requests. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ---------------------------------------------------------------- framing (item 5) */

START_TEST(test_control_bytes)
{
    struct h_conn *c = H_CLIENT(D, "name=c"), *o = H_CLIENT(D, "name=o");
    static const char nul[] = "LOCK nb\0 shared\n";

    ck_assert_int_eq(h_send_raw(c, nul, sizeof(nul) - 1), 0);
    H_REPLY(c, "ERR SYNTAX NUL byte in request", H_TIMEOUT);
    H_REQ(c, "#t ERR SYNTAX control byte 0x01 in request", "#t LOCK nb\x01");
    H_REQ(c, "ERR SYNTAX control byte 0x0d in request", "LOCK nb\r shared");
    H_REQ(o, "OK {%*\"type\":null%*}", "STATUS nb");
    H_REQ(c, "OK token=%d count=1", "LOCK\tnb\tshared\r");
    /* '}' first would give the name's keys an empty hash tag; later it is fine. */
    H_REQ(c, "ERR SYNTAX bad name '}b'", "LOCK }b");
    H_LOCK_NEW(c, "b}");
}
END_TEST

static Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("shared");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_control_bytes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(auth_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
