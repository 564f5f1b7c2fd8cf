-- status.lua: what a name is, who holds it and how many wait.
-- Reply fields: OK type waiters limit free latch-count more, then hid client
-- count token held-ms orphaned (1: an expired session's hold kept for
-- lock-delay) for each of the first STATUS_MAX holds HSCAN finds; more is the
-- number of holds not listed.
local STATUS_MAX = 64
local s = S[1]
local latch = redis.call('GET', s.l)
if latch then
    return reply('OK', 'latch', 0, 0, 0, latch, 0)
end
local kind, free = '', 0
local limit = redis.call('HGET', s.m, 'limit')
if limit then
    kind, free = 'semaphore', tonumber(limit) - used(s)
elseif redis.call('EXISTS', s.h, s.q) > 0 then
    kind = 'lock'
end
local out, seen, n, cursor = {}, {}, 0, '0'
for _ = 1, 8 do
    local r = redis.call('HSCAN', s.h, cursor, 'COUNT', STATUS_MAX)
    for i = 1, #r[2], 2 do
        local f = r[2][i]
        if n < STATUS_MAX and not seen[f] then
            local h = hold_decode(r[2][i + 1])
            for _, v in ipairs({ f, h.client, h.count, h.token, NOW - h.since, h.daemon == '-' and 1 or 0 }) do
                table.insert(out, v)
            end
            seen[f], n = true, n + 1
        end
    end
    cursor = r[1]
    if cursor == '0' or n == STATUS_MAX then
        break
    end
end
return reply('OK', kind, redis.call('ZCARD', s.q), limit or 0, free, 0, redis.call('HLEN', s.h) - n, unpack(out))
