-- lock.lua: grants, re-enters, refuses or queues one request for a lock.
-- ARGV: 3 hid, 4 client name, 5 wid, 6 wait (1 to queue), 7 Redis lease of a
-- grant now (ms), 8 lease recorded with the hold, 9 bounded (1 with lease=),
-- 10 lease of the queue entry (ms).
-- Reply fields: OK token count | BUSY holder ttl | WAIT retry-ms.
local hid, client, wid = ARGV[3], ARGV[4], ARGV[5]
local wait, ttl, lease, bounded, qttl =
    ARGV[6] == '1', tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10])

if wait and redis.call('ZSCORE', K_QUEUE, wid) then
    return reply('WAIT', retry_after())
end
-- Reentry, downgrade and an upgrade nobody blocks skip the queue; others
-- are granted only when nobody waits.
local f, v, own = inspect(hid)
if not f and (own or redis.call('EXISTS', K_QUEUE) == 0) then
    local token, count = grant(hid, NOW + ttl, lease, bounded, DAEMON, wid, client)
    return reply('OK', token, count)
end

if not wait then
    if not f then
        local all = redis.call('HGETALL', K_HOLDS)
        f, v = all[1], all[2]
    end
    local holder, left = '-', 0
    if f then
        local h = hold_decode(v)
        left = math.max((tonumber(redis.call('ZSCORE', K_EXP, f)) or NOW) - NOW, 0)
        -- A live daemon renews every lease/3: a hold past that is presumed orphaned.
        if h.bounded == '1' or left >= h.lease / 3 then
            holder = h.client
        end
    end
    return reply('BUSY', holder, left)
end

local seq = redis.call('HINCRBY', K_WAIT, '#seq', 1)
redis.call('ZADD', K_QUEUE, seq, wid)
redis.call('HSET', K_WAIT, wid, table.concat({ hid, lease, bounded, client }, ' '))
redis.call('ZADD', K_EXP, NOW + qttl, '@' .. wid)
return reply('WAIT', retry_after())
