-- ARGV: prefix, job, now, delay, max_depth, then (url, token) pairs. Ends leases whose page is
-- stored; a page expanded at a depth that cut its links, while a shorter path to it turned up,
-- goes back to its queue once more instead.
local now, delay, maxd = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local n, again, held, freed = 0, 0, 0, 0
for i = 6, #ARGV, 2 do
  local url = ARGV[i]
  local l = redis.call('HGET', KLEASE, url)
  if l then
    local t, st, shard, host, ipk, e = parse_lease(l)
    if t == ARGV[i + 1] then
      if st == 'f' then
        release_slot(host, shard, ipk, now, delay)
        freed = freed + 1
      else
        held = held + 1
      end
      redis.call('HDEL', KLEASE, url)
      redis.call('ZREM', KLEXP, url)
      local ed = entry_depth(e)
      local best = false
      if maxd > 0 then best = tonumber(redis.call('HGET', KSEEN, url)) end
      if best and best < ed and ed >= maxd and best < maxd then
        requeue(host, shard, with_depth(e, best), now)
        again = again + 1
      else
        -- Only depth-limited jobs need to know a URL was stored, and at what depth.
        if maxd > 0 then redis.call('HSET', KSEEN, url, 'x' .. ed) end
        n = n + 1
      end
    end
  end
end
local open = nil
if n > 0 then
  open = redis.call('HINCRBY', KCNT, 'open', -n)
  redis.call('HINCRBY', KCNT, 'stored', n)
end
if again > 0 then redis.call('HINCRBY', KCNT, 'depth_requeued', again) end
if held > 0 then redis.call('HINCRBY', KCNT, 'held', -held) end
if freed > 0 then redis.call('HINCRBY', KCNT, 'inflight', -freed) end
count_queued()
done_check(now, open)
return n
