-- batch.lua: the library's entry point, batch(KEYS, ARGV) (see common.lua),
-- and the fast lane of LOCK and UNLOCK: the uncontended pair in the one-key
-- form, read straight from ARGV and KEYS and answered into the batch's reply,
-- without the tables of the general path. When the lane does not apply it
-- changes nothing and the operation takes the general path.
-- unlock looks at its name first on the general path too: when nobody else
-- is there, it skips the purge and handoff.
local LAZY = { unlock = true }

-- Appends an operation's reply of four fields to out after position nr; returns the new end.
local function answer(out, nr, status, a, b, c)
    out[nr + 1], out[nr + 2], out[nr + 3], out[nr + 4], out[nr + 5] = 4, status, a, b, c
    return nr + 5
end

-- A LOCK (its ARGV from a, n names, their keys from KEYS[k]) of names that
-- nobody holds, waits for or uses as another type, none loaded by an earlier
-- operation of the batch (its holds are in h till the batch ends: k is read
-- only on loading): each gets its hold in k (lock.lua's fields, in order).
local function fast_lock(a, n, k, rec, out, nr)
    for j = 0, n - 1 do
        local s, b = STATES[ARGV[a + 2 + j]], k + NAME_KEYS * j
        if (s and s.slow) or redis.call('EXISTS', KEYS[b + KK], KEYS[b + KH], KEYS[b + KQ], KEYS[b + KM], KEYS[b + KL]) > 0 then
            return nil
        end
    end
    local A = a + 4 + n
    local hid, expiry = ARGV[A + 1] .. ARGV[A], NOW + tonumber(ARGV[A + 5])
    local tokens, counts
    for j = 0, n - 1 do
        local b = k + NAME_KEYS * j
        local token = grant_one_key(KEYS[b + KT], KEYS[b + KK], hid, expiry, ARGV[A + 6], ARGV[A + 7], ARGV[A + 3],
            ARGV[A + 2])
        index_set(rec, hid, ARGV[a + 2 + j], token)
        tokens, counts = tokens and tokens .. ',' .. token or token, counts and counts .. ',1' or '1'
    end
    return answer(out, nr, 'OK', tokens, counts, 0)
end

-- An UNLOCK (unlock.lua's fields) of one lock whose hold is live, in k, this
-- daemon's and the caller's, released now.
local function fast_unlock(a, n, k, rec, out, nr)
    local A = a + 4 + n
    local who, mode, all, token = ARGV[A], ARGV[A + 1], ARGV[A + 2] == '1', ARGV[A + 3]
    if n ~= 1 or mode == 'p' or count(ARGV[A + 5]) ~= 0 or ARGV[A + 6] ~= '1' or not (all or count(ARGV[A + 4]) == 1) then
        return nil
    end
    local key = KEYS[k + KK]
    local ends, hid, tok, daemon = string.match(redis.call('GET', key) or '', '^(%d+) (%S+) 1 (%d+) %d+ %d+ %d (%S+) ')
    if not hid or string.sub(hid, 2) ~= who or (mode ~= '' and mode ~= string.sub(hid, 1, 1)) or tonumber(ends) <= NOW
        or daemon ~= DAEMON or (token ~= '' and tok ~= token) then
        return nil
    end
    redis.call('DEL', key)
    if ARGV[A + 7] == '1' then
        index_del(rec, hid, ARGV[a + 2])
    end
    return answer(out, nr, 'OK', 0, string.sub(hid, 1, 1), 0)
end

local FAST = { lock = fast_lock, unlock = fast_unlock }

local function batch(keys, args)
    KEYS, ARGV = keys, args
    PREFIX, DAEMON, DEADLINE = ARGV[1], ARGV[2], tonumber(ARGV[3])
    local time = redis.call('TIME')
    NOW_US = tonumber(time[1]) * 1000000 + tonumber(time[2])
    NOW = math.floor(NOW_US / 1000)
    if DEADLINE > 0 and NOW > DEADLINE then
        return { 'LATE', NOW, '', 0 }
    end
    -- the clock as text from TIME's own digits: formatting a number is not free
    local us = string.rep('0', 6 - #time[2]) .. time[2]
    NOW_S, NOW_US_S = time[1] .. string.sub(us, 1, 3), time[1] .. us
    STATES, ORDER, GRANTS, SPENT, AT, HINTED, RECORDS = {}, {}, {}, 0, {}, {}, {}
    local results, nr, a, k = {}, 0, 5, 1
    for _ = 1, tonumber(ARGV[4]) do
        local op, n = ARGV[a], count(ARGV[a + 1])
        local rec = ARGV[a + 2 + n] == '1' and KEYS[k + NAME_KEYS * n] or nil
        local m = count(ARGV[a + 3 + n])
        local fast = FAST[op]
        local done = fast and fast(a, n, k, rec, results, nr)
        if done then
            nr = done
        else
            local names = { unpack(ARGV, a + 2, a + 1 + n) }
            for j = 1, n do
                bind(names[j], k + NAME_KEYS * (j - 1))
            end
            local res = OPS[op](ARGV, a + 4 + n, names, not LAZY[op] and prepare(names) or nil, rec)
            results[nr + 1] = #res
            for j = 1, #res do
                results[nr + 1 + j] = res[j]
            end
            nr = nr + 1 + #res
        end
        k = k + NAME_KEYS * n + (rec and 1 or 0)
        a = a + 4 + n + m
    end
    return finish(results)
end

redis.register_function('@FUNCTION@', batch)
