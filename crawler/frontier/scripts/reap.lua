-- ARGV: prefix, job, now, delay, limit, max_attempts, token. Expired leases go back to the front
-- of their host queue with one more attempt counted; one whose attempts are spent is re-leased
-- under ``token`` as fetched and returned ({entry, shard} pairs), for the caller to store as
-- failed. Returns {returned to queue, abandoned pairs}.
local now, delay, limit, max_attempts, token = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]),
  tonumber(ARGV[6]), ARGV[7]
local urls = redis.call('ZRANGEBYSCORE', KLEXP, '-inf', now, 'LIMIT', 0, limit)
local back, gone, held, freed, ran = 0, {}, 0, 0, 0
for _, url in ipairs(urls) do
  local l = redis.call('HGET', KLEASE, url)
  redis.call('ZREM', KLEXP, url)
  if l then
    local t, st, shard, host, ipk, e = parse_lease(l)
    if st == 'f' then
      release_slot(host, shard, ipk, now, delay)
      freed = freed + 1
    elseif st == 'r' then
      ran = ran + 1  -- in flight under the slot of its run's last URL, freed with that one
    else
      held = held - 1
    end
    local again, attempts = next_attempt(e)
    if attempts >= max_attempts then
      held = held + 1  -- held again, for the failure to be stored
      redis.call('HSET', KLEASE, url, token .. ' d ' .. shard .. ' ' .. host .. ' ' .. ipk .. ' ' .. again)
      redis.call('ZADD', KLEXP, now + 3600, url)
      gone[#gone + 1] = again
      gone[#gone + 1] = shard
    else
      redis.call('HDEL', KLEASE, url)
      local queued = redis.call('LPUSH', P .. 'q:' .. host, again)
      QUEUED = QUEUED + 1
      schedule(host, shard, now, false, queued)
      back = back + 1
    end
  end
end
if #urls > 0 then redis.call('HINCRBY', KCNT, 'lease_expired', #urls) end
if held ~= 0 then redis.call('HINCRBY', KCNT, 'held', held) end
if freed + ran > 0 then redis.call('HINCRBY', KCNT, 'inflight', -freed - ran) end
count_queued()
return {back, gone}
