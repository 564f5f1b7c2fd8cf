/* reply.h - hiredis reply objects, each reply's in one arena: read with no allocation per element. */
#ifndef DLOCKD_REPLY_H
#define DLOCKD_REPLY_H

#include <hiredis/hiredis.h>

/* Makes c's reader build its replies in arenas. The replies are the usual redisReply trees, freed whole. */
void reply_arena_attach(redisContext *c);
/* Frees the chunks kept for the next replies (shutdown). */
void reply_arena_free_all(void);

#endif
