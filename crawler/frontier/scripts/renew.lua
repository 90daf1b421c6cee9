-- ARGV: prefix, job, lease_deadline, then (url, token) pairs. Pushes the expiry of the leases this
-- holder still owns (either stage) out to the deadline, never earlier than it was: parse and store
-- renew the pages they hold, and a store waiting out an outage renews them past its next try.
-- Returns how many were renewed.
local deadline, n = tonumber(ARGV[3]), 0
for i = 4, #ARGV, 2 do
  local l = redis.call('HGET', KLEASE, ARGV[i])
  if l and parse_lease(l) == ARGV[i + 1] then
    redis.call('ZADD', KLEXP, 'GT', deadline, ARGV[i])
    n = n + 1
  end
end
return n
