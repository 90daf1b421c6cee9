-- ARGV: prefix, job, token, now, budget, max_depth, host_budget, trusted, part, last, queue_cap,
-- then (url, host, shard, entry). ``queue_cap`` > 0 caps each host's queue (``place``).
-- ``trusted`` = 1: the URLs were judged new already (by the Bloom filter), so the exact seen hash
-- is neither read nor written. A big link batch is admitted in parts, one call
-- each, so no call holds Redis for long: ``part`` (0, 1, ...; '' for a batch in one call) is
-- recorded in ``pendc:<token>`` so a redelivered batch skips the parts admitted already, and the
-- ``last`` part ('1') ends the batch, as a whole batch does.
local token, now, budget, maxd = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local host_budget, trusted = tonumber(ARGV[7]), ARGV[8] == '1'
local part, last, cap = ARGV[9], ARGV[10] == '1', tonumber(ARGV[11])
if token ~= '' then
  if part ~= '' and not last then
    if not redis.call('ZSCORE', KPEND, token) then
      return {}  -- the whole batch was admitted before
    end
    if redis.call('SADD', P .. 'pendc:' .. token, part) == 0 then
      return {}  -- this part was admitted before: a redelivery
    end
  else
    if redis.call('ZREM', KPEND, token) == 0 then
      return {}  -- this link batch was admitted before: a redelivery
    end
    redis.call('HDEL', KPENDB, token)
    redis.call('DEL', P .. 'pendc:' .. token)
  end
end
local status = redis.call('HGET', KMETA, 'status')
if status ~= 'running' and status ~= 'paused' and status ~= 'starting' then
  done_check(now)
  return {}
end
local cnt, seen = KCNT, KSEEN
local admitted = tonumber(redis.call('HGET', cnt, 'admitted') or '0')
local new, dup, over, again, over_host, spilled = {}, 0, 0, 0, 0, 0
-- Pages per host, read once per host and written once per host at the end: a batch's URLs
-- share few hosts, and the budget is on by default.
local hostn, grew = {}, {}
local staged = nil  -- read at the first URL placed (see ``place``)
local function host_count(host)
  if not hostn[host] then hostn[host] = tonumber(redis.call('HGET', KHOSTN, host) or '0') end
  return hostn[host]
end
for i = 12, #ARGV, 4 do
  local url, host, shard, e = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local d = entry_depth(e)
  local cur = false
  if not trusted then cur = redis.call('HGET', seen, url) end
  if not cur then
    if budget > 0 and admitted >= budget then
      if not trusted then redis.call('HSET', seen, url, 'b') end
      over = over + 1
    elseif host_budget > 0 and host_count(host) >= host_budget then
      if not trusted then redis.call('HSET', seen, url, 'b') end
      over_host = over_host + 1
    else
      admitted = admitted + 1
      if host_budget > 0 then
        hostn[host] = hostn[host] + 1
        grew[host] = (grew[host] or 0) + 1
      end
      if not trusted then redis.call('HSET', seen, url, d) end
      if staged == nil then staged = cap > 0 and redis.call('EXISTS', KSPSEQ) == 1 end
      if place(host, shard, e, now, cap, staged) == 1 then
        spilled = spilled + 1
        staged = true  -- this host's next URLs go after it
      end
      new[#new + 1] = url
    end
  elseif cur == 'b' or cur == 's' then
    dup = dup + 1
  elseif string.sub(cur, 1, 1) == 'x' then
    -- Stored already. Fetch it again only if it was too deep to follow its links and this
    -- shorter path is not.
    local cd = tonumber(string.sub(cur, 2))
    if maxd > 0 and d < cd and cd >= maxd and d < maxd then
      redis.call('HSET', seen, url, d)
      requeue(host, shard, e, now)
      redis.call('HINCRBY', cnt, 'open', 1)
      again = again + 1
    else
      dup = dup + 1
    end
  else
    if d < tonumber(cur) then redis.call('HSET', seen, url, d) end  -- dispatch applies it
    dup = dup + 1
  end
end
redis.call('HSET', cnt, 'admitted', admitted)
for host, n in pairs(grew) do redis.call('HINCRBY', KHOSTN, host, n) end
if #new > 0 then redis.call('HINCRBY', cnt, 'open', #new) end
if dup > 0 then redis.call('HINCRBY', cnt, 'duplicates', dup) end
if over > 0 then redis.call('HINCRBY', cnt, 'dropped_max_pages', over) end
if over_host > 0 then redis.call('HINCRBY', cnt, 'dropped_host_budget', over_host) end
if again > 0 then redis.call('HINCRBY', cnt, 'depth_requeued', again) end
if spilled > 0 then redis.call('HINCRBY', cnt, 'spilled', spilled) end
count_queued()
done_check(now)
return {new, spilled}
