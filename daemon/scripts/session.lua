-- standalone
-- session.lua: the records of sessions, so that any daemon sharing the Redis
-- can resume one. A record is a hash: d daemon id, n client name, t ttl (ms),
-- k SHA-256 of the secret (hex), p peer, and one field "i<hid> <name>" per
-- hold or wait the session may have, whose value is the token of its hold,
-- or "w" and the wid of its waiter before the grant. It expires by itself unless renewed.
-- A LOCK or UNLOCK of the batch library that carries the record (common.lua)
-- writes its own entries, in the same call; "index" below writes the others.
-- ARGV[1] is the operation:
--   put      KEYS[1]; ARGV prefix, sid, expiry (ms), from, then field value
--            pairs (d, the calling daemon, first). With from "" it writes a
--            record there is none of, or the caller's own; with a daemon id,
--            only a live record (k) of that daemon or already the caller's (a
--            takeover, tried again): a record another daemon has or ended is
--            left alone, and 0 returned. When the record named another daemon,
--            that one is told "M sid" on its channel. Returns that daemon or "";
--            a takeover returns "d", that daemon, then the index entries with a
--            token that the record has and the put does not write (written
--            back by the old daemon after the caller read the record).
--   get      KEYS[1]: the record as field value pairs, {} when there is none.
--   index    KEYS: records; ARGV the calling daemon, key prefix, then for
--            each record: count, then that many changes: "+field" (added,
--            value 0), "=value field" (value: the token of its hold, or "w"
--            and the waiter queued for it) or "-field" (deleted). A record
--            that is gone stays gone. A token for a record another daemon has
--            (the session moved) is not written: that daemon is told
--            "L field token" on its channel, a hold its session lost.
--   touch    KEYS: records; ARGV: the expiry (ms) of each. Returns the
--            positions (from 1) of those that are gone.
--   del      KEYS[1]; ARGV daemon, ms, killed: ends it, unless another daemon
--            has it: what is left for ms is only d (and x when killed is
--            "x": an operator's KILL), so that a daemon still holding a copy
--            of the session lets go when it reads it (ending it there too
--            after a KILL), and nobody can resume it (no k).
-- The record's field x (any value) says an operator's KILL ended the session.
local op = ARGV[1]

if op == 'put' then
    local key, prefix, sid, ms, from = KEYS[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
    local old = redis.call('HGET', key, 'd') or ''
    local now = ARGV[7]
    if from == '' and old ~= '' and old ~= now then
        return 0
    elseif from ~= '' and (redis.call('HEXISTS', key, 'k') == 0 or (old ~= from and old ~= now)) then
        return 0
    end
    local fields, own = {}, {}
    for i = 6, #ARGV do
        fields[#fields + 1] = ARGV[i]
        if i % 2 == 0 then
            own[ARGV[i]] = true
        end
    end
    local back
    if from ~= '' then
        back = { 'd', old }
        local all = redis.call('HGETALL', key)
        for i = 1, #all, 2 do
            local f, v = all[i], all[i + 1]
            if string.sub(f, 1, 1) == 'i' and not own[f] and string.match(v, '^[1-9]%d*$') then
                back[#back + 1], back[#back + 2] = f, v
            end
        end
    end
    redis.call('HSET', key, unpack(fields))
    redis.call('PEXPIRE', key, ms)
    if old ~= '' and old ~= now then
        redis.call('PUBLISH', prefix .. old, 'M ' .. sid)
    end
    return back or (old ~= now and old or '')
elseif op == 'get' then
    return redis.call('HGETALL', KEYS[1])
elseif op == 'index' then
    local caller, prefix, a = ARGV[2], ARGV[3], 4
    for _, key in ipairs(KEYS) do
        local n = tonumber(ARGV[a])
        local live = redis.call('EXISTS', key) == 1
        local owner = live and redis.call('HGET', key, 'd')
        for j = a + 1, a + n do
            local f = ARGV[j]
            if not live then
                break
            elseif string.sub(f, 1, 1) == '+' then
                redis.call('HSET', key, string.sub(f, 2), '0')
            elseif string.sub(f, 1, 1) == '=' then
                local value, field = string.match(f, '^=(%S+) (.*)$')
                if owner and owner ~= caller and string.match(value, '^[1-9]%d*$') then
                    redis.call('PUBLISH', prefix .. owner, 'L ' .. field .. ' ' .. value)
                else
                    redis.call('HSET', key, field, value)
                end
            else
                redis.call('HDEL', key, string.sub(f, 2))
            end
        end
        a = a + n + 1
    end
    return 0
elseif op == 'touch' then
    local gone = {}
    for i, key in ipairs(KEYS) do
        if redis.call('PEXPIRE', key, ARGV[i + 1]) == 0 then
            table.insert(gone, i)
        end
    end
    return gone
elseif op == 'del' then
    local d = redis.call('HGET', KEYS[1], 'd')
    if d and d ~= ARGV[2] then
        return 0
    end
    redis.call('DEL', KEYS[1])
    redis.call('HSET', KEYS[1], 'd', ARGV[2])
    if ARGV[4] == 'x' then
        redis.call('HSET', KEYS[1], 'x', '1')
    end
    return redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return redis.error_reply('session.lua: unknown operation ' .. tostring(op))
