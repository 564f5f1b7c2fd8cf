/* check_auth.c - sessions with a secret, nothing before AUTH, per-connection limits, closes that free requests. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* ---------------------------------------------------------------- framing (item 5) and long replies (item 6) */

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

START_TEST(test_long_reply)
{
    char name[256], hello[300], owner[200];
    struct h_conn *c;
    const char *r;
    size_t len;

    memset(name, 'n', 200);
    name[200] = '\0';
    snprintf(hello, sizeof hello, "name=%s", name);
    c = H_CLIENT(D, hello);
    memset(owner, 'o', 190);
    owner[190] = '\0';
    for (int i = 0; i < 40; i++)
        H_REQ(c, "OK token=%d count=1", "LOCK big shared owner=%s%02d", owner, i);
    /* Pipelined: a reply dropped for its size would pair the next one with STATUS. */
    ck_assert_int_eq(h_send(c, "STATUS big\nPING"), 0);
    r = H_REPLY(c, "OK {%*}", H_TIMEOUT);
    len = strlen(r);
    ck_assert_msg(len > 16384, "STATUS of 40 holders is only %zu bytes", len);
    ck_assert_ptr_nonnull(strstr(r, "o39\""));
    H_REPLY(c, "OK", H_TIMEOUT);
}
END_TEST

static Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("shared");

    tcase_add_checked_fixture(tc, h_setup_both, h_teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_control_bytes);
    tcase_add_test(tc, test_long_reply);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(auth_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
