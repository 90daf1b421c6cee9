-- ARGV: prefix, job, now, shards. A cycle's work is queued: 'starting' -> running.
if redis.call('HGET', KMETA, 'status') ~= 'starting' then return 0 end
redis.call('HDEL', KMETA, 'start_stage')
run_job(tonumber(ARGV[3]), tonumber(ARGV[4]))
return 1
