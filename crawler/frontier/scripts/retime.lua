-- ARGV: prefix, job, now, shards, then (host, delay) pairs. A host's delay just got shorter (an
-- operator's override or the job's delay changed while it runs): a host waiting out the longer
-- one may go once the shorter one has passed, without waiting the rest of the old one.
local now, shards = tonumber(ARGV[3]), tonumber(ARGV[4])
local n = 0
for i = 5, #ARGV, 2 do
  local host, t = ARGV[i], now + tonumber(ARGV[i + 1])
  local nxt = tonumber(redis.call('HGET', KNEXT, host))
  if nxt and nxt > t then
    redis.call('HSET', KNEXT, host, t)
    for shard = 0, shards - 1 do
      local key = P .. 'ready:' .. shard
      local score = tonumber(redis.call('ZSCORE', key, host))
      if score and score > t and score < PARKED then
        redis.call('ZADD', key, t, host)
        wake(shard)
      end
    end
    n = n + 1
  end
end
return n
