-- common.lua: the data model of locks and semaphores, prepended to every
-- script but renew.lua at build time.
--
-- ARGV: 1 key prefix, 2 calling daemon's id, 3 deadline (Redis time in ms,
-- 0 for none), 4 number of names N, 5..4+N the names, then the script's own
-- arguments from ARGV[A].
-- KEYS: the keys below of every name, in order (declared; the scripts
-- derive them from the names).
--
-- Keys of a name, all sharing the hash tag {name}:
--   h  hash   hid -> "count token since lease bounded daemon wid client"
--   x  zset   hid or "@"..wid -> Redis time (ms) at which its lease ends
--   q  zset   wid -> arrival number (FIFO order)
--   w  hash   wid -> "hid k lease bounded client name..."; "#seq" = last arrival
--   t  string last fencing token of the name
--   m  hash   semaphore: limit (its presence makes the name a semaphore)
--   l  string latch: its count
-- hid = mode .. session id (16 hex) .. ":" .. owner, mode x (exclusive),
-- s (shared) or p (semaphore permits; count = permits held).
-- wid = daemon id .. "." .. sequence. A hold whose daemon is "-" belongs to
-- an expired session kept for lock-delay.
--
-- A script that starts after its deadline changes nothing and answers LATE.
-- Every reply: status, Redis time (ms), the number of grants, wid tokens
-- counts free left of each grant, then the script's own fields.

local PREFIX, DAEMON, DEADLINE = ARGV[1], ARGV[2], tonumber(ARGV[3])
local NAMES = {}
for i = 1, tonumber(ARGV[4]) do
    NAMES[i] = ARGV[4 + i]
end
local A = 5 + #NAMES

local time = redis.call('TIME')
local NOW_US = tonumber(time[1]) * 1000000 + tonumber(time[2])
local NOW = math.floor(NOW_US / 1000)

if DEADLINE > 0 and NOW > DEADLINE then
    return { 'LATE', NOW, 0 }
end

-- The counter may lapse: the Redis clock floors every new token anyway.
local TOKEN_KEEP_MS = 7 * 24 * 3600 * 1000

local function num(n)
    return string.format('%.0f', n)
end

local function words(s)
    local out = {}
    for w in string.gmatch(s, '%S+') do
        table.insert(out, w)
    end
    return out
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
    local hid, k, lease, bounded, client, names = string.match(v, '^(%S+) (%d+) (%d+) (%d) (%S+) (.*)$')
    return { hid = hid, k = tonumber(k), lease = tonumber(lease), bounded = bounded, client = client,
             names = words(names) }
end

local function waiter_daemon(wid)
    return string.match(wid, '^([^.]+)')
end

-- Drops every hold and waiter of s whose lease has run out.
local function purge(s)
    local dead = redis.call('ZRANGEBYSCORE', s.x, '-inf', NOW)
    for _, m in ipairs(dead) do
        if string.sub(m, 1, 1) == '@' then
            local wid = string.sub(m, 2)
            redis.call('ZREM', s.q, wid)
            redis.call('HDEL', s.w, wid)
            s.qchanged = true
        else
            redis.call('HDEL', s.h, m)
            s.hchanged = true
        end
    end
    if #dead > 0 then
        redis.call('ZREMRANGEBYSCORE', s.x, '-inf', NOW)
    end
end

-- The state of a name: its keys, purged once per script.
local STATES, ORDER = {}, {}
local function state(name)
    local s = STATES[name]
    if s == nil then
        local b = PREFIX .. '{' .. name .. '}:'
        s = { name = name, h = b .. 'h', x = b .. 'x', q = b .. 'q', w = b .. 'w', t = b .. 't',
              m = b .. 'm', l = b .. 'l' }
        STATES[name] = s
        table.insert(ORDER, s)
        purge(s)
    end
    return s
end

-- Looks at the holds of s for a request of hid for k: returns the first hold
-- that keeps it from being granted (field, value; nil when none), whether
-- the same session and owner hold s in any mode, and the free permits of a
-- semaphore. Holds of the same session and owner never conflict (reentry,
-- upgrade, downgrade); permits conflict only by number.
local function inspect(s, hid, k)
    local who, mode = string.sub(hid, 2), string.sub(hid, 1, 1)
    local all = redis.call('HGETALL', s.h)
    local own = false
    if mode == 'p' then
        local used = 0
        for i = 1, #all, 2 do
            used = used + hold_decode(all[i + 1]).count
            own = own or string.sub(all[i], 2) == who
        end
        local free = tonumber(redis.call('HGET', s.m, 'limit') or '0') - used
        if k > free then
            return all[1] or '', all[2], own, free
        end
        return nil, nil, own, free
    end
    local cf, cv
    for i = 1, #all, 2 do
        local f = all[i]
        if string.sub(f, 2) == who then
            own = true
        elseif cf == nil and (mode == 'x' or string.sub(f, 1, 1) == 'x') then
            cf, cv = f, all[i + 1]
        end
    end
    return cf, cv, own, 0
end

-- Grants hid k more counts on s (a new hold, or reentry). Returns token, count.
local function grant(s, hid, k, expiry, lease, bounded, daemon, wid, client)
    local v = redis.call('HGET', s.h, hid)
    if v then
        local h = hold_decode(v)
        h.count = h.count + k
        redis.call('HSET', s.h, hid, hold_encode(h))
        return h.token, h.count
    end
    local last = tonumber(redis.call('GET', s.t) or '0')
    local token = num(math.max(last + 1, NOW_US))
    redis.call('SET', s.t, token, 'PX', TOKEN_KEEP_MS)
    redis.call('HSET', s.h, hid, hold_encode({ count = k, token = token, since = NOW, lease = lease,
        bounded = bounded, daemon = daemon, wid = wid, client = client }))
    redis.call('ZADD', s.x, expiry, hid)
    return token, k
