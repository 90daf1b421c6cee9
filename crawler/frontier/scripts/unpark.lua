-- ARGV: prefix, job, now, shards, host. The host may take more requests at once than when it was
-- parked for a full in-flight budget (an operator raised its limit): due again now.
local now, shards, host = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
for shard = 0, shards - 1 do
  local s = tonumber(redis.call('ZSCORE', P .. 'ready:' .. shard, host))
  if s and s >= PARKED then schedule(host, shard, now, false) end
end
return 1
