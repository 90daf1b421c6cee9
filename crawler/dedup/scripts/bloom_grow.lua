-- KEYS: meta, then the new layer's segment keys. ARGV: expected layer count, capacity, p, k,
-- segments, segment_bits, segment bytes. Adds the layer if nobody has yet; returns the count.
local have = tonumber(redis.call('HGET', KEYS[1], 'layers') or '0')
if have ~= tonumber(ARGV[1]) then return have end
local i = have
redis.call('HSET', KEYS[1], 'cap:' .. i, ARGV[2], 'p:' .. i, ARGV[3], 'k:' .. i, ARGV[4],
           'segs:' .. i, ARGV[5], 'bits:' .. i, ARGV[6], 'n:' .. i, 0, 'layers', i + 1)
local zero = string.rep('\0', tonumber(ARGV[7]))
for s = 2, #KEYS do redis.call('SET', KEYS[s], zero) end
return i + 1
