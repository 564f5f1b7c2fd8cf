-- adopt.lua: the holds of a session this daemon resumes: each one found
-- alive becomes this daemon's (it renews it from now on) with a lease
-- starting again.
-- ARGV from A: lease (ms), then the hids of the names, in order, in one
-- space-separated string.
-- Reply fields: OK, then for each name: token count left, where token is ""
-- when the hold is gone, and left is the ms to the end of a lease= (-1 for
-- a hold renewed for as long as its session lives).
local lease, hids = tonumber(ARGV[A]), words(ARGV[A + 1])
local out = {}
for i, s in ipairs(S) do
    local hid = hids[i]
    local v = redis.call('HGET', s.h, hid)
    local h = v and hold_decode(v)
    local ends = v and tonumber(redis.call('ZSCORE', s.x, hid) or '0')
    -- A hold owned by "-" is an expired session's, kept for lock-delay.
    if v and ends > NOW and h.daemon ~= '-' then
        local left = -1
        h.daemon = DAEMON
        redis.call('HSET', s.h, hid, hold_encode(h))
        if h.bounded == '1' then
            left = ends - NOW
        elseif ends < NOW + lease then
            redis.call('ZADD', s.x, at(NOW + lease), hid)
        end
        for _, f in ipairs({ h.token, h.count, num(left) }) do
            table.insert(out, f)
        end
    else
        for _, f in ipairs({ '', 0, -1 }) do
            table.insert(out, f)
        end
    end
end
return reply('OK', unpack(out))
