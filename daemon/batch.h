/* batch.h - the operations asked for in one turn of the event loop, sent to Redis as one script call. */
#ifndef DLOCKD_BATCH_H
#define DLOCKD_BATCH_H

#include "contract.h"
#include "scripts.h"

struct dlockd;

/*
 * Adds operation op on names to the batch sent at the end of this turn of
 * the loop (at once when the batch is full). KEYS are the names' keys, the
 * operation's ARGV its names and then args (built by contract.c, NULL for
 * none; all copied). With bounded, Redis runs it only until a quarter short
 * of backend-timeout after it is sent (once a reply has shown Redis's
 * clock): a batch that starts later changes nothing, and cb (then late, if
 * given) gets NULL as for a timeout. cb gets the operation's own reply,
 * decoded; the grants of the whole batch are handed out before, and names
 * it left more to hand on are poked until nothing more fits. Returns 0, or
 * -1 when Redis cannot be asked now (cb is then not called).
 */
int batch_op(struct dlockd *d, enum op_id op, int bounded, int nnames, const char *const *names,
             const struct contract_args *args, contract_cb *cb, contract_cb *late, void *arg);
/* Answers the operations not sent yet as if Redis had not answered, and frees the batches. */
void batch_close(struct dlockd *d);

#endif
