-- latch.lua: creates a count-down latch, counts it down, or reads it.
-- ARGV from A: op (create, countdown or read), n (count or decrement), ttl (ms).
-- Reply fields: OK count ttl-ms (-1 without a latch) created (1 when this
-- call made it) | WRONGTYPE name.
-- Reaching 0 deletes the latch and publishes its name on the latch channel,
-- which every daemon hears.
local op, n, ttl = ARGV[A], tonumber(ARGV[A + 1]), tonumber(ARGV[A + 2])
local s = S[1]

if redis.call('EXISTS', s.h, s.q, s.m) > 0 then
    return reply('WRONGTYPE', s.name)
end
local count, created = tonumber(redis.call('GET', s.l) or '0'), 0
if op == 'create' and count == 0 and n > 0 then
    redis.call('SET', s.l, n, 'PX', ttl)
    count, created = n, 1
elseif op == 'countdown' and count > 0 then
    count = math.max(count - n, 0)
    if count == 0 then
        redis.call('DEL', s.l)
        redis.call('PUBLISH', PREFIX .. 'latch', s.name)
    else
        redis.call('SET', s.l, count, 'KEEPTTL')
    end
end
return reply('OK', count, count > 0 and redis.call('PTTL', s.l) or -1, created)
