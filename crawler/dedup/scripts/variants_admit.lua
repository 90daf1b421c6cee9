-- KEYS: one set per link (its group); ARGV[1]: the cap, then the link's digest per key.
-- Returns 1 (admit) or 0 (over the cap) per link.
local cap, out = tonumber(ARGV[1]), {}
for i = 1, #KEYS do
  local k, m = KEYS[i], ARGV[i + 1]
  if redis.call('SISMEMBER', k, m) == 1 then
    out[i] = 1
  elseif redis.call('SCARD', k) < cap then
    redis.call('SADD', k, m)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
