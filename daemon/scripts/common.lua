-- common.lua: the lock data model, prepended to every lock script at build time.
--
-- KEYS of one name (all share the hash tag {name}):
--   1 holds    hash   hid -> "count token since lease bounded daemon wid client"
--   2 expiry   zset   hid or "@"..wid -> Redis time (ms) when its lease ends
--   3 queue    zset   wid -> arrival number (FIFO order)
--   4 waiters  hash   wid -> "hid lease bounded client"; field "#seq" = last arrival number
--   5 token    string last fencing token granted for the name
-- ARGV[1] is the key prefix (channel prefix), ARGV[2] the calling daemon's id.
-- hid = mode ("x" or "s") .. session id (16 hex) .. ":" .. owner.
-- wid = daemon id .. "." .. sequence: the daemon of a waiter is the part before the dot.

local K_HOLDS, K_EXP, K_QUEUE, K_WAIT, K_TOKEN = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local PREFIX, DAEMON = ARGV[1], ARGV[2]

local time = redis.call('TIME')
local NOW_US = tonumber(time[1]) * 1000000 + tonumber(time[2])
local NOW = math.floor(NOW_US / 1000)

-- The counter may lapse: the Redis clock floors every new token anyway.
local TOKEN_KEEP_MS = 7 * 24 * 3600 * 1000

local function num(n)
    return string.format('%.0f', n)
end

local function hold_decode(v)
    local c, tok, since, lease, bounded, daemon, wid, client =
        string.match(v, '^(%d+) (%d+) (%d+) (%d+) (%d) (%S+) (%S+) (.*)$')
    return { count = tonumber(c), token = tok, since = tonumber(since), lease = tonumber(lease),
             bounded = bounded, daemon = daemon, wid = wid, client = client }
end

local function hold_encode(h)
    return table.concat({ h.count, h.token, num(h.since), h.lease, h.bounded, h.daemon, h.wid,
                          h.client }, ' ')
end

local function waiter_decode(v)
    local hid, lease, bounded, client = string.match(v, '^(%S+) (%d+) (%d) (.*)$')
    return { hid = hid, lease = tonumber(lease), bounded = bounded, client = client }
end

local function waiter_daemon(wid)
    return string.match(wid, '^([^.]+)')
end

-- Set when a script took waiters out of the queue (see reply).
local QUEUE_CHANGED = false

-- Drops every hold and waiter whose lease has run out.
local function purge()
    local dead = redis.call('ZRANGEBYSCORE', K_EXP, '-inf', NOW)
    for _, m in ipairs(dead) do
        if string.sub(m, 1, 1) == '@' then
            local wid = string.sub(m, 2)
            redis.call('ZREM', K_QUEUE, wid)
            redis.call('HDEL', K_WAIT, wid)
            QUEUE_CHANGED = true
        else
            redis.call('HDEL', K_HOLDS, m)
        end
    end
    if #dead > 0 then
        redis.call('ZREMRANGEBYSCORE', K_EXP, '-inf', NOW)
    end
end

-- Looks at the holds for hid: returns the first hold that keeps it from being
-- granted (field, value, or nil) and whether the same session and owner hold
-- the name in any mode. Holds of the same session and owner never conflict
-- (reentry, upgrade, downgrade).
local function inspect(hid)
    local who, mode = string.sub(hid, 2), string.sub(hid, 1, 1)
    local all = redis.call('HGETALL', K_HOLDS)
    local own = false
    for i = 1, #all, 2 do
        local f = all[i]
        if string.sub(f, 2) == who then
            own = true
        elseif mode == 'x' or string.sub(f, 1, 1) == 'x' then
            return f, all[i + 1], own
        end
    end
    return nil, nil, own
end

-- Grants hid (or re-enters it). Returns token, count.
local function grant(hid, expiry, lease, bounded, daemon, wid, client)
    local v = redis.call('HGET', K_HOLDS, hid)
    if v then
        local h = hold_decode(v)
        h.count = h.count + 1
        redis.call('HSET', K_HOLDS, hid, hold_encode(h))
        return h.token, h.count
    end
    local last = tonumber(redis.call('GET', K_TOKEN) or '0')
    local token = num(math.max(last + 1, NOW_US))
    redis.call('SET', K_TOKEN, token, 'PX', TOKEN_KEEP_MS)
    redis.call('HSET', K_HOLDS, hid, hold_encode({ count = 1, token = token, since = NOW,
        lease = lease, bounded = bounded, daemon = daemon, wid = wid, client = client }))
    redis.call('ZADD', K_EXP, expiry, hid)
    return token, 1
end

-- Grants waiters from the head of the queue while they fit, in FIFO order:
-- the first one that does not fit holds back everyone behind it. Appends
-- wid, token, count of each grant to out; tells other daemons by pub/sub.
local function advance(out)
    while true do
        local head = redis.call('ZRANGE', K_QUEUE, 0, 0)
        if #head == 0 then
            return
        end
        local wid = head[1]
        local w = waiter_decode(redis.call('HGET', K_WAIT, wid))
        if inspect(w.hid) then
            return
        end
        local expiry = tonumber(redis.call('ZSCORE', K_EXP, '@' .. wid)) or NOW
        if w.bounded == '1' then
            expiry = math.min(expiry, NOW + w.lease)
        end
        redis.call('ZREM', K_QUEUE, wid)
        redis.call('HDEL', K_WAIT, wid)
        redis.call('ZREM', K_EXP, '@' .. wid)
        QUEUE_CHANGED = true
        local daemon = waiter_daemon(wid)
        local token, count = grant(w.hid, expiry, w.lease, w.bounded, daemon, wid, w.client)
        table.insert(out, wid)
        table.insert(out, token)
        table.insert(out, count)
        if daemon ~= DAEMON then
            redis.call('PUBLISH', PREFIX .. daemon, wid .. ' ' .. token .. ' ' .. count)
        end
    end
end

-- Milliseconds until the earliest lease of another daemon's hold or waiter
-- on this name runs out (when a waiter here may have to try again), or -1.
local function retry_after()
    local best = nil
    local all = redis.call('ZRANGE', K_EXP, 0, -1, 'WITHSCORES')
    for i = 1, #all, 2 do
        local m, score = all[i], tonumber(all[i + 1])
        local daemon
        if string.sub(m, 1, 1) == '@' then
            daemon = waiter_daemon(string.sub(m, 2))
        else
            local v = redis.call('HGET', K_HOLDS, m)
            daemon = v and hold_decode(v).daemon
        end
        if daemon and daemon ~= DAEMON and (best == nil or score < best) then
            best = score
        end
    end
    if best == nil then
        return -1
    end
    return math.max(best - NOW, 0)
end

-- Every script on a name starts by purging and advancing its queue.
local GRANTS = {}
purge()
advance(GRANTS)

-- A script's reply: status, the number of grants, wid token count of each
-- grant, then the script's own fields. An empty queue leaves no waiter hash.
local function reply(status, ...)
    local r = { status, #GRANTS / 3 }
    for _, g in ipairs(GRANTS) do
        table.insert(r, g)
    end
    for _, f in ipairs({ ... }) do
        table.insert(r, f)
    end
    if QUEUE_CHANGED and redis.call('ZCARD', K_QUEUE) == 0 then
        redis.call('DEL', K_WAIT)
    end
    return r
end
