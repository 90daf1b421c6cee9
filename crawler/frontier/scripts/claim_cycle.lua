-- ARGV: prefix, job, now, next cycle start, stale. A periodic job waiting for a cycle that is due
-- starts it: the cycle number goes up, the status becomes 'starting'. Exactly one caller wins,
-- however many beats or ticks run at once. A start that crashed (still 'starting' after
-- ``stale`` seconds) is handed out again. Returns {cycle, 1 if fresh / 0 if resumed} or {}.
local now, nxt, stale = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local m = KMETA
local status = redis.call('HGET', m, 'status')
local cycle = tonumber(redis.call('HGET', m, 'cycle') or '0')
if status == 'starting' and tonumber(redis.call('HGET', m, 'cycle_started_at')) < now - stale then
  redis.call('HSET', m, 'cycle_started_at', now)
  return {cycle, 0}
end
if status ~= 'waiting' or tonumber(redis.call('HGET', m, 'next_cycle_at') or '0') > now then return {} end
cycle = cycle + 1
-- Pages schedule their next visit from when the cycle was due, not from when a tick noticed.
local due = redis.call('HGET', m, 'next_cycle_at') or now
redis.call('HSET', m, 'status', 'starting', 'cycle', cycle, 'cycle_started_at', now, 'cycle_due_at', due,
           'next_cycle_at', nxt, 'start_stage', 'claimed')
redis.call('HSET', P .. 'cyc:' .. cycle, 'started_at', now)
return {cycle, 1}
