-- common.lua: the data model of locks and semaphores. The batch script is
-- a Redis function library (FUNCTION LOAD, called with FCALL): this file,
-- then every operation's file as a function OPS.<op>(ARGV, A, NAMES, S, REC),
-- then batch.lua, whose batch() runs the operations of one call in turn
-- (embed.sh builds it and names it after its contents).
--
-- ARGV of the batch: 1 key prefix, 2 calling daemon's id, 3 deadline (Redis
-- time in ms, 0 for none), 4 number of operations, then for each: its name,
-- the number of names N, the N names, R (1 when the operation carries its
-- session's record, else 0), the number of its own arguments and those
-- arguments, which the operation reads from ARGV[A].
-- KEYS: the keys below of every name of every operation, in order, each
-- operation's followed by its session's record (session.lua) when R is 1
-- (declared; the scripts derive the names' keys from the names). An
-- operation that carries its record (REC) writes the record's index entries
-- of what it grants, queues and releases itself, in the same call: the
-- daemon then sends none of those changes (not with Redis Cluster, where the
-- record is in a slot of its own).
--
-- Keys of a name, all sharing the hash tag {name}:
--   h  hash   hid -> "count token since lease bounded daemon wids client"; wids: the waiter that
--             made the hold, then (comma-separated) the last WIDS_KEPT waiters granted a reentry
--   x  zset   hid or "@"..wid -> Redis time (ms) at which its lease ends
--   q  zset   wid -> arrival number (FIFO order)
--   w  hash   wid -> "hid k lease bounded client name..."; "#seq" = last arrival
--   t  string last fencing token of the name
--   m  hash   semaphore: limit, and used (permits held); its presence makes
--             the name a semaphore
--   l  string latch: its count
--   k  string the one hold of a name that nobody else holds or waits for:
--             "end hid" and the fields of its value in h, where end is the
--             Redis time (ms) at which its lease ends. The fast lane of LOCK
--             (batch.lua) writes it instead of h and x, that of UNLOCK deletes
--             it; everything else sees it in h and x (state() moves it there
--             first). It
--             expires KEY_MARGIN_MS after its lease ends. With k, none of h,
--             x, q, w, m and l exists.
-- hid = mode .. session id (16 hex) .. ":" .. owner, mode x (exclusive),
-- s (shared) or p (semaphore permits; count = permits held).
-- wid = daemon id .. "." .. sequence. A hold whose daemon is "-" belongs to
-- an expired session kept for lock-delay.
-- h, x, q, w and m expire KEY_MARGIN_MS after the last lease in x ends;
-- every script and every renewal moves that on, so the keys of a dead
-- daemon go by themselves (t and l have expiries of their own).
--
-- A batch that starts after its deadline changes nothing and answers LATE.
-- Its reply: status, Redis time (ms), the names with more to hand on
-- (space-separated), the number of grants, wid tokens counts free left of
-- each grant, then the reply of each operation, flat: the number of its
-- fields, then its status and its own fields (one array: Redis turns a
-- nested table into a reply at a cost of its own).

-- The state of one call, set by batch() (batch.lua) before its operations
-- run: this file is loaded once, as a Redis function library, and its
-- functions serve every call.
local KEYS, ARGV, PREFIX, DAEMON, DEADLINE, NOW_US, NOW, NOW_S, NOW_US_S
local STATES, ORDER, GRANTS, SPENT, AT, HINTED, RECORDS

-- The counter may lapse: the Redis clock floors every new token anyway.
local TOKEN_KEEP_MS = '604800000' -- 7 days
local KEY_MARGIN_MS = 1000 -- also in renew.lua
-- The work of one script, whatever clients queued: names granted (a waiter
-- for several names counts each), lapsed entries purged per name, and queue
-- entries or holds read in one go.
local GRANT_BUDGET = 128
local PURGE_MAX = 128
local SCAN = 16

local function num(n)
    return string.format('%.0f', n)
end

-- A count in ARGV, most often one digit: without tonumber's strtod then.
local DIGITS = { ['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6, ['7'] = 7, ['8'] = 8,
                 ['9'] = 9 }

local function count(s)
    return DIGITS[s] or tonumber(s)
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

-- since may be given as a string already (see NOW_S).
local function hold_encode(h)
    return table.concat({ h.count, h.token, type(h.since) == 'string' and h.since or num(h.since), h.lease,
                          h.bounded, h.daemon, h.wid, h.client }, ' ')
end

local function waiter_decode(v)
    local hid, k, lease, bounded, client, names = string.match(v, '^(%S+) (%d+) (%d+) (%d) (%S+) (.*)$')
    return { hid = hid, k = tonumber(k), lease = tonumber(lease), bounded = bounded, client = client,
             names = words(names) }
end

local function waiter_daemon(wid)
    return string.match(wid, '^([^.]+)')
end

-- Permits held on semaphore s. Call it before changing h: a new m, or one
-- written by an older version, has no count yet, which is taken from h.
local function used(s)
    local u = redis.call('HGET', s.m, 'used')
    if u then
        return tonumber(u)
    end
    local n = 0
    for _, v in ipairs(redis.call('HVALS', s.h)) do
        n = n + tonumber(string.match(v, '^%d+'))
    end
    redis.call('HSET', s.m, 'used', n)
    return n
end

local function add_used(s, k)
    redis.call('HSET', s.m, 'used', used(s) + k)
end

-- Deletes hold hid of s; its permits are free again.
local function drop_hold(s, hid)
    local v = redis.call('HGET', s.h, hid)
    if v and string.sub(hid, 1, 1) == 'p' and redis.call('EXISTS', s.m) == 1 then
        add_used(s, -hold_decode(v).count)
    end
    redis.call('HDEL', s.h, hid)
    s.hchanged = true
end

-- Drops the holds and waiters of s whose lease has run out, PURGE_MAX at
-- most: with more left, s has more to hand on.
local function purge(s)
    local dead = redis.call('ZRANGEBYSCORE', s.x, '-inf', NOW, 'LIMIT', 0, PURGE_MAX)
    for _, m in ipairs(dead) do
        if string.sub(m, 1, 1) == '@' then
            local wid = string.sub(m, 2)
            redis.call('ZREM', s.q, wid)
            redis.call('HDEL', s.w, wid)
            s.qchanged = true
        else
            drop_hold(s, m)
        end
    end
    if #dead > 0 then
        redis.call('ZREM', s.x, unpack(dead))
    end
    s.more = #dead == PURGE_MAX
end

-- The state of a name: its keys. peek leaves it as it is in Redis, for
-- the fast paths that read what they need; state purges it, once per batch,
-- and marks it slow: tidied and given its expiry again at the end. A script
-- reaches keys only through KEYS, where the keys of every name of every
-- operation are (bind): a name that is not there is an error.
local KH, KX, KQ, KW, KT, KM, KL, KK = 0, 1, 2, 3, 4, 5, 6, 7 -- a name's keys in KEYS, from its first
local NAME_KEYS = 8

local function bind(name, k)
    if STATES[name] == nil then
        local s = { name = name, h = KEYS[k + KH], x = KEYS[k + KX], q = KEYS[k + KQ], w = KEYS[k + KW],
                    t = KEYS[k + KT], m = KEYS[k + KM], l = KEYS[k + KL], k = KEYS[k + KK] }
        STATES[name] = s
        table.insert(ORDER, s)
    end
end

local function peek(name)
    return STATES[name] or error('dlockd: the keys of ' .. name .. ' were not declared')
end

-- Moves the one hold in k (if any) into h and x, where everything but the
-- fast lane (batch.lua) looks for holds.
local function promote(s)
    local v = redis.call('GET', s.k)
    if v then
        local ends, hid, hold = string.match(v, '^(%d+) (%S+) (.*)$')
        redis.call('HSET', s.h, hid, hold)
        redis.call('ZADD', s.x, ends, hid)
        redis.call('DEL', s.k)
    end
end

local function state(name)
    local s = peek(name)
    if not s.slow then
        s.slow = true
        promote(s)
        purge(s)
    end
    return s
end

local function holding(s, mode, who)
    return redis.call('HEXISTS', s.h, mode .. who) == 1
end

-- Looks at the holds of s for a request of hid for k, without reading them
-- all: returns whether a hold keeps it from being granted, whether the same
-- session and owner hold s in any mode, and the free permits of a
-- semaphore. Holds of the same session and owner never conflict (reentry,
-- upgrade, downgrade); permits conflict only by number.
local function inspect(s, hid, k)
    local mode, who = string.sub(hid, 1, 1), string.sub(hid, 2)
    if mode == 'p' then
        local free = tonumber(redis.call('HGET', s.m, 'limit') or '0') - used(s)
        return k > free, holding(s, 'p', who), free
    end
    local own = (holding(s, 'x', who) and 1 or 0) + (holding(s, 's', who) and 1 or 0)
    local n = redis.call('HLEN', s.h)
    if mode == 'x' then
        return n > own, own > 0, 0
    end
    -- An exclusive hold is granted only when nobody else holds the name, so
    -- it shares h with its owner's shared hold at most: with more than two
    -- holds, none is exclusive.
    if n > own and n <= 2 then
        for _, f in ipairs(redis.call('HKEYS', s.h)) do
            if string.sub(f, 1, 1) == 'x' and string.sub(f, 2) ~= who then
                return true, own > 0, 0
            end
        end
    end
    return false, own > 0, 0
end

-- A hold of s in the way of hid (else any hold): field and value, or nil
-- when a few HSCAN steps find none. It only names a holder in BUSY.
local function blocker(s, hid)
    local who, x = string.sub(hid, 2), string.sub(hid, 1, 1) == 'x'
    local cursor, f1, v1 = '0', nil, nil
    for _ = 1, 4 do
        local r = redis.call('HSCAN', s.h, cursor, 'COUNT', SCAN)
        for i = 1, #r[2], 2 do
            local f = r[2][i]
            if string.sub(f, 2) ~= who and (x or string.sub(f, 1, 1) == 'x') then
                return f, r[2][i + 1]
            end
            f1, v1 = f1 or f, v1 or r[2][i + 1]
        end
        cursor = r[1]
        if cursor == '0' then
            break
        end
    end
    return f1, v1
end

-- A number passed to redis.call becomes a string through printf, which
-- costs more than the command itself: the ones every grant needs are made
-- once per call (NOW_S, NOW_US_S), and the times of leases once per
-- distinct value (AT).
local function at(ms)
    local s = AT[ms]
    if s == nil then
        s = num(ms)
        AT[ms] = s
    end
    return s
end

-- The token of a new grant on the name whose t key is t: Redis's clock in
-- microseconds, or one above the last when that is ahead.
local function new_token(t)
    local token = NOW_US_S
    local last = redis.call('SET', t, token, 'PX', TOKEN_KEEP_MS, 'GET')
    -- tokens are decimal without leading zeros: compared as strings, longest first
    if last and (#last > #token or (#last == #token and last >= token)) then
        token = num(tonumber(last) + 1)
        redis.call('SET', t, token, 'PX', TOKEN_KEEP_MS)
    end
    return token
end

-- The value in h of a hold of k counts granted now: hold_encode's fields,
-- without a table for each hold.
local function new_hold(k, token, lease, bounded, daemon, wid, client)
    return (k == 1 and '1' or num(k)) .. ' ' .. token .. ' ' .. NOW_S .. ' ' .. lease .. ' ' .. bounded .. ' ' .. daemon ..
        ' ' .. wid .. ' ' .. client
end

-- Grants hid a new hold of k counts on s. Returns its token.
local function grant_new(s, hid, k, expiry, lease, bounded, daemon, wid, client)
    local token = new_token(s.t)
    redis.call('HSET', s.h, hid, new_hold(k, token, lease, bounded, daemon, wid, client))
    redis.call('ZADD', s.x, at(expiry), hid)
    return token
end

-- The same in the one-key form (its keys t and k), on a name nobody holds or waits for, with one count.
local function grant_one_key(t, k, hid, expiry, lease, bounded, wid, client)
    local token = new_token(t)
    redis.call('SET', k, at(expiry) .. ' ' .. hid .. ' ' .. new_hold(1, token, lease, bounded, DAEMON, wid, client),
        'PXAT', at(expiry + KEY_MARGIN_MS))
    return token
end

-- Grants hid k more counts on s (a new hold, or reentry). Returns token, count.
local function grant(s, hid, k, expiry, lease, bounded, daemon, wid, client)
    if string.sub(hid, 1, 1) == 'p' then
        add_used(s, k)
    end
    local v = redis.call('HGET', s.h, hid)
    if v then
        local h = hold_decode(v)
        h.count = h.count + k
        redis.call('HSET', s.h, hid, hold_encode(h))
        return h.token, h.count
    end
    return grant_new(s, hid, k, expiry, lease, bounded, daemon, wid, client), k
end

-- GRANTS lists the grants made by this call: wid, tokens, counts
-- (comma-joined per name), the free permits after it (semaphores; 0 for
-- locks) and left of each; SPENT counts their names against GRANT_BUDGET.

local function dequeue(s, wid)
    redis.call('ZREM', s.q, wid)
    redis.call('HDEL', s.w, wid)
    redis.call('ZREM', s.x, '@' .. wid)
    s.qchanged = true
end

-- The waiters a hold was granted to that cancel.lua recognises: its maker and the last few reentries, so
-- that several waits of one owner on one name, granted at once, are each confirmed once. The bound is the
-- server's, not the client's.
local WIDS_KEPT = 8

local function granted_to(h, wid)
    for w in string.gmatch(h.wid, '[^,]+') do
        if w == wid then
            return true
        end
    end
    return false
end

-- A reentry granted to waiter wid: the hold remembers it for cancel.lua.
local function remember_waiter(s, hid, wid)
    local h = hold_decode(redis.call('HGET', s.h, hid))
    local kept = {}
    for w in string.gmatch(h.wid, '[^,]+') do
        table.insert(kept, w)
    end
    table.insert(kept, wid)
    if #kept > WIDS_KEPT + 1 then
        table.remove(kept, 2)
    end
    h.wid = table.concat(kept, ',')
    redis.call('HSET', s.h, hid, hold_encode(h))
end

-- When a queue entry with lease qttl ends: never after ends (Redis ms), the
-- end of its request's wait, when there is one: what Redis grants it after
-- its daemon answered TIMEOUT or ERR BACKEND would be granted to nobody.
local function entry_end(qttl, ends)
    if ends > 0 and ends < NOW + qttl then
        return num(ends)
    end
    return NOW + qttl
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
            -- an entry queued after its request's wait had ended (behind the failover
            -- gate, say) is over already: 0 left, so its daemon checks it (not -1)
            local l = entry > NOW and entry - NOW or 0
            expiry = entry
            if left < 0 or l < left then
                left = l
            end
        end
        dequeue(s, wid)
        tokens[i], counts[i] = grant(s, w.hid, w.k, expiry, w.lease, w.bounded, daemon, wid, w.client)
        if tonumber(counts[i]) > tonumber(w.k) then
            remember_waiter(s, w.hid, wid)
        end
    end
    local t, c, free = table.concat(tokens, ','), table.concat(counts, ','), 0
    if string.sub(w.hid, 1, 1) == 'p' then
        free = select(3, inspect(group[1], w.hid, 0))
    end
    for _, f in ipairs({ wid, t, c, free, num(left) }) do
        table.insert(GRANTS, f)
    end
    SPENT = SPENT + #group
    if daemon ~= DAEMON then
        redis.call('PUBLISH', PREFIX .. daemon, table.concat({ 'G', wid, t, c, free, num(left) }, ' '))
    end
end

-- A waiter at the head of s's queue that fits there but has names whose
-- keys this call did not declare: a script reaches keys only through KEYS
-- (Redis Cluster needs it), so its daemon is told, once per call, to poke
-- it with all its names declared (R, as for a lease that ends now).
local function hint(s, wid)
    if not HINTED[wid] then
        HINTED[wid] = true
        redis.call('PUBLISH', PREFIX .. waiter_daemon(wid), 'R ' .. s.name .. ' 0')
    end
end

-- Grants waiters from the head of s's queue while they fit, in FIFO order:
-- the first that does not fit holds back everyone behind it. A waiter for
-- several names must be at the head of each of their queues and fit in each.
-- Once GRANT_BUDGET is spent, s has more to hand on.
local function advance(s)
    while true do
        local head = redis.call('ZRANGE', s.q, 0, 0)
        if #head == 0 then
            return
        end
        if SPENT >= GRANT_BUDGET then
            s.more = true
            return
        end
        local wid = head[1]
        local w = waiter_decode(redis.call('HGET', s.w, wid))
        if inspect(s, w.hid, w.k) then
            return
        end
        for _, name in ipairs(w.names) do
            if STATES[name] == nil then
                hint(s, wid)
                return
            end
        end
        local group = {}
        for i, name in ipairs(w.names) do
            local t = state(name)
            if t ~= s and (redis.call('ZRANGE', t.q, 0, 0)[1] ~= wid or inspect(t, w.hid, w.k)) then
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

-- Drops the holds of who on s in modes that its daemon knows nothing of: a
-- Redis restored from an older snapshot brings back holds released since,
-- and re-entering one would hand out its old token again.
local function drop_unknown(s, who, modes)
    for m in string.gmatch(modes, '.') do
        if holding(s, m, who) then
            drop_hold(s, m .. who)
            redis.call('ZREM', s.x, m .. who)
        end
    end
    advance(s)
end

-- Milliseconds until the earliest lease on these names that no one here
-- will release runs out: another daemon's hold or waiter, or an expired
-- session's hold kept for lock-delay. -1 when there is none. It reads only
-- the first SCAN leases of a name, in the order they end: when all are
-- this daemon's, it answers the end of the last one read (too early is
-- harmless: the retry asks again), so a long queue costs no more than a short one.
local function retry_after(list)
    local best = nil
    for _, s in ipairs(list) do
        local first = redis.call('ZRANGE', s.x, 0, SCAN - 1, 'WITHSCORES')
        for i = 1, #first, 2 do
            local m, score = first[i], tonumber(first[i + 1])
            local daemon
            if string.sub(m, 1, 1) == '@' then
                daemon = waiter_daemon(string.sub(m, 2))
            else
                local v = redis.call('HGET', s.h, m)
                daemon = v and hold_decode(v).daemon
            end
            if (daemon and daemon ~= DAEMON) or i + 1 == 2 * SCAN then
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

-- Publishes to the daemons of the first n waiters of s, but skip, that a
-- lease on s ends in ms. Those further back wait for these anyway.
local function tell_waiters(s, ms, n, skip)
    local told = { [skip or ''] = true }
    for _, wid in ipairs(redis.call('ZRANGE', s.q, 0, n - 1)) do
        local daemon = waiter_daemon(wid)
        if not told[daemon] then
            told[daemon] = true
            redis.call('PUBLISH', PREFIX .. daemon, 'R ' .. s.name .. ' ' .. ms)
        end
    end
end

-- Sets the expiry of s's keys to KEY_MARGIN_MS after the last lease in x.
local function expire(s)
    local last = redis.call('ZRANGE', s.x, -1, -1, 'WITHSCORES')
    local at = num(math.max(tonumber(last[2] or NOW), NOW) + KEY_MARGIN_MS)
    for _, key in ipairs({ s.h, s.x, s.q, s.w, s.m }) do
        redis.call('PEXPIREAT', key, at)
    end
end

-- The states of an operation's names, purged and advanced.
local function prepare(names)
    local S = {}
    for i, name in ipairs(names) do
        S[i] = state(name)
    end
    for _, s in ipairs(S) do
        advance(s)
    end
    return S
end

-- An operation's reply (see the top).
local function reply(status, ...)
    return { status, ... }
end

-- The batch's reply (see the top). Leaves no empty waiter hash behind, and
-- no semaphore once nobody holds or waits; the keys of every name touched
-- expire after their last lease (the fast lane writes k with its expiry, and
-- an UNLOCK moves no lease on). The daemon that ran it goes
-- on with the names that have more to hand on; the daemons of their first
-- waiters hear of it too, in case it does not live to.
local function finish(results)
    local more = {}
    for _, s in ipairs(ORDER) do
        if s.slow then
            if s.qchanged and redis.call('EXISTS', s.q) == 0 then
                redis.call('DEL', s.w)
            end
            if s.hchanged and redis.call('EXISTS', s.h, s.q) == 0 then
                redis.call('DEL', s.m)
            end
            if s.more then
                table.insert(more, s.name)
                tell_waiters(s, 0, 4, DAEMON)
            end
            expire(s)
        end
    end
    local r, n = { 'OK', NOW, table.concat(more, ' '), #GRANTS / 5 }, 4
    for i = 1, #GRANTS do
        r[n + i] = GRANTS[i]
    end
    n = n + #GRANTS
    for i = 1, #results do
        r[n + i] = results[i]
    end
    return r
end

-- Whether the session record rec is there: one that is gone stays gone
-- (session.lua), and a hash written to would live for ever. Read once per call.
local function record_live(rec)
    local live = RECORDS[rec]
    if live == nil then
        live = redis.call('EXISTS', rec) == 1
        RECORDS[rec] = live
    end
    return live
end

-- Sets the index entry of hid on name in record rec (nil for none) to value:
-- the token of its hold, or "w" and the waiter queued for it (session.lua).
local function index_set(rec, hid, name, value)
    if rec and record_live(rec) then
        redis.call('HSET', rec, 'i' .. hid .. ' ' .. name, value)
    end
end

-- (HDEL creates nothing: a record that is gone stays gone without a look.)
local function index_del(rec, hid, name)
    if rec then
        redis.call('HDEL', rec, 'i' .. hid .. ' ' .. name)
    end
end

local function join(list)
    return table.concat(list, ',')
end

local OPS = {}
