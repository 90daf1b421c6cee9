-- ARGV: prefix, job, now, host, shard, then (seq, entry) pairs in ascending seq: the host's URLs
-- read back from the store. Each joins the host's queue only if it is the next the host is owed
-- (seq = refilled + 1): one already brought back (a refill repeated after a crash) is skipped, and
-- a gap (a URL still staged, not yet in the store) stops the refill there, so every URL comes
-- back once and in order. Returns the host's refilled sequence number after it.
local now, host, shard = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local done = tonumber(redis.call('HGET', KSPREF, host) or '0')
local n = 0
for i = 6, #ARGV, 2 do
  local seq = tonumber(ARGV[i])
  if seq == done + 1 then
    requeue(host, shard, ARGV[i + 1], now)
    done = seq
    n = n + 1
  elseif seq > done + 1 then
    break
  end
end
count_queued()
if n > 0 then
  redis.call('HSET', KSPREF, host, done)
  redis.call('HINCRBY', KCNT, 'refilled', n)
end
return done
