-- batch.lua: runs the operations of one batch in turn (see common.lua).
local results, a = {}, 5
for _ = 1, tonumber(ARGV[4]) do
    local op, n = ARGV[a], tonumber(ARGV[a + 1])
    local names = { unpack(ARGV, a + 2, a + 1 + n) }
    local m = tonumber(ARGV[a + 2 + n])
    local args = { unpack(ARGV, a + 3 + n, a + 2 + n + m) }
    a = a + 3 + n + m
    table.insert(results, OPS[op](args, 1, names, prepare(names)))
end
return finish(results)
