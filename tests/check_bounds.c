/* check_bounds.c - bounded work in Redis: handoff in chunks, key expiry, STATUS size, limits on holds, waits and latches. */
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 7: ERR BACKEND changes nothing: an UNLOCK sent while Redis is paused past
 * backend-timeout does not run when Redis comes back, so the lock stays with
 * its holder and its waiter is not granted. */
START_TEST(test_backend_error_changes_nothing)
{
    struct h_conn *a, *b;
    long long token;
    const char *r;

    D = h_dlockd_start(R->port, H_ARGS("--backend-timeout", "500ms"));
    a = H_CLIENT(D, "name=a ttl=60s");
    b = H_CLIENT(D, "name=b ttl=60s");
    token = H_LOCK_NEW(a, "dl");
    ck_assert_int_eq(h_send(b, "#b LOCK dl wait=inf"), 0);
    ck_assert(h_wait_waiters(a, "dl", 1, 5000));
    h_redis_pause(R);
    H_REQ(a, "ERR BACKEND %*", "UNLOCK dl");
    h_sleep_ms(300);
    h_redis_resume(R);
    r = H_REQ(a, "OK {%*}", "STATUS dl");
    ck_assert_msg(h_json_has(r, "\"client\":\"a\"") && h_json_int(r, "token") == token && h_json_int(r, "waiters") == 1,
                  "after ERR BACKEND: %s", r);
    ck_assert_ptr_null(h_reply_tag(b, "b", 1000));
    H_REQ(a, "OK count=0", "UNLOCK dl");
    H_REPLY(b, "#b OK token=%d count=1", H_TIMEOUT);
}
END_TEST

static Suite *bounds_suite(void)
{
    Suite *s = suite_create("bounds");
    TCase *deadline = tcase_create("deadline");

    tcase_add_checked_fixture(deadline, h_setup_redis, h_teardown);
    tcase_add_test(deadline, test_backend_error_changes_nothing);
    suite_add_tcase(s, deadline);
    return s;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return h_run_suite(bounds_suite()) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
