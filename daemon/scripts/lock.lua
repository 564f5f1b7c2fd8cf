-- lock.lua: grants, re-enters, refuses or queues a LOCK of one or more names,
-- all or nothing.
-- ARGV from A: session:owner, mode (x or s), client name, wid, wait (1 to
-- queue), Redis lease of a grant now (ms), lease recorded with the hold,
-- bounded (1 with lease=), lease of the queue entries (ms), per name 1
-- when the daemon knows of a hold or wait of session:owner on it, else 0,
-- and the Redis time (ms) at which the request stops waiting (0 for never):
-- its queue entries, and so a grant they get, end then at the latest.
-- With its session's record (REC), it indexes there the holds it grants (a
-- new one with its token) and, for names not known, the waiter it queues.
-- Reply fields: OK tokens counts 0 | BUSY holder ttl | WAIT retry-ms |
-- WRONGTYPE name | DEADLOCK. A LOCK of names nobody holds or waits for is
-- granted before this, by batch.lua's fast lane.
local who, mode, client, wid = ARGV[A], ARGV[A + 1], ARGV[A + 2], ARGV[A + 3]
-- (numbers are read when they are needed: tonumber is not free)
local wait, ttl, lease, bounded = ARGV[A + 4] == '1', tonumber(ARGV[A + 5]), ARGV[A + 6], ARGV[A + 7]
local known = ARGV[A + 9]
local hid = mode .. who

for _, s in ipairs(S) do
    if redis.call('EXISTS', s.l, s.m) > 0 then
        return reply('WRONGTYPE', s.name)
    end
end
if wait and redis.call('ZSCORE', S[1].q, wid) then
    return reply('WAIT', retry_after(S))
end

-- Reentry, downgrade and an upgrade nobody blocks skip the queue; others are
-- granted only where nobody waits.
local stuck
local owns = {}
for i, s in ipairs(S) do
    local blocked, own = inspect(s, hid, 1)
    if own and string.sub(known, i, i) == '0' then
        drop_unknown(s, who, 'xs')
        blocked, own = inspect(s, hid, 1)
    end
    owns[i] = own
    if blocked or (not own and redis.call('EXISTS', s.q) == 1) then
        stuck = s
        break
    end
end
if stuck == nil then
    local tokens, counts = {}, {}
    for i, s in ipairs(S) do
        tokens[i], counts[i] = grant(s, hid, 1, NOW + ttl, lease, bounded, DAEMON, wid, client)
        if tonumber(counts[i]) == 1 then
            index_set(REC, hid, s.name, tokens[i])
        end
    end
    return reply('OK', join(tokens), join(counts), 0)
end

if not wait then
    local holder, left = '-', 0
    local f, v = blocker(stuck, hid)
    if v then
        local h = hold_decode(v)
        left = math.max(tonumber(redis.call('ZSCORE', stuck.x, f) or NOW) - NOW, 0)
        -- A live daemon renews every lease/3: a hold past that is presumed orphaned.
        if h.daemon ~= '-' and (h.bounded == '1' or left >= h.lease / 3) then
            holder = h.client
        end
    end
    return reply('BUSY', holder, left)
end

-- Two owners that hold a name shared and both wait to upgrade can never be
-- granted. An upgrade waits at the head of the queue, so the first entries
-- show it.
if mode == 'x' and holding(S[1], 's', who) then
    for _, s in ipairs(S) do
        for _, other in ipairs(redis.call('ZRANGE', s.q, 0, SCAN - 1)) do
            local w = waiter_decode(redis.call('HGET', s.w, other))
            if string.sub(w.hid, 1, 1) == 'x' and holding(s, 's', string.sub(w.hid, 2)) then
                return reply('DEADLOCK')
            end
        end
    end
end

-- An owner that already holds a name (an upgrade) waits at the head of its
-- queue: everyone behind would wait for its hold anyway.
local entry = table.concat({ hid, 1, lease, bounded, client, table.concat(NAMES, ' ') }, ' ')
for i, s in ipairs(S) do
    local seq = redis.call('HINCRBY', s.w, '#seq', 1)
    if owns[i] then
        local first = redis.call('ZRANGE', s.q, 0, 0, 'WITHSCORES')
        seq = first[2] and (tonumber(first[2]) - 1) or seq
    end
    redis.call('ZADD', s.q, seq, wid)
    redis.call('HSET', s.w, wid, entry)
    redis.call('ZADD', s.x, entry_end(tonumber(ARGV[A + 8]), tonumber(ARGV[A + 10])), '@' .. wid)
    if string.sub(known, i, i) == '0' then
        index_set(REC, hid, s.name, 'w' .. wid)
    end
end
return reply('WAIT', retry_after(S))
