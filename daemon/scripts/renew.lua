-- standalone
-- renew.lua: extends the leases of many holds and waiters, on many names, in one call.
-- KEYS: the keys h, x, q, w, m, k of each name (see common.lua). ARGV, for each
-- name in order: n, then n pairs member, lease-ms; a waiter's lease may be
-- "ms/ends", where ends is the Redis time (ms) its wait ends: its entry is
-- never renewed past it (lock.lua).
-- Returns item-index (counting pairs from 1), member of each one already gone
-- (lease ran out, or Redis lost it). The keys of a name are then kept at
-- least KEY_MARGIN_MS past the latest lease renewed (PEXPIREAT GT: every
-- key dlockd writes has an expiry, which this only moves on); q, w and m
-- only when the name has one of them. A hold in the one-key form (k) has
-- its lease end and expiry moved on in k.
local KEY_MARGIN_MS = 1000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lost, a, item = {}, 1, 0
-- A number passed to redis.call is formatted by printf: each lease end once.
local ends = {}
local function at(ms)
    local v = ends[ms]
    if v == nil then
        v = string.format('%.0f', ms)
        ends[ms] = v
    end
    return v
end
-- Sets the lease of hold hid in the one-key form (key) to end at upto, as ZADD does in x, and
-- the key's expiry after it (it holds nothing else); false when the hold is not there.
local function renew_one_key(key, hid, upto)
    local v = redis.call('GET', key)
    local e, h, rest = string.match(v or '', '^(%d+) (%S+) (.*)$')
    if h ~= hid or tonumber(e) <= now then
        return false
    end
    redis.call('SET', key, at(upto) .. ' ' .. hid .. ' ' .. rest, 'PXAT', at(upto + KEY_MARGIN_MS))
    return true
end

for k = 1, #KEYS, 6 do
    local x, n, last = KEYS[k + 1], tonumber(ARGV[a]), 0
    a = a + 1
    for _ = 1, n do
        local m, lease, ends = ARGV[a], string.match(ARGV[a + 1], '^(%d+)/?(%d*)$')
        a, item = a + 2, item + 1
        local s, upto = redis.call('ZSCORE', x, m), now + tonumber(lease)
        if ends ~= '' then
            upto = math.min(upto, tonumber(ends))
        end
        if s and tonumber(s) > now then
            redis.call('ZADD', x, at(upto), m)
            last = math.max(last, upto)
        elseif s or not renew_one_key(KEYS[k + 5], m, upto) then
            table.insert(lost, item)
            table.insert(lost, m)
        end
    end
    if last > 0 then
        local more = redis.call('EXISTS', KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]) > 0
        for j = k, more and k + 4 or k + 1 do
            redis.call('PEXPIREAT', KEYS[j], at(last + KEY_MARGIN_MS), 'GT')
        end
    end
end
return lost
