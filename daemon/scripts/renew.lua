-- standalone
-- renew.lua: extends the leases of many holds and waiters, on many names, in one call.
-- KEYS: the keys h, x, q, w, m of each name (see common.lua). ARGV, for each
-- name in order: n, then n pairs member, lease-ms.
-- Returns item-index (counting pairs from 1), member of each one already gone
-- (lease ran out, or Redis lost it). The keys of a name then expire
-- KEY_MARGIN_MS after the last lease in x, as common.lua sets them.
local KEY_MARGIN_MS = 1000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lost, a, item = {}, 1, 0
for k = 1, #KEYS, 5 do
    local x, n, kept = KEYS[k + 1], tonumber(ARGV[a]), false
    a = a + 1
    for _ = 1, n do
        local m, lease = ARGV[a], tonumber(ARGV[a + 1])
        a, item = a + 2, item + 1
        local s = redis.call('ZSCORE', x, m)
        if s and tonumber(s) > now then
            redis.call('ZADD', x, now + lease, m)
            kept = true
        else
            table.insert(lost, item)
            table.insert(lost, m)
        end
    end
    if kept then
        local at = string.format('%.0f', tonumber(redis.call('ZRANGE', x, -1, -1, 'WITHSCORES')[2]) + KEY_MARGIN_MS)
        for j = k, k + 4 do
            redis.call('PEXPIREAT', KEYS[j], at)
        end
    end
end
return lost
