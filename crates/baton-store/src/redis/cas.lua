-- The compare-and-swap of the Redis store (see mod.rs for the key layout). One script, so the
-- check, the writes, the history and the wake-up are one atomic step and one round trip.
--
-- KEYS[1]  the document hash: v (version), d (document), n (writes so far), s (last history seq)
-- KEYS[2]  the history stream: entry IDs `<seq>-0`, one field `e` holding the entry
-- KEYS[3]  the sorted set of every key with a document (score 0, for `list`)
-- KEYS[4]  the due index: a sorted set of the keys that have a due time, scored by it
-- KEYS[5]  the key's arrivals: a list, oldest first (appended by the store, outside any CAS)
-- ARGV[1]  '1' when ARGV[2] is the expected version, '0' for "only if there is no document"
-- ARGV[2]  the expected version: the document's (`v`), and `.N` when its reader also knew of N
--          arrivals (a load's N > 0; a wake-up's N >= 0, `.0` knowing none pending). It matches
--          while the document is as read and, without `.N`, none is pending: arrivals are only
--          appended between writes, so the first N pending are the ones known, which the write
--          takes, leaving later ones pending.
-- ARGV[3]  the new document
-- ARGV[4]  the key, as baton names it (member of KEYS[3], first line of the wake-up)
-- ARGV[5]  the wake-up channel of the store's namespace; a key's own is ARGV[5] .. ':' .. ARGV[4]
-- ARGV[6]  how to trim each key's history: '=N' keeps exactly the newest N entries, '~N' about
--          N (whole stream nodes at a time: at least N)
-- ARGV[7]  when the key next needs a worker (ms), or '' for never: the key's score in KEYS[4]
-- ARGV[8]  whom the write wakes by tag: '*' for every waiter, else the tickets' ids, one per line
-- ARGV[9..] history entries to append, oldest first
--
-- Returns {1, seconds, microseconds, new version} when written (the arrivals read removed,
-- later ones and, on a first write, all left pending), and on a stale version {0, seconds, microseconds, current
-- version, current document, arrival, ...}, or {0, seconds, microseconds} when the key has no
-- document. The time is the server's TIME, so every CAS also reads the clock.

-- Redis before 5 replicates scripts verbatim and refuses writes after TIME; since 5 this is the
-- default and the call a no-op (it is deprecated, so call it only where it exists).
if redis.replicate_commands then
    redis.replicate_commands()
end

local now = redis.call('TIME')
local current = redis.call('HMGET', KEYS[1], 'v', 'n', 's')
local version = current[1]

local pending = redis.call('LLEN', KEYS[5])
local matches
local taken = 0
if ARGV[1] == '0' then
    matches = not version
else
    -- `.N` names the arrivals its reader knew of (a load's N > 0, a push's N >= 0: a push
    -- carries the arrivals pending after its write); no suffix (a write's own version, a load
    -- that read none) knew none, so it matches only while none is pending.
    local expected, seen = string.match(ARGV[2], '^(.*)%.(%d+)$')
    if expected then
        seen = tonumber(seen)
        matches = version == expected and seen <= pending
    else
        expected, seen = ARGV[2], 0
        matches = version == expected and pending == 0
    end
    taken = seen
