-- batch.lua: the library's entry point, batch(KEYS, ARGV) (see common.lua).
-- lock and unlock look at their names first: when nobody else is there, they
-- skip the purge and handoff.
local LAZY = { lock = true, unlock = true }

local function batch(keys, args)
    KEYS, ARGV = keys, args
    PREFIX, DAEMON, DEADLINE = ARGV[1], ARGV[2], tonumber(ARGV[3])
    local time = redis.call('TIME')
    NOW_US = tonumber(time[1]) * 1000000 + tonumber(time[2])
    NOW = math.floor(NOW_US / 1000)
    if DEADLINE > 0 and NOW > DEADLINE then
        return { 'LATE', NOW, '', 0 }
    end
    NOW_S, NOW_US_S = num(NOW), num(NOW_US)
    STATES, ORDER, GRANTS, SPENT, AT, HINTED, RECORDS = {}, {}, {}, 0, {}, {}, {}
    local results, nr, a, k = {}, 0, 5, 1
    for _ = 1, tonumber(ARGV[4]) do
        local op, n = ARGV[a], count(ARGV[a + 1])
        local names = { unpack(ARGV, a + 2, a + 1 + n) }
        for j = 1, n do
            bind(names[j], k)
            k = k + 8
        end
        local rec = nil
        if ARGV[a + 2 + n] == '1' then
            rec = KEYS[k]
            k = k + 1
        end
        local m = count(ARGV[a + 3 + n])
        local res = OPS[op](ARGV, a + 4 + n, names, not LAZY[op] and prepare(names) or nil, rec)
        results[nr + 1] = #res
        for j = 1, #res do
            results[nr + 1 + j] = res[j]
        end
        nr = nr + 1 + #res
        a = a + 4 + n + m
    end
    return finish(results)
end

redis.register_function('@FUNCTION@', batch)
