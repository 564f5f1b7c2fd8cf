-- cancel.lua: takes a waiter out of the queues of its names, or says that it
-- was granted first.
-- ARGV from A: wid, hid.
-- Reply fields: CANCELLED | GRANTED tokens counts | GONE (its entry lapsed).
local wid, hid = ARGV[A], ARGV[A + 1]

if redis.call('ZSCORE', S[1].q, wid) then
    for _, s in ipairs(S) do
        dequeue(s, wid)
    end
    for _, s in ipairs(S) do
        advance(s)
    end
    return reply('CANCELLED')
end
local tokens, counts = {}, {}
for i, s in ipairs(S) do
    local v = redis.call('HGET', s.h, hid)
    if not v or hold_decode(v).wid ~= wid then
        return reply('GONE')
    end
    local h = hold_decode(v)
    tokens[i], counts[i] = h.token, h.count
end
return reply('GRANTED', join(tokens), join(counts))
