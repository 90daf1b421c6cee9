-- ARGV: prefix, job, lease_deadline ('' to leave the deadlines as they are), then (url, token)
-- pairs. Returns per pair whether this holder still owns the lease and should fetch: 0, 1, or
-- for a run's URL before its last ('r', see dispatch) 'r', its host's own delay ('' for the
-- job's), a space and an operator's override of the host ('' for none): the fetch stage waits
-- the one between the run's requests, never less than the other's delay.
local urls = {}
for i = 4, #ARGV, 2 do urls[#urls + 1] = ARGV[i] end
local lease = hmget(KLEASE, urls)
local res, expiry, run_hosts = {}, gather(), {}
for i = 4, #ARGV, 2 do
  local l = lease[ARGV[i]]
  local ok = 0
  if l then
    local t, st, _, host = parse_lease(l)
    if t == ARGV[i + 1] and (st == 'f' or st == 'r') then
      if ARGV[3] ~= '' then add(expiry, ARGV[3], ARGV[i]) end
      ok = 1
      if st == 'r' then
        ok = host
        run_hosts[#run_hosts + 1] = host
      end
    end
  end
  res[#res + 1] = ok
end
send('ZADD', KLEXP, expiry)
if #run_hosts > 0 then
  local own = hmget(KDELAY, run_hosts)
  local ovr = {}
  if redis.call('EXISTS', KOVR) == 1 then ovr = hmget(KOVR, run_hosts) end
  for j, v in ipairs(res) do
    if type(v) == 'string' then res[j] = 'r' .. (own[v] or '') .. ' ' .. (ovr[v] or '') end
  end
end
return res
