/* recipe.c - the yardstick of the benchmark: the lock a user writes with hiredis
 * instead of running dlockd, an acquire and a release script called with
 * EVALSHA; its key names, its arguments and what its replies mean. */
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "bench.h"

#define RECIPE_PREFIX "recipe:"

/* KEYS: lock, fencing counter; ARGV: owner, lease ms. The token, or nil when the lock is held. */
const char recipe_acquire_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return false end\n"
    "local token = redis.call('INCR', KEYS[2])\n"
    "redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token)\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "return token\n";

/* KEYS: lock; ARGV: owner. 1 when the owner held it and it is gone, else 0. */
const char recipe_release_lua[] =
    "if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then\n"
    "    redis.call('DEL', KEYS[1])\n"
    "    return 1\n"
    "end\n"
    "return 0\n";

void recipe_acquire(const struct bench *b, const char *owner, const char *name, struct recipe_call *rc)
{
    /* one hash tag, as a user who may move to Redis Cluster writes it */
    snprintf(rc->lock, sizeof(rc->lock), RECIPE_PREFIX "{%s}", name);
    snprintf(rc->counter, sizeof(rc->counter), RECIPE_PREFIX "{%s}:t", name);
    snprintf(rc->lease, sizeof(rc->lease), "%d", BENCH_LEASE_MS);
    rc->argc = 0;
    rc->argv[rc->argc++] = "EVALSHA";
    rc->argv[rc->argc++] = b->sha_acquire;
    rc->argv[rc->argc++] = "2";
    rc->argv[rc->argc++] = rc->lock;
    rc->argv[rc->argc++] = rc->counter;
    rc->argv[rc->argc++] = owner;
    rc->argv[rc->argc++] = rc->lease;
}

void recipe_release(const struct bench *b, const char *owner, const char *name, struct recipe_call *rc)
{
    snprintf(rc->lock, sizeof(rc->lock), RECIPE_PREFIX "{%s}", name);
    rc->argc = 0;
    rc->argv[rc->argc++] = "EVALSHA";
    rc->argv[rc->argc++] = b->sha_release;
    rc->argv[rc->argc++] = "1";
    rc->argv[rc->argc++] = rc->lock;
    rc->argv[rc->argc++] = owner;
}

enum status recipe_acquired(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER && r->integer > 0)
        return ST_OK;
    if (r->type == REDIS_REPLY_NIL)
        return ST_BUSY;
    return ST_ERR;
}

enum status recipe_released(const redisReply *r)
{
    return r->type == REDIS_REPLY_INTEGER && r->integer == 1 ? ST_OK : ST_ERR;
}