end
if not matches then
    if version then
        local reply = {0, now[1], now[2], version, redis.call('HGET', KEYS[1], 'd')}
        if pending > 0 then
            reply[4] = version .. '.' .. pending
            for _, arrival in ipairs(redis.call('LRANGE', KEYS[5], 0, -1)) do
                reply[#reply + 1] = arrival
            end
        end
        return reply
    end
    return {0, now[1], now[2]}
end
if taken > 0 then
    redis.call('LTRIM', KEYS[5], taken, -1)
end

-- The version is the write count plus the server's time in microseconds: a server that lost its
-- data (no persistence, a restore from an older snapshot) starts counting again, and the time
-- keeps its new versions distinct from any a client may still hold in its cache.
local n = (tonumber(current[2] or '0') or 0) + 1
local new_version = n .. '-' .. now[1] .. string.format('%06d', tonumber(now[2]))

-- History first: Redis does not roll back the writes of a script that fails halfway, so the one
-- step that can fail (an entry ID not above the stream's last) comes before any other write and
-- is put right before it is retried. The next seq follows the document's counter; the stream's
-- last ID is read only when that append fails, where a stream outlived its document (the hash
-- evicted or deleted by hand) or took IDs past its counter. That ID, not the last entry: a
-- stream emptied by hand still refuses every ID up to it. Reading the last entry at every
-- append cost a third of the script's time.
local n_entries = #ARGV - 8
if n_entries > 0 then
    local trim_how = string.sub(ARGV[6], 1, 1)
    local trim_keep = string.sub(ARGV[6], 2)
    local function append(seq, entry)
        return redis.pcall('XADD', KEYS[2], 'MAXLEN', trim_how, trim_keep, seq .. '-0', 'e', entry)
    end
    local first_seq = (tonumber(current[3] or '0') or 0) + 1
    local appended = append(first_seq, ARGV[9])
    if type(appended) == 'table' and appended.err then
        local info = redis.call('XINFO', 'STREAM', KEYS[2])
        local last_seq = 0
        for i = 1, #info - 1, 2 do
            if info[i] == 'last-generated-id' then
                last_seq = tonumber(string.match(info[i + 1], '^(%d+)')) or 0
            end
        end
        if last_seq < first_seq then
            return redis.error_reply(appended.err)
        end
        first_seq = last_seq + 1
        redis.call('XADD', KEYS[2], 'MAXLEN', trim_how, trim_keep, first_seq .. '-0', 'e', ARGV[9])
    end
    for i = 2, n_entries do
        redis.call('XADD', KEYS[2], 'MAXLEN', trim_how, trim_keep, (first_seq + i - 1) .. '-0', 'e', ARGV[8 + i])
    end
    redis.call('HSET', KEYS[1], 'v', new_version, 'd', ARGV[3], 'n', n, 's', first_seq + n_entries - 1)
else
    redis.call('HSET', KEYS[1], 'v', new_version, 'd', ARGV[3], 'n', n)
end
redis.call('ZADD', KEYS[3], 0, ARGV[4])
if ARGV[7] == '' then
    redis.call('ZREM', KEYS[4], ARGV[4])
else
    redis.call('ZADD', KEYS[4], ARGV[7], ARGV[4])
end
-- The wake-up goes on the key's own channel (`CHANNEL:KEY`, which only the key's watchers
-- subscribe to) and says which key changed and, unless the document is large, what it now
-- holds, so a woken waiter needs no read: `KEY \n VERSION \n DOCUMENT` (keys hold no control
-- characters). VERSION names the arrivals pending after the write, `V.N`, followed by each in
-- hex (` HEX`, oldest first): a CAS naming it takes those and leaves any appended since pending,
-- so a holder granted by this write releases without losing to an arrival that came after.
-- Larger documents (PUSHED_DOCUMENT_MAX in mod.rs) go without: Redis disconnects
-- subscribers that fall behind. The namespace's channel is told the bare key, for prefix
-- watchers (idle job workers) and batons that subscribed to it alone. Waiters watching by their
-- ticket hear the same message on `CHANNEL:KEY\nID` when the write names them, and on
-- `CHANNEL:KEY\n` when it names no one (it may concern everyone).
-- The payload is sized before anything is encoded (each arrival takes at least three bytes,
-- then exactly one and twice its own), so a write that leaves a long line pending sends the
-- bare key without reading or encoding any; the encoding looks each byte up once a script.
local pushed_max = 8192
local payload = ARGV[4]
local left = pending - taken
local known = new_version .. '.' .. left
local size = #ARGV[3] + #known + 3 * left
local arrivals = {}
if left > 0 and size <= pushed_max then
    arrivals = redis.call('LRANGE', KEYS[5], 0, -1)
    size = #ARGV[3] + #known
    for _, arrival in ipairs(arrivals) do
        size = size + 1 + 2 * #arrival
    end
end
if size <= pushed_max then
    local hex = setmetatable({}, {__index = function(pairs_of, byte)
        local pair = string.format('%02x', string.byte(byte))
        pairs_of[byte] = pair
        return pair
    end})
    local parts = {ARGV[4], '\n', known}
    for _, arrival in ipairs(arrivals) do
        parts[#parts + 1] = ' '
        parts[#parts + 1] = (string.gsub(arrival, '.', hex))
    end
    parts[#parts + 1] = '\n'
    parts[#parts + 1] = ARGV[3]
    payload = table.concat(parts)
end
redis.call('PUBLISH', ARGV[5] .. ':' .. ARGV[4], payload)
local tagged = ARGV[5] .. ':' .. ARGV[4] .. '\n'
if ARGV[8] == '*' then
    redis.call('PUBLISH', tagged, payload)
else
    for tag in string.gmatch(ARGV[8], '[^\n]+') do
        redis.call('PUBLISH', tagged .. tag, payload)
    end
end
redis.call('PUBLISH', ARGV[5], ARGV[4])
return {1, now[1], now[2], new_version}
