-- status.lua: who holds a lock and how many wait.
-- Reply fields: OK waiters, then hid client count token held-ms for each hold.
local out = { redis.call('ZCARD', K_QUEUE) }
local all = redis.call('HGETALL', K_HOLDS)
for i = 1, #all, 2 do
    local h = hold_decode(all[i + 1])
    for _, f in ipairs({ all[i], h.client, h.count, h.token, NOW - h.since }) do
        table.insert(out, f)
    end
end
return reply('OK', unpack(out))
