-- ARGV: prefix, job, lease_deadline ('' to leave the deadlines as they are), then (url, token)
-- pairs. Returns 1/0 per pair: whether this holder still owns the lease and should fetch.
local urls = {}
for i = 4, #ARGV, 2 do urls[#urls + 1] = ARGV[i] end
local lease = hmget(KLEASE, urls)
local res, expiry = {}, gather()
for i = 4, #ARGV, 2 do
  local l = lease[ARGV[i]]
  local ok = 0
  if l then
    local t, st = parse_lease(l)
    if t == ARGV[i + 1] and st == 'f' then
      if ARGV[3] ~= '' then add(expiry, ARGV[3], ARGV[i]) end
      ok = 1
    end
  end
  res[#res + 1] = ok
end
send('ZADD', KLEXP, expiry)
return res
