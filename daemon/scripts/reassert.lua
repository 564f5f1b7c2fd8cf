-- reassert.lua: writes back a hold of this daemon that a new master may lack
-- (a failover to a replica that had not seen it, or a Redis restarted
-- empty), with the same hid, count and token, unless the name is taken in a
-- way that excludes it. It hands nothing on.
-- ARGV from A: hid, token, count, Redis lease from now (ms), lease recorded
-- with the hold (ms), bounded (0 or 1), client.
-- Reply fields: OK, then "kept" (it was there: its count is set and its lease starts again),
-- "restored" (written back) or "lost" (taken since, or another hold of the
-- session is there now).
local hid, token, count, ttl = ARGV[A], ARGV[A + 1], tonumber(ARGV[A + 2]), tonumber(ARGV[A + 3])
local lease, bounded, client = ARGV[A + 4], ARGV[A + 5], ARGV[A + 6]
local s = state(NAMES[1])
local mode = string.sub(hid, 1, 1)
local v = redis.call('HGET', s.h, hid)
if v then
    local h = hold_decode(v)
    if h.token ~= token or h.daemon == '-' then
        return reply('OK', 'lost')
    end
    -- A replica may have missed a reentry or a release of some counts.
    if mode == 'p' and count > h.count and inspect(s, hid, count - h.count) then
        return reply('OK', 'lost')
    end
    if mode == 'p' and redis.call('EXISTS', s.m) == 1 then
        add_used(s, count - h.count)
    end
    h.count, h.daemon = count, DAEMON
    redis.call('HSET', s.h, hid, hold_encode(h))
    redis.call('ZADD', s.x, at(NOW + ttl), hid)
    s.hchanged = true
    return reply('OK', 'kept')
end
local semaphore = redis.call('EXISTS', s.m) == 1
if (mode == 'p') ~= semaphore or redis.call('EXISTS', s.l) == 1 or inspect(s, hid, count) then
    return reply('OK', 'lost')
end
if mode == 'p' then
    add_used(s, count)
end
redis.call('HSET', s.h, hid, new_hold(count, token, lease, bounded, DAEMON, '-', client))
redis.call('ZADD', s.x, at(NOW + ttl), hid)
local last = redis.call('GET', s.t)
if not last or tonumber(last) < tonumber(token) then
    redis.call('SET', s.t, token, 'PX', TOKEN_KEEP_MS)
end
s.hchanged = true
return reply('OK', 'restored')
