-- adopt.lua: the holds of a session this daemon resumes: each one found
-- alive becomes this daemon's (it renews it from now on) with a lease
-- starting again.
-- ARGV from A: lease (ms), then the hids of the names, in order, in one
-- space-separated string, then the waiters the session had queued for them
-- ("-" for none), likewise, then to: "" to adopt, else the daemon to hand
-- back the holds this daemon adopted (a resume that did not complete: the
-- holds go back as they were, their leases untouched, and no waiter; that
-- daemon hears "H name hid token" for each, and releases those of a session
-- it no longer has), then from: the daemon the session's record named. A
-- live hold of the session that a third daemon has means another takeover
-- got there first: nothing is taken, and the reply is BUSY daemon 0.
-- A waiter of another daemon still queued is taken out (its request went
-- with its connection) before anything is adopted.
-- Reply fields: OK, then for each name: token count left, where token is ""
-- when the hold is gone (or, handing back, was not this daemon's), and left
-- is the ms to the end of a lease= (-1 for a hold renewed for as long as its
-- session lives).
local lease, hids, wids, to, from = tonumber(ARGV[A]), words(ARGV[A + 1]), words(ARGV[A + 2]), ARGV[A + 3], ARGV[A + 4]
local out = {}
-- One name's reply fields: token count left (token "" when there is no hold).
local function answer(token, count, left)
    table.insert(out, token)
    table.insert(out, count)
    table.insert(out, left)
end
if to ~= '' then
    for i, s in ipairs(S) do
        local v = redis.call('HGET', s.h, hids[i])
        local h = v and hold_decode(v)
        if h and h.daemon == DAEMON then
            h.daemon = to
            redis.call('HSET', s.h, hids[i], hold_encode(h))
            redis.call('PUBLISH', PREFIX .. to, table.concat({ 'H', s.name, hids[i], h.token }, ' '))
            answer(h.token, h.count, -1)
        else
            answer('', 0, -1)
        end
    end
    return reply('OK', unpack(out))
end
for i, s in ipairs(S) do
    local v = redis.call('HGET', s.h, hids[i])
    local daemon = v and hold_decode(v).daemon
    if daemon and daemon ~= '-' and daemon ~= from and daemon ~= DAEMON then
        return reply('BUSY', daemon, 0)
    end
end
for i, s in ipairs(S) do
    local wid = wids[i]
    if wid and wid ~= '-' and waiter_daemon(wid) ~= DAEMON and redis.call('ZSCORE', s.q, wid) then
        local names = waiter_decode(redis.call('HGET', s.w, wid)).names
        for _, t in ipairs(S) do
            if t.q ~= s.q then
                for _, n in ipairs(names) do
                    if n == t.name then
                        dequeue(t, wid)
                    end
                end
            end
        end
        dequeue(s, wid)
        advance(s)
    end
end
for i, s in ipairs(S) do
    local hid = hids[i]
    local v = redis.call('HGET', s.h, hid)
    local h = v and hold_decode(v)
    local ends = v and tonumber(redis.call('ZSCORE', s.x, hid) or '0')
    -- A hold owned by "-" is an expired session's, kept for lock-delay.
    if v and ends > NOW and h.daemon ~= '-' then
        local left = -1
        h.daemon = DAEMON
        redis.call('HSET', s.h, hid, hold_encode(h))
        if h.bounded == '1' then
            left = ends - NOW
        elseif ends < NOW + lease then
            redis.call('ZADD', s.x, at(NOW + lease), hid)
        end
        answer(h.token, h.count, num(left))
    else
        answer('', 0, -1)
    end
end
return reply('OK', unpack(out))
