-- ARGV: prefix, job, now, shards. Paused -> what it was, its shards woken; a job whose last
-- URLs were stored while it was paused is done (or waits for its next cycle) now.
local now, shards = tonumber(ARGV[3]), tonumber(ARGV[4])
local status = redis.call('HGET', KMETA, 'status')
if status ~= 'paused' then return status end
local was = redis.call('HGET', KMETA, 'paused_from') or 'running'
redis.call('HDEL', KMETA, 'paused_from', 'paused_at')
if was == 'running' then run_job(now, shards) else redis.call('HSET', KMETA, 'status', was) end
return 'paused'