end

-- Grants made by this script: wid, tokens, counts (comma-joined per name),
-- the free permits after it (semaphores; 0 for locks) and left of each.
local GRANTS = {}

local function dequeue(s, wid)
    redis.call('ZREM', s.q, wid)
    redis.call('HDEL', s.w, wid)
    redis.call('ZREM', s.x, '@' .. wid)
    s.qchanged = true
end

-- Grants waiter wid on every state of group, and tells its daemon. Each hold
-- takes over the lease of its queue entry, which only a live daemon renews:
-- a dead daemon's waiter holds nothing longer than it would have waited.
-- left is the shortest lease taken over (ms; -1 when every hold got its
-- whole lease): a daemon that finds it short checks the grant before it
-- answers OK, which starts the lease again (cancel.lua).
local function grant_waiter(wid, w, group)
    local tokens, counts, daemon, left = {}, {}, waiter_daemon(wid), -1
    for i, s in ipairs(group) do
        local expiry = NOW + w.lease
        local entry = tonumber(redis.call('ZSCORE', s.x, '@' .. wid))
        if entry and entry < expiry then
            expiry = entry
            if left < 0 or entry - NOW < left then
                left = entry - NOW
            end
        end
        dequeue(s, wid)
        tokens[i], counts[i] = grant(s, w.hid, w.k, expiry, w.lease, w.bounded, daemon, wid, w.client)
    end
    local t, c, free = table.concat(tokens, ','), table.concat(counts, ','), 0
    if string.sub(w.hid, 1, 1) == 'p' then
        free = select(4, inspect(group[1], w.hid, 0))
    end
    for _, f in ipairs({ wid, t, c, free, num(left) }) do
        table.insert(GRANTS, f)
    end
    if daemon ~= DAEMON then
        redis.call('PUBLISH', PREFIX .. daemon, table.concat({ 'G', wid, t, c, free, num(left) }, ' '))
    end
end

-- Grants waiters from the head of s's queue while they fit, in FIFO order:
-- the first that does not fit holds back everyone behind it. A waiter for
-- several names must be at the head of each of their queues and fit in each.
local function advance(s)
    while true do
        local head = redis.call('ZRANGE', s.q, 0, 0)
        if #head == 0 then
            return
        end
        local wid = head[1]
        local w = waiter_decode(redis.call('HGET', s.w, wid))
        local group = {}
        for i, name in ipairs(w.names) do
            local t = state(name)
            if t ~= s and redis.call('ZRANGE', t.q, 0, 0)[1] ~= wid then
                return
            end
            if inspect(t, w.hid, w.k) then
                return
            end
            group[i] = t
        end
        grant_waiter(wid, w, group)
        for _, t in ipairs(group) do
            if t ~= s then
                advance(t)
            end
        end
    end
end

-- Milliseconds until the earliest lease on these names that no one here
-- will release runs out: another daemon's hold or waiter, or an expired
-- session's hold kept for lock-delay. -1 when there is none. It reads only
-- the first RETRY_SCAN leases of a name, in the order they end: when all are
-- this daemon's, it answers the end of the last one read (too early is
-- harmless: the retry asks again), so a long queue costs no more than a short one.
local RETRY_SCAN = 16
local function retry_after(list)
    local best = nil
    for _, s in ipairs(list) do
        local first = redis.call('ZRANGE', s.x, 0, RETRY_SCAN - 1, 'WITHSCORES')
        for i = 1, #first, 2 do
            local m, score = first[i], tonumber(first[i + 1])
            local daemon
            if string.sub(m, 1, 1) == '@' then
                daemon = waiter_daemon(string.sub(m, 2))
            else
                local v = redis.call('HGET', s.h, m)
                daemon = v and hold_decode(v).daemon
            end
            if (daemon and daemon ~= DAEMON) or i + 1 == 2 * RETRY_SCAN then
                if best == nil or score < best then
                    best = score
                end
                break
            end
        end
    end
    if best == nil then
        return -1
    end
    return math.max(best - NOW, 0)
end

-- The states of the request's names, purged and advanced.
local S = {}
for i, name in ipairs(NAMES) do
    S[i] = state(name)
end
for _, s in ipairs(S) do
    advance(s)
end

-- A script's reply (see the top). Leaves no empty waiter hash behind, and no
-- semaphore limit once nobody holds or waits.
local function reply(status, ...)
    local r = { status, NOW, #GRANTS / 5 }
    for _, g in ipairs(GRANTS) do
        table.insert(r, g)
    end
    for _, f in ipairs({ ... }) do
        table.insert(r, f)
    end
    for _, s in ipairs(ORDER) do
        if s.qchanged and redis.call('EXISTS', s.q) == 0 then
            redis.call('DEL', s.w)
        end
        if s.hchanged and redis.call('EXISTS', s.h, s.q) == 0 then
            redis.call('DEL', s.m)
        end
    end
    return r
end

-- Publishes to the daemon of every waiter of s that a lease on s ends in ms.
local function tell_waiters(s, ms)
    local told = {}
    for _, wid in ipairs(redis.call('ZRANGE', s.q, 0, -1)) do
        local daemon = waiter_daemon(wid)
        if not told[daemon] then
            told[daemon] = true
            redis.call('PUBLISH', PREFIX .. daemon, 'R ' .. s.name .. ' ' .. ms)
        end
    end
end

local function join(list)
    return table.concat(list, ',')
end
