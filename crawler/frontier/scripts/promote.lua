-- ARGV: prefix, job, now, limit. Retries whose backoff is over go back to their host queues.
-- Returns {moved, next due time or ''}.
local now, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
-- The earliest first: with none due (each dispatcher tick asks), that is all it costs.
local first = redis.call('ZRANGE', KRETRY, 0, 0, 'WITHSCORES')
if #first == 0 then return {0, ''} end
if tonumber(first[2]) > now then return {0, first[2]} end
local due = redis.call('ZRANGEBYSCORE', KRETRY, '-inf', now, 'LIMIT', 0, limit)
for _, m in ipairs(due) do
  local shard, host, e = string.match(m, '^(%S+) (%S+) (.*)$')
  redis.call('ZREM', KRETRY, m)
  requeue(host, shard, e, now)
end
count_queued()
first = redis.call('ZRANGE', KRETRY, 0, 0, 'WITHSCORES')
local nxt = ''
if #first > 0 then nxt = first[2] end
return {#due, nxt}
