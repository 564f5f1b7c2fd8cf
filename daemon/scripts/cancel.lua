-- cancel.lua: takes a waiter out of the queue, or says it was granted first.
-- ARGV: 3 wid, 4 hid it waits for.
-- Reply fields: CANCELLED | GRANTED token count | GONE (its entry had lapsed).
local wid, hid = ARGV[3], ARGV[4]

if redis.call('ZSCORE', K_QUEUE, wid) then
    redis.call('ZREM', K_QUEUE, wid)
    redis.call('HDEL', K_WAIT, wid)
    redis.call('ZREM', K_EXP, '@' .. wid)
    advance(GRANTS)
    return reply('CANCELLED')
end
local v = redis.call('HGET', K_HOLDS, hid)
if v then
    local h = hold_decode(v)
    if h.wid == wid then
        return reply('GRANTED', h.token, h.count)
    end
end
return reply('GONE')
