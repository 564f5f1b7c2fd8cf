-- standalone
-- renew.lua: extends the leases of many holds and waiters, on many names, in one call.
-- KEYS: expiry zsets. ARGV, for each key in order: n, then n pairs member, lease-ms.
-- Returns key-index, member of each one already gone (lease ran out, or Redis lost it).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lost, a = {}, 1
for k = 1, #KEYS do
    local n = tonumber(ARGV[a])
    a = a + 1
    for _ = 1, n do
        local m, lease = ARGV[a], tonumber(ARGV[a + 1])
        a = a + 2
        local s = redis.call('ZSCORE', KEYS[k], m)
        if s and tonumber(s) > now then
            redis.call('ZADD', KEYS[k], now + lease, m)
        else
            table.insert(lost, k)
            table.insert(lost, m)
        end
    end
end
return lost
