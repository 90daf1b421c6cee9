-- ARGV: prefix, job, token, now, budget (0: none; see ``allowance``), max_depth, host_budget, trusted, part, last, queue_cap,
-- the caller's counters of the job (``counts_at``), then (url, host, shard, entry). ``queue_cap`` > 0 caps each host's queue (``place``).
-- ``trusted`` = 1: the URLs were judged new already (by the Bloom filter), so the exact seen hash
-- is neither read nor written. A big link batch is admitted in parts, one call
-- each, so no call holds Redis for long: ``part`` (0, 1, ...; '' for a batch in one call) is
-- recorded in ``pendc:<token>`` so a redelivered batch skips the parts admitted already, and the
-- ``last`` part ('1') ends the batch, as a whole batch does.
local token, now, maxd = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[6])
-- ``budget`` "a<n>": a part of a split frontier may admit n more URLs (its allowance of the
-- job's max_pages, taken by the caller), 0 included; "w<n>": the same, but the new URLs past
-- it are neither marked nor counted, only returned (``wanting``), for the caller to ask the job
-- for as many and admit them in a second call, under the batch's token: this first call only
-- looks whether the batch (or its part) was admitted before, ends nothing, and never ends the
-- job (the second call may still queue).
local mode = string.sub(ARGV[5], 1, 1)
local allowance = mode == 'a' or mode == 'w'
local budget = tonumber(allowance and string.sub(ARGV[5], 2) or ARGV[5])
local wanting = {}
local host_budget, trusted = tonumber(ARGV[7]), ARGV[8] == '1'
local part, last, cap = ARGV[9], ARGV[10] == '1', tonumber(ARGV[11])
if token ~= '' and mode == 'w' then
  if not redis.call('ZSCORE', KPEND, token)
      or (part ~= '' and not last and redis.call('SISMEMBER', P .. 'pendc:' .. token, part) == 1) then
    return {}  -- admitted before: a redelivery
  end
elseif token ~= '' then
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
    if part ~= '' then redis.call('DEL', P .. 'pendc:' .. token) end  -- a whole batch keeps none
  end
end
local status = redis.call('HGET', KMETA, 'status')
if status ~= 'running' and status ~= 'paused' and status ~= 'starting' then
  bump(KCNT, counts_at(12))  -- what the caller counted still counts: nothing is queued
  done_check(now)
  return {}
end
local cnt, seen = KCNT, KSEEN
local c0 = redis.call('HMGET', cnt, 'admitted', 'open')
local admitted = tonumber(c0[1] or '0')
local admitted0 = admitted
if allowance then budget = admitted + budget end
local capped = allowance or budget > 0
local new, dup, over, again, over_host, spilled = {}, 0, 0, 0, 0, 0
local touched = {}  -- hosts whose queues took URLs, by shard (``schedule_touched``)
-- Pages per host, read once per host and written once per host at the end: a batch's URLs
-- share few hosts, and the budget is on by default.
local hostn, grew = {}, {}
local staged = nil  -- read at the first URL placed (see ``place``)
local counts, first = counts_at(12)
if host_budget > 0 then
  local hosts = {}
  for i = first + 1, #ARGV, 4 do
    if not hostn[ARGV[i]] then
      hostn[ARGV[i]] = 0
      hosts[#hosts + 1] = ARGV[i]
    end
  end
  for host, n in pairs(hmget(KHOSTN, hosts)) do hostn[host] = tonumber(n or '0') end
end
local function host_count(host)
  return hostn[host]
end
for i = first, #ARGV, 4 do
  local url, host, shard, e = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local d = entry_depth(e)
  local cur = false
  if not trusted then cur = redis.call('HGET', seen, url) end
  if not cur then
    if capped and admitted >= budget and mode == 'w' then
      wanting[#wanting + 1] = url
    elseif capped and admitted >= budget then
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
      if place(host, shard, e, now, cap, staged, touched) == 1 then
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
      again = again + 1
    else
      dup = dup + 1
    end
  else
    if d < tonumber(cur) then redis.call('HSET', seen, url, d) end  -- dispatch applies it
    dup = dup + 1
  end
end
schedule_touched(touched, now)
-- Each grown host's count was read in this call: written back whole, in one command.
local hw = gather()
for host in pairs(grew) do add(hw, host, hostn[host]) end
send('HSET', KHOSTN, hw)
counts.admitted = admitted - admitted0
counts.open = (counts.open or 0) + #new + again
counts.duplicates = (counts.duplicates or 0) + dup
counts.dropped_max_pages = (counts.dropped_max_pages or 0) + over
counts.dropped_host_budget = (counts.dropped_host_budget or 0) + over_host
counts.depth_requeued = (counts.depth_requeued or 0) + again
counts.spilled = (counts.spilled or 0) + spilled
counts.queued = (counts.queued or 0) + QUEUED
QUEUED = 0
local got = bump(cnt, counts)
if mode ~= 'w' then done_check(now, got.open or tonumber(c0[2] or '0')) end
return {new, spilled, wanting}
