-- acquire.lua: takes, refuses or queues permits of a semaphore.
-- ARGV from A: session:owner, client name, wid, wait (1 to queue), Redis
-- lease of a grant now (ms), lease recorded with the hold, bounded, lease of
-- the queue entry (ms), permits, limit, 1 when the daemon knows of a hold
-- or wait of session:owner on the name, else 0, and the Redis time (ms) at
-- which the request stops waiting (0 for never), as in lock.lua.
-- Reply fields: OK token held free | BUSY free | WAIT retry-ms |
-- WRONGTYPE name | MISMATCH limit.
local who, client, wid = ARGV[A], ARGV[A + 1], ARGV[A + 2]
local wait, ttl, lease, bounded, qttl = ARGV[A + 3] == '1', tonumber(ARGV[A + 4]), tonumber(ARGV[A + 5]),
    ARGV[A + 6], tonumber(ARGV[A + 7])
local k, limit, known, ends = tonumber(ARGV[A + 8]), tonumber(ARGV[A + 9]), ARGV[A + 10], tonumber(ARGV[A + 11])
local s, hid = S[1], 'p' .. who

if redis.call('EXISTS', s.l) == 1
    or (redis.call('EXISTS', s.m) == 0 and redis.call('EXISTS', s.h, s.q) > 0) then
    return reply('WRONGTYPE', s.name)
end
local current = redis.call('HGET', s.m, 'limit')
if current and tonumber(current) ~= limit then
    return reply('MISMATCH', current)
end
redis.call('HSET', s.m, 'limit', limit)
s.hchanged = true
if wait and redis.call('ZSCORE', s.q, wid) then
    return reply('WAIT', retry_after(S))
end

-- Permits are FIFO: nobody, not even a holder, overtakes a waiter.
local blocked, own, free = inspect(s, hid, k)
if own and known == '0' then
    drop_unknown(s, who, 'p')
    blocked, own, free = inspect(s, hid, k)
end
if not blocked and redis.call('EXISTS', s.q) == 0 then
    local token, held = grant(s, hid, k, NOW + ttl, lease, bounded, DAEMON, wid, client)
    return reply('OK', token, held, free - k)
end
if not wait then
    return reply('BUSY', free)
end
local seq = redis.call('HINCRBY', s.w, '#seq', 1)
redis.call('ZADD', s.q, seq, wid)
redis.call('HSET', s.w, wid, table.concat({ hid, k, lease, bounded, client, s.name }, ' '))
redis.call('ZADD', s.x, entry_end(qttl, ends), '@' .. wid)
return reply('WAIT', retry_after(S))
