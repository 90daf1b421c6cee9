-- ARGV: prefix, job, now, lease_deadline ('' to leave it as it is), delay, the caller's counters
-- of the job (``counts_at``), then (url, token, retry_at, ip, host delay, host) per request.
-- retry_at > 0 sends the URL to the retry set, due then, with one more attempt counted; retry_at
-- < 0: the request was never made (the rest of a run cut short by a failure) and the URL goes
-- back to the head of its host's queue, no attempt counted; ip, when
-- known, becomes the host's address for the per-address budget; the host's delay, when the caller
-- has just set it ('' otherwise), spares reading it back. A request with retry_at 0 counts as a
-- page fetched from its host whether or not its lease was still its own (the host was asked,
-- as the job's ``fetched`` counts it).
local now, deadline, delay = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local n, retried, held = 0, 0, 0
local cnt, first = counts_at(6)
local urls = {}
for i = first, #ARGV, 6 do urls[#urls + 1] = ARGV[i] end
local lease = hmget(KLEASE, urls)
local ipw, gone, retry, keep, expiry, freed, back = gather(), gather(), gather(), gather(), gather(), {}, {}
local hostf = {}  -- pages fetched per host (the hosts table's count), retries aside
for i = first, #ARGV, 6 do
  local url, retry_at, ip, d = ARGV[i], tonumber(ARGV[i + 2]), ARGV[i + 3], tonumber(ARGV[i + 4])
  if retry_at == 0 then hostf[ARGV[i + 5]] = (hostf[ARGV[i + 5]] or 0) + 1 end
  local l = lease[url]
  if l then
    local t, st, shard, host, ipk, e = parse_lease(l)
    -- 'r': a run's URL before its last, fetched under the slot the last one holds.
    if t == ARGV[i + 1] and (st == 'f' or st == 'r') then
      if ip ~= '' and ip ~= ipk then add(ipw, host, ip) end
      if retry_at < 0 then
        push1(gone, url)
        back[#back + 1] = {host, shard, e}
      elseif retry_at > 0 then
        push1(gone, url)
        add(retry, retry_at, shard .. ' ' .. host .. ' ' .. next_attempt(e))
        retried = retried + 1
      else
        add(keep, url, t .. ' d ' .. shard .. ' ' .. host .. ' ' .. ipk .. ' ' .. e)
        -- deadline '': the lease is young, and the deadline the dispatch gave it stands.
        if deadline ~= '' then add(expiry, deadline, url) end
        held = held + 1
      end
      -- Read once: a second report of the same request in this call finds it fetched already.
      lease[url] = false
      if st == 'f' then freed[#freed + 1] = {host, shard, ipk, d} end
      n = n + 1
    end
  end
end
send('HSET', KIP, ipw)
send('HDEL', KLEASE, gone)
send('ZREM', KLEXP, gone)
send('ZADD', KRETRY, retry)
send('HSET', KLEASE, keep)
send('ZADD', KLEXP, expiry)
-- Back in their order, before the slot's release looks at the host's queue.
for j = #back, 1, -1 do
  local host, shard, e = back[j][1], back[j][2], back[j][3]
  local queued = redis.call('LPUSH', P .. 'q:' .. host, e)
  QUEUED = QUEUED + 1
  schedule(host, shard, now, true, queued)
end
release_slots(freed, now, delay)
cnt.inflight = (cnt.inflight or 0) - n
cnt.retried = (cnt.retried or 0) + retried
cnt.held = (cnt.held or 0) + held
if #back > 0 then cnt.run_returned = (cnt.run_returned or 0) + #back end
cnt.queued = (cnt.queued or 0) + QUEUED
QUEUED = 0
bump(KCNT, cnt)
bump(KHOSTF, hostf)
return n
