-- KEYS[1]: the record. ARGV: expected epoch, new down map (JSON), now, threshold. Returns 1 if
-- the record was still at the expected epoch and now holds the new map.
local cur = redis.call('HGET', KEYS[1], 'epoch') or '0'
if cur ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'epoch', tonumber(cur) + 1, 'down', ARGV[2], 'changed_at', ARGV[3], 'after', ARGV[4])
return 1
