-- ARGV: prefix, job, now, lease_deadline, delay, then (url, token, retry_at, ip, host delay) per
-- request. retry_at > 0 sends the URL to the retry set, due then, with one more attempt counted;
-- ip, when known, becomes the host's address for the per-address budget; the host's delay, when
-- the caller has just set it ('' otherwise), spares reading it back.
local now, deadline, delay = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local n, retried, held = 0, 0, 0
for i = 6, #ARGV, 5 do
  local url, retry_at, ip, d = ARGV[i], tonumber(ARGV[i + 2]), ARGV[i + 3], tonumber(ARGV[i + 4])
  local l = redis.call('HGET', KLEASE, url)
  if l then
    local t, st, shard, host, ipk, e = parse_lease(l)
    if t == ARGV[i + 1] and st == 'f' then
      if ip ~= '' and ip ~= ipk then redis.call('HSET', KIP, host, ip) end
      if retry_at > 0 then
        redis.call('HDEL', KLEASE, url)
        redis.call('ZREM', KLEXP, url)
        local again = next_attempt(e)
        redis.call('ZADD', KRETRY, retry_at, shard .. ' ' .. host .. ' ' .. again)
        retried = retried + 1
      else
        redis.call('HSET', KLEASE, url, t .. ' d ' .. shard .. ' ' .. host .. ' ' .. ipk .. ' ' .. e)
        redis.call('ZADD', KLEXP, deadline, url)
        held = held + 1
      end
      release_slot(host, shard, ipk, now, delay, d)
      n = n + 1
    end
  end
end
if n > 0 then redis.call('HINCRBY', KCNT, 'inflight', -n) end
if retried > 0 then redis.call('HINCRBY', KCNT, 'retried', retried) end
if held > 0 then redis.call('HINCRBY', KCNT, 'held', held) end
return n
