-- Times the encoding of a Redis wake-up's pending arrivals (crates/baton-store/src/redis/cas.lua)
-- inside the server, as it was ('old') and as it is ('new'; 'fmt': one string.format an
-- arrival, tried and not adopted). Run: redis-cli -p PORT --eval tools/bench/lua/encode_arrivals.lua
-- , WHICH ARRIVALS BYTES_EACH DOCUMENT_BYTES ITERATIONS. Returns the microseconds a payload took
-- and its size. BENCHMARKS.md gives the figures.
-- The old and new lines are copies of the script's, kept here to time them side by side.
local which, k, each, docn, iters = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local arrivals = {}
for i = 1, k do
    local t = {}
    for j = 1, each do t[j] = string.char(32 + ((i * 7 + j * 13) % 90)) end
    arrivals[i] = table.concat(t)
end
local doc = string.rep('d', docn)
local key = 'baton/some/key'
local new_version = '123-1796685000123456'
local t0 = redis.call('TIME')
local payload
for _ = 1, iters do
    local left = k
    local known = new_version .. '.' .. left
    if which == 'old' then
        payload = key
        for _, arrival in ipairs(arrivals) do
            known = known .. ' ' .. string.gsub(arrival, '.', function(c)
                return string.format('%02x', string.byte(c))
            end)
        end
        if #doc + #known <= 8192 then
            payload = key .. '\n' .. known .. '\n' .. doc
        end
    else
        local pushed_max = 8192
        payload = key
        local size = #doc + #known + 3 * left
        local list = {}
        if left > 0 and size <= pushed_max then
            list = arrivals
            size = #doc + #known
            for _, arrival in ipairs(list) do
                size = size + 1 + 2 * #arrival
            end
        end
        if size <= pushed_max then
            local hex = setmetatable({}, {__index = function(pairs_of, byte)
                local pair = string.format('%02x', string.byte(byte))
                pairs_of[byte] = pair
                return pair
            end})
            local parts = {key, '\n', known}
            for _, arrival in ipairs(list) do
                parts[#parts + 1] = ' '
                if which == 'fmt' then
                    parts[#parts + 1] = string.format(string.rep('%02x', #arrival), string.byte(arrival, 1, -1))
                else
                    parts[#parts + 1] = (string.gsub(arrival, '.', hex))
                end
            end
            parts[#parts + 1] = '\n'
            parts[#parts + 1] = doc
            payload = table.concat(parts)
        end
    end
end
local t1 = redis.call('TIME')
local us = (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])
return {tostring(us / iters), #payload}
