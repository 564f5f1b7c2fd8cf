/* batch.h - the operations asked for in one turn of the event loop, sent to Redis as one script call per hash slot. */
#ifndef DLOCKD_BATCH_H
#define DLOCKD_BATCH_H

#include "contract.h"
#include "scripts.h"

struct dlockd;

/*
 * Adds operation op on names to the batch sent at the end of this turn of
 * the loop (at once when the batch is full). KEYS are the names' keys, the
 * operation's ARGV its names and then args (built by contract.c, NULL for
 * none; all copied), and the record args->record carries, if any, in KEYS
 * after its names' keys (record_carried). With BATCH_BOUNDED in flags, Redis runs it only until a quarter short
 * of backend-timeout after it is sent (once a reply has shown Redis's
 * clock): a batch that starts later changes nothing, and cb (then late, if
 * given) gets NULL as for a timeout. cb gets the operation's own reply,
 * decoded; the grants of the whole batch are handed out before, and names
 * it left more to hand on are poked until nothing more fits. Returns 0, or
 * -1 when Redis cannot be asked now (cb is then not called).
 */
#define BATCH_BOUNDED 1 /* flags of batch_op: with a deadline */
#define BATCH_UNGATED 2 /* sent even while the gate is closed */

int batch_op(struct dlockd *d, enum op_id op, int flags, int nnames, const char *const *names,
             const struct contract_args *args, contract_cb *cb, contract_cb *late, void *arg);
/* The hash slot (redis_slot) of name's keys: an operation goes to its first name's batch. 0 but with Redis Cluster. */
int batch_slot(const struct dlockd *d, const char *name);
/* 1 when the names are in different hash slots: one script cannot take them together. */
int batch_spans(const struct dlockd *d, int nnames, const char *const *names);
/*
 * Closes the gate for ms from now (or longer, when it already is): batches
 * without BATCH_UNGATED are kept, in order, and sent when it opens, at most
 * BATCH_WINDOW calls in flight (renewals go first); those kept longer than
 * gate-wait are answered as if Redis had not answered. After a
 * failover nothing may be granted or handed on until every daemon could
 * write back the holds the new master lacks.
 */
void batch_gate(struct dlockd *d, int64_t ms);
/*
 * Keeps the gate closed (on 1) past the end of batch_gate's ms, until
 * called with 0: this daemon's own holds must be back on a new master
 * before it grants anything, however long that takes.
 */
void batch_gate_hold(struct dlockd *d, int on);
/* 1 while the gate is closed. */
int batch_gated(const struct dlockd *d);
/*
 * When the gate opens, as "2006-01-02T15:04:05Z" (UTC) in buf, or a phrase
 * when that waits for the write-back; "" while it is open. Returns its text.
 */
const char *batch_gated_until(const struct dlockd *d, char *buf, size_t len);
/*
 * What the layers above hear of every batch, set once (batch_listen):
 * sending, just before its call goes out (the session records' changes go
 * first, so a hold is in its record before Redis can grant it); granted,
 * the grants its reply hands out, before its operations hear their replies.
 */
struct batch_listener {
    void (*sending)(struct dlockd *d);
    void (*granted)(struct dlockd *d, const struct contract_batch *head);
};
void batch_listen(struct dlockd *d, const struct batch_listener *l);
/* Answers the operations not sent yet (kept ones too) as if Redis had not answered, and frees the batches. */
void batch_close(struct dlockd *d);

#endif
