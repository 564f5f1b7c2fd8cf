-- batch.lua: runs the operations of one batch in turn (see common.lua).
-- lock and unlock look at their names first: when nobody else is there, they
-- skip the purge and handoff.
local LAZY = { lock = true, unlock = true }
local results, a = {}, 5
for _ = 1, tonumber(ARGV[4]) do
    local op, n = ARGV[a], tonumber(ARGV[a + 1])
    local names = { unpack(ARGV, a + 2, a + 1 + n) }
    local m = tonumber(ARGV[a + 2 + n])
    local args = { unpack(ARGV, a + 3 + n, a + 2 + n + m) }
    a = a + 3 + n + m
    table.insert(results, OPS[op](args, 1, names, not LAZY[op] and prepare(names) or nil))
end
return finish(results)
