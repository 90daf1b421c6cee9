-- ARGV: prefix, job, now. Running -> paused (nothing more is dispatched; what is in flight
-- finishes and is stored); a periodic job waiting for its next cycle -> paused (no cycle starts).
-- Returns the status the job had.
local status = redis.call('HGET', KMETA, 'status')
if status == 'running' or status == 'waiting' then
  redis.call('HSET', KMETA, 'status', 'paused', 'paused_from', status, 'paused_at', ARGV[3])
end
return status
