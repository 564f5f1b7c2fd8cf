-- force.lua: frees the holds of one name, whichever session has them (the
-- operator's FORCE), and hands it on: the next waiters are granted at once.
-- Every other daemon that had one of them hears 'F name' on its channel; it
-- checks Redis (STATUS) before it drops anything, since anyone may PUBLISH.
-- At most FORCE_MAX holds per call, found by a few HSCAN steps.
-- Reply fields: OK count more (1: holds are left), then hid token of each
-- hold freed.
local FORCE_MAX = 1000
local s, hids, seen, cursor = S[1], {}, {}, '0'
for _ = 1, 64 do
    local r = redis.call('HSCAN', s.h, cursor, 'COUNT', 100)
    for i = 1, #r[2], 2 do
        local f = r[2][i]
        if #hids < FORCE_MAX and not seen[f] then
            seen[f] = true
            table.insert(hids, f)
        end
    end
    cursor = r[1]
    if cursor == '0' or #hids == FORCE_MAX then
        break
    end
end
local out, told = {}, { [DAEMON] = true, ['-'] = true }
for _, hid in ipairs(hids) do
    local h = hold_decode(redis.call('HGET', s.h, hid))
    drop_hold(s, hid)
    redis.call('ZREM', s.x, hid)
    table.insert(out, hid)
    table.insert(out, h.token)
    if not told[h.daemon] then
        told[h.daemon] = true
        redis.call('PUBLISH', PREFIX .. h.daemon, 'F ' .. s.name)
    end
end
advance(s)
return reply('OK', #hids, redis.call('HLEN', s.h) > 0 and 1 or 0, unpack(out))
