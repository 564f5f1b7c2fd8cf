-- status.lua: what a name is, who holds it and how many wait.
-- Reply fields: OK type waiters limit free latch-count, then hid client count
-- token held-ms orphaned (1: an expired session's hold kept for lock-delay) for
-- each hold.
local s = S[1]
local latch = redis.call('GET', s.l)
if latch then
    return reply('OK', 'latch', 0, 0, 0, latch)
end
local kind = ''
local limit = redis.call('HGET', s.m, 'limit')
if limit then
    kind = 'semaphore'
elseif redis.call('EXISTS', s.h, s.q) > 0 then
    kind = 'lock'
end
local free = 0
if limit then
    free = tonumber(limit) - used(s)
end
local out = { kind, redis.call('ZCARD', s.q), limit or 0, free, 0 }
local all = redis.call('HGETALL', s.h)
for i = 1, #all, 2 do
    local h = hold_decode(all[i + 1])
    for _, f in ipairs({ all[i], h.client, h.count, h.token, NOW - h.since, h.daemon == '-' and 1 or 0 }) do
        table.insert(out, f)
    end
end
return reply('OK', unpack(out))
