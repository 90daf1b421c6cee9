-- ARGV: prefix, job, lease_deadline, then (url, token) pairs. Pushes the expiry of the leases this
-- holder still owns (either stage) out to the deadline, never earlier than it was: parse and store
-- renew the pages they hold, and a store waiting out an outage renews them past its next try.
-- Returns how many were renewed.
local deadline, n = tonumber(ARGV[3]), 0
local urls = {}
for i = 4, #ARGV, 2 do urls[#urls + 1] = ARGV[i] end
local lease = hmget(KLEASE, urls)
local expiry = gather()
for i = 4, #ARGV, 2 do
  local l = lease[ARGV[i]]
  if l and parse_lease(l) == ARGV[i + 1] then
    add(expiry, deadline, ARGV[i])
    lease[ARGV[i]] = false  -- counted once, however often this call names it
    n = n + 1
  end
end
send('ZADD', KLEXP, expiry, 'GT')
return n
