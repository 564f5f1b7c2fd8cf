-- batch.lua: runs the operations of one batch in turn (see common.lua).
-- lock and unlock look at their names first: when nobody else is there, they
-- skip the purge and handoff.
local LAZY = { lock = true, unlock = true }
local results, a, k = {}, 5, 1
for _ = 1, tonumber(ARGV[4]) do
    local op, n = ARGV[a], tonumber(ARGV[a + 1])
    local names = { unpack(ARGV, a + 2, a + 1 + n) }
    for _, name in ipairs(names) do
        bind(name, k)
        k = k + 7
    end
    local m = tonumber(ARGV[a + 2 + n])
    table.insert(results, OPS[op](ARGV, a + 3 + n, names, not LAZY[op] and prepare(names) or nil))
    a = a + 3 + n + m
end
return finish(results)
