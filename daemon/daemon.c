/* daemon.c - the calls of the lower layers up to the ones above them (hooks.h, and
 * the owner of the Redis link): the only place that knows every layer. */
#include <sys/queue.h>

#include "batch.h"
#include "cmd.h"
#include "conn.h"
#include "daemon.h"
#include "hold.h"
#include "hooks.h"
#include "latch.h"
#include "renew.h"
#include "reqid.h"
#include "session.h"
#include "wait.h"

static void session_ending(struct session *s, int expired)
{
    reqid_free_session(s); /* first: no repeat may start on a session that is ending */
    wait_abandon_session(s);
    hold_release_session(s, expired);
}

static void session_forget(struct session *s)
{
    struct hold *h;

    reqid_free_session(s);
    wait_abandon_session(s);
    while ((h = TAILQ_FIRST(&s->holds)) != NULL)
        hold_remove(s->d, h);
}

static void on_message(struct dlockd *d, int latch, const char *msg)
{
    if (latch)
        latch_on_message(d, msg);
    else
        wait_on_message(d, msg);
}

const struct hooks daemon_hooks = {
    .session_ending = session_ending,
    .session_forget = session_forget,
    .session_left = conn_session_ended,
    .dispatch = cmd_dispatch,
    .run = cmd_run,
    .answered = reqid_answered,
    .dropped = reqid_dropped,
    .script = batch_op,
};

const struct redis_owner daemon_redis_owner = {
    .broadcast = conn_broadcast,
    .message = on_message,
    .renew = renew_now,
};
