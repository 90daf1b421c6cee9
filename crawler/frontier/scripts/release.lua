-- ARGV: prefix, job, now, delay, max_depth, '1' to be told which URLs (else '0'), the caller's
-- counters of the job (``counts_at``), then (url, token) pairs. Ends leases whose page is
-- stored; a page expanded at a depth that cut its links, while a shorter path to it turned up,
-- goes back to its queue once more instead. Returns {pages ended as stored, their URLs if asked}.
local now, delay, maxd, tell = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1'
local n, again, held, freed, ran, done = 0, 0, 0, {}, 0, {}
local cnt, first = counts_at(7)
local urls = {}
for i = first, #ARGV, 2 do urls[#urls + 1] = ARGV[i] end
local lease = hmget(KLEASE, urls)
local mine = {}
for i = first, #ARGV, 2 do
  local l = lease[ARGV[i]]
  if l then
    local t, st, shard, host, ipk, e = parse_lease(l)
    if t == ARGV[i + 1] then
      mine[#mine + 1] = {ARGV[i], st, shard, host, ipk, e}
      lease[ARGV[i]] = false  -- ended once, however often this call names it
    end
  end
end
local ended, seen = gather(), gather()
for _, m in ipairs(mine) do push1(ended, m[1]) end
-- Only depth-limited jobs need to know a URL was stored, and at what depth.
local best = {}
if maxd > 0 then best = hmget(KSEEN, ended) end
send('HDEL', KLEASE, ended)
send('ZREM', KLEXP, ended)
-- Slots freed first: a host requeued below then waits out the delay its release set.
for _, m in ipairs(mine) do
  if m[2] == 'f' then
    freed[#freed + 1] = {m[4], m[3], m[5]}
  elseif m[2] == 'r' then
    ran = ran + 1  -- a run's URL: the slot is its run's last URL's
  else
    held = held + 1
  end
end
release_slots(freed, now, delay)
for _, m in ipairs(mine) do
  local url, shard, host, e = m[1], m[3], m[4], m[6]
  local ed = entry_depth(e)
  local b = best[url]
  b = b and tonumber(b)
  if b and b < ed and ed >= maxd and b < maxd then
    requeue(host, shard, with_depth(e, b), now)
    again = again + 1
  else
    if maxd > 0 then add(seen, url, 'x' .. ed) end
    n = n + 1
    if tell then done[n] = url end
  end
end
send('HSET', KSEEN, seen)
cnt.open = (cnt.open or 0) - n
cnt.stored = (cnt.stored or 0) + n
cnt.depth_requeued = (cnt.depth_requeued or 0) + again
cnt.held = (cnt.held or 0) - held
cnt.inflight = (cnt.inflight or 0) - #freed - ran
cnt.queued = (cnt.queued or 0) + QUEUED
QUEUED = 0
local got = bump(KCNT, cnt)
done_check(now, got.open)
return {n, done}
