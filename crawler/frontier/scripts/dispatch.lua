-- ARGV: prefix, job, shard, now, max_urls, per_host, delay, lease_deadline, token, concurrency,
-- per_ip, batch, min_free, offset, depths ('0': the job keeps no depths in the seen hash), run,
-- run_wait. Requests in flight and pages held for parse and store both count against
-- ``concurrency``. With batch > 0 the k-th request leased (a run counts as one, see below) is
-- leased under ``token.(k // batch)``: each fetch task gets a token of its own. While requests are in flight,
-- nothing goes until at least min_free slots are free (with runs, unless every due host has a
-- slot): a finished task frees its slots at once, and re-dispatching them one small task at a
-- time would keep every later task as small (each task costs the same Celery overhead whatever
-- its size). Slots that due hosts leave idle go to
-- runs: a host that may have one request in flight gives up to ``run`` URLs (as many as
-- ``run_wait`` seconds of its delay between them allow), fetched one after another by one fetch
-- task, the delay apart, so a crawl of few hosts pays a task's overhead per run, not per page.
-- A run holds the host's one slot (its last URL is leased 'f' as any request is, and its end
-- frees the slot; those before it 'r', no slot of their own) and counts as one request of its
-- task's ``batch``. Returns {(entry, host, batch number) per URL leased, in one list, next due
-- time or '', free slots (-1: not running; 0: wait for more to finish), the job's URLs in flight
-- once these are leased, requests leased under the token so far}.
local shard, now = ARGV[3], tonumber(ARGV[4])
local max_urls, per_host, delay = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local deadline, token, concurrency = ARGV[8], ARGV[9], tonumber(ARGV[10])
local per_ip, batch, min_free = tonumber(ARGV[11]), tonumber(ARGV[12] or '0'), tonumber(ARGV[13] or '0')
local rkey = P .. 'ready:' .. shard
-- ARGV[14]: requests already leased under this token by earlier calls (other shards of the same
-- dispatcher tick; a run counts as one), so batch numbers continue across them.
local leased = tonumber(ARGV[14] or '0')
local run, run_wait = tonumber(ARGV[16] or '1'), tonumber(ARGV[17] or '0')
local out = {}
local slots = -1
local inflight = 0
if redis.call('HGET', KMETA, 'status') == 'running' then
  local c = redis.call('HMGET', KCNT, 'inflight', 'held', 'queued', 'dispatched')
  local busy = tonumber(c[1] or '0') + tonumber(c[2] or '0')
  inflight = tonumber(c[1] or '0')
  slots = math.min(max_urls, concurrency - busy)
  local total = 0
  local hosts = {}
  if slots > 0 then hosts = redis.call('ZRANGEBYSCORE', rkey, '-inf', now, 'LIMIT', 0, slots) end
  -- URLs a run may take: the slots each due host would leave idle, ``run`` at most.
  local share = 1
  if run > 1 and #hosts > 0 then share = math.min(run, math.floor(slots / #hosts)) end
  -- Records most jobs never have are read only when they exist: operators' overrides.
  local overrides = {}
  if #hosts > 0 and redis.call('EXISTS', KOVR) == 1 then overrides = hmget(KOVR, hosts) end
  local delays = nil  -- read when the first host's turn needs its delay
  -- What a run of the host waits between its requests: its delay (its own, else the job's),
  -- never less than an operator's.
  local function run_delay(host)
    delays = delays or hmget(KDELAY, hosts)
    local d = tonumber(delays[host] or delay)
    local od = overrides[host] and string.match(overrides[host], '^(%S+) ')
    if od and od ~= '-' then d = math.max(d, tonumber(od)) end
    return d
  end
  -- Waiting for min_free slots gathers more hosts into a task; where a due host would take a
  -- run of the slots there are, it would only keep it waiting.
  if busy > 0 and slots < min_free then
    local runs_now = false
    if share > 1 then
      for _, host in ipairs(hosts) do
        if run_delay(host) <= run_wait then
          runs_now = true
          break
        end
      end
    end
    if not runs_now then
      slots = 0
      hosts = {}
    end
  end
  if #hosts > 0 then
    -- What every due host's turn needs is read first, a command per record for all of them, and
    -- what it changes is written at the end the same way (``gather``).
    local inf = hmget(KINF, hosts)
    local ip = hmget(KIP, hosts)
    local ipks, ipk_of = {}, {}
    for _, host in ipairs(hosts) do
      local ipk = ip[host] or ('h:' .. host)
      ipk_of[host] = ipk
      if not ipks[ipk] then
        ipks[ipk] = true
        ipks[#ipks + 1] = ipk
      end
    end
    -- An address's requests in flight, plus WAITING while hosts wait on it (see ``WAITING``).
    local ipinf = hmget(KIPINF, ipks)
    for _, ipk in ipairs(ipks) do ipinf[ipk] = tonumber(ipinf[ipk] or '0') end
    local ipdirty = {}
    -- The exact seen hash's depths are read only for a job that keeps them (ARGV[15] '0': a
    -- Bloom job's, which has none).
    local depths = ARGV[15] ~= '0'
    local leases, urls, infw, readyw, nextw, drained = {}, {}, gather(), gather(), gather(), gather()
    for _, host in ipairs(hosts) do
      if slots <= 0 then break end
      local qkey = P .. 'q:' .. host
      local hinf = tonumber(inf[host] or '0')
      local ipk = ipk_of[host]
      local waited = ipinf[ipk] >= WAITING / 2
      local ipn = ipinf[ipk]
      if waited then ipn = ipn - WAITING end
      -- Requests in flight one host may have: an operator's override, else the job's per_host.
      local limit = per_host
      if overrides[host] then
        local n = string.match(overrides[host], '^%S+ (%S+)$')
        if n and n ~= '-' then limit = tonumber(n) end
      end
      -- per_ip 0: an address takes what one host of it may (its override included).
      local ip_limit = per_ip
      if ip_limit <= 0 then ip_limit = limit end
      local take = math.min(limit - hinf, ip_limit - ipn, slots)
      -- The host's delay matters for more than one request, or for a host that stays due (one
      -- at its in-flight limit waits for a request to end instead).
      local runs = share > 1 and take == 1 and limit == 1
      local hdelay = 0
      if take > 1 or hinf + math.max(take, 0) < limit or runs then
        delays = delays or hmget(KDELAY, hosts)
        hdelay = tonumber(delays[host] or delay)
      end
      -- With a delay, requests to one host start one at a time, ``delay`` apart.
      if hdelay > 0 and take > 1 then take = 1 end
      local pop = take
      if runs then
        pop = math.min(share, slots)
        local rd = run_delay(host)
        if rd > 0 then pop = math.min(pop, 1 + math.floor(run_wait / rd)) end
      end
      local is_run = pop > take
      local got = 0
      if pop > 0 then
        local popped
        if pop == 1 then
          popped = {redis.call('LPOP', qkey)}
          if not popped[1] then popped = {} end
        else
          popped = redis.call('LPOP', qkey, pop) or {}
        end
        -- A run's URLs are one request of the batch, leased together under its number.
        for j, e in ipairs(popped) do
          local b = math.floor(leased / math.max(batch, 1))
          if not is_run or j == #popped then leased = leased + 1 end
          local t = token
          if batch > 0 then t = token .. '.' .. b end
          local st = 'f'
          if is_run and j < #popped then st = 'r' end
          leases[#leases + 1] = {e, host, t, ipk, st, b}
          urls[#urls + 1] = entry_url(e)
          got = got + 1
        end
      end
      slots = slots - got
      total = total + got
      -- Slots: one per request, one for a whole run.
      local held = got
      if is_run then held = math.min(got, 1) end
      hinf = hinf + held
      if held > 0 then
        add(infw, host, hinf)
        ipinf[ipk] = ipinf[ipk] + held
        ipdirty[ipk] = true
      end
      if hinf >= limit then
        -- Parked until a request of it ends, whatever its queue holds (release_slots looks),
        -- and that end sets its next time.
        add(readyw, PARKED, host)
      else
        if got > 0 and hdelay > 0 then add(nextw, host, now + hdelay) end
        if redis.call('LLEN', qkey) == 0 then
          push1(drained, host)
        elseif ipn + held >= ip_limit then
          add(readyw, PARKED, host)
          if redis.call('SADD', P .. 'ipwait:' .. ipk, shard .. ' ' .. host) == 1 and not waited then
            ipinf[ipk] = ipinf[ipk] + WAITING
            ipdirty[ipk] = true
          end
        else
          add(readyw, now + hdelay, host)
        end
      end
    end
    if #leases > 0 then
      local best = {}
      if depths then best = hmget(KSEEN, urls) end
      local lw, xw = gather(), gather()
      for i, l in ipairs(leases) do
        local e, host, t, ipk, st = l[1], l[2], l[3], l[4], l[5]
        local b = best[urls[i]]
        b = b and tonumber(b)
        if b and b < entry_depth(e) then e = with_depth(e, b) end
        add(lw, urls[i], t .. ' ' .. st .. ' ' .. shard .. ' ' .. host .. ' ' .. ipk .. ' ' .. e)
        add(xw, deadline, urls[i])
        out[#out + 1] = e
        out[#out + 1] = host
        out[#out + 1] = l[6]
      end
      send('HSET', KLEASE, lw)
      send('ZADD', KLEXP, xw)
    end
    local ipw = gather()
    for _, ipk in ipairs(ipks) do
      if ipdirty[ipk] then add(ipw, ipk, ipinf[ipk]) end
    end
    send('HSET', KIPINF, ipw)
    send('HSET', KINF, infw)
    send('HSET', KNEXT, nextw)
    send('ZADD', rkey, readyw)
    send('ZREM', rkey, drained)
  end
  if total > 0 then
    redis.call('HSET', KCNT, 'queued', tonumber(c[3] or '0') - total, 'inflight', inflight + total,
               'dispatched', tonumber(c[4] or '0') + total)
    inflight = inflight + total
  end
end
local first = redis.call('ZRANGE', rkey, 0, 0, 'WITHSCORES')
local nxt = ''
if #first > 0 then nxt = first[2] end
return {out, nxt, slots, inflight, leased}
