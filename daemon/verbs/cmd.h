/* cmd.h - the command table: one handler per verb. */
#ifndef DLOCKD_CMD_H
#define DLOCKD_CMD_H

struct req;

/* Parses r's line and runs it; the handler replies now or later. */
void cmd_dispatch(struct req *r);
/* Runs an already parsed request (a repeat that takes over its id). */
void cmd_run(struct req *r);

#endif
