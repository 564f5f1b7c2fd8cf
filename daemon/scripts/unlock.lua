-- unlock.lua: drops counts of holds on one or more names, all or nothing,
-- and hands every name on. Also returns semaphore permits (mode p).
-- ARGV from A: session:owner, mode (x, s, p, or empty: exclusive if held,
-- else shared), all (1 drops every count), token (empty, or the hold must
-- have it), counts to drop (permits), lock-delay in ms (0: release now; else
-- the hold stays, ownerless, that long), and per name 1 when the daemon
-- knows of the hold, else 0: a hold granted to a request it has not
-- answered yet is not the client's to release (NOTHELD). Only the daemon
-- that has the hold's session (its daemon field) releases it: a daemon
-- with a stale copy of a session that moved to another one gets NOTHELD.
-- Last, per name 1 when a hold that ends leaves its session's record (REC)
-- too: nothing else of its owner there is known to the daemon.
-- Reply fields: OK counts modes free | NOTHELD name.
local who, mode, all, token = ARGV[A], ARGV[A + 1], ARGV[A + 2] == '1', ARGV[A + 3]
local k, delay, known, unindex = count(ARGV[A + 4]), count(ARGV[A + 5]), ARGV[A + 6], ARGV[A + 7]

-- The fast path: a live hold of one lock in h, released now (one in k, the
-- one-key form, was released by batch.lua's fast lane); the name is handed on
-- only when someone waits.
if S == nil then
    if #NAMES == 1 and mode ~= 'p' and delay == 0 and known == '1' then
        local s, m, v = peek(NAMES[1]), mode, nil
        if m == '' then
            v = redis.call('HGET', s.h, 'x' .. who)
            m = v and 'x' or 's'
        end
        v = v or redis.call('HGET', s.h, m .. who)
        local ends = v and redis.call('ZSCORE', s.x, m .. who)
        local held, tok, daemon = string.match(v or '', '^(%d+) (%d+) %d+ %d+ %d (%S+) ')
        held = ends and tonumber(ends) > NOW and daemon == DAEMON and tonumber(held)
        if held and (token == '' or tok == token) and (all or k <= held) then
            local left = all and 0 or held - k
            if left > 0 then
                local h = hold_decode(v)
                h.count = left
                redis.call('HSET', s.h, m .. who, hold_encode(h))
            else
                redis.call('HDEL', s.h, m .. who)
                redis.call('ZREM', s.x, m .. who)
                if unindex == '1' then
                    index_del(REC, m .. who, NAMES[1])
                end
                if redis.call('EXISTS', s.q) == 1 then
                    prepare(NAMES)
                end
            end
            return reply('OK', left, m, 0)
        end
    end
    S = prepare(NAMES)
end

-- The type of a name is not looked at: on a name of another type the caller
-- holds nothing of the kind asked for (PROTOCOL.md, "Names and types").
local hids, holds, modes = {}, {}, {}
for i, s in ipairs(S) do
    local m = mode
    if m == '' then
        m = holding(s, 'x', who) and 'x' or 's'
    end
    local v = redis.call('HGET', s.h, m .. who)
    if not v or string.sub(known, i, i) ~= '1' then
        return reply('NOTHELD', s.name)
    end
    local h = hold_decode(v)
    if (token ~= '' and h.token ~= token) or (not all and k > h.count) or h.daemon ~= DAEMON then
        return reply('NOTHELD', s.name)
    end
    hids[i], holds[i], modes[i] = m .. who, h, m
end

local counts = {}
for i, s in ipairs(S) do
    local h, held = holds[i], holds[i].count
    h.count = all and 0 or h.count - k
    if h.count > 0 then
        if modes[i] == 'p' then
            add_used(s, h.count - held)
        end
        redis.call('HSET', s.h, hids[i], hold_encode(h))
    elseif delay > 0 then
        -- Kept whole (every permit), owned by nobody, until the delay ends.
        h.daemon, h.count = '-', held
        redis.call('HSET', s.h, hids[i], hold_encode(h))
        redis.call('ZADD', s.x, NOW + delay, hids[i])
        tell_waiters(s, delay, SCAN)
        h.count = 0
    else
        drop_hold(s, hids[i])
        redis.call('ZREM', s.x, hids[i])
    end
    if h.count == 0 and string.sub(unindex, i, i) == '1' then
        index_del(REC, hids[i], s.name)
    end
    counts[i] = h.count
    advance(s)
end
local free = 0
if modes[1] == 'p' then
    free = select(3, inspect(S[1], 'p' .. who, 0))
end
return reply('OK', join(counts), join(modes), free)
