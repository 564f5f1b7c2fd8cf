-- cancel.lua: takes a waiter out of the queues of its names, or says that it
-- was granted first. With "check" it only confirms a grant heard by pub/sub:
-- a waiter still queued keeps its place.
-- ARGV from A: wid, hid, "check" or "".
-- Reply fields: CANCELLED | QUEUED (check) | GRANTED tokens counts free (the
-- hold's lease starts again) | GONE (its entry lapsed).
local wid, hid, check = ARGV[A], ARGV[A + 1], ARGV[A + 2] == 'check'

if redis.call('ZSCORE', S[1].q, wid) then
    if check then
        return reply('QUEUED')
    end
    for _, s in ipairs(S) do
        dequeue(s, wid)
    end
    for _, s in ipairs(S) do
        advance(s)
    end
    return reply('CANCELLED')
end
local tokens, counts, leases = {}, {}, {}
for i, s in ipairs(S) do
    local v = redis.call('HGET', s.h, hid)
    if not v or not granted_to(hold_decode(v), wid) then
        return reply('GONE')
    end
    local h = hold_decode(v)
    tokens[i], counts[i], leases[i] = h.token, h.count, h.lease
end
-- The grant is answered only now: it gets a full lease from here, as a new one would.
for i, s in ipairs(S) do
    redis.call('ZADD', s.x, NOW + leases[i], hid)
end
return reply('GRANTED', join(tokens), join(counts), (select(3, inspect(S[1], hid, 0))))
