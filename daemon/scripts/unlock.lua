-- unlock.lua: drops one count (or all counts) of a hold and hands the name on.
-- ARGV: 3 session:owner, 4 mode (x, s, or empty: exclusive if held, else
-- shared), 5 all (1 drops every count), 6 token (empty, or the hold must have it).
-- Reply fields: OK remaining-count mode token | NOTHELD.
local who, mode, all, token = ARGV[3], ARGV[4], ARGV[5] == '1', ARGV[6]

if mode == '' then
    mode = redis.call('HEXISTS', K_HOLDS, 'x' .. who) == 1 and 'x' or 's'
end
local hid = mode .. who
local v = redis.call('HGET', K_HOLDS, hid)
if not v then
    return reply('NOTHELD')
end
local h = hold_decode(v)
if token ~= '' and h.token ~= token then
    return reply('NOTHELD')
end
if all or h.count <= 1 then
    redis.call('HDEL', K_HOLDS, hid)
    redis.call('ZREM', K_EXP, hid)
    advance(GRANTS)
    return reply('OK', 0, mode, h.token)
end
h.count = h.count - 1
redis.call('HSET', K_HOLDS, hid, hold_encode(h))
return reply('OK', h.count, mode, h.token)
