"""Lua scripts of the frontier. Each runs atomically in Redis, so a URL is admitted once,
leased once, and returned exactly once, whatever number of workers run them at the same time.

The conventions of the scripts and the records they keep (entries, leases, ready sets, the seen
hash, pending link batches, the counters a job ends by) are on the architecture page of the
manual, ``docs/architecture.md#the-frontiers-records-in-redis``.
"""

from __future__ import annotations

from crawler import keys

PARKED = 1e12


# The job's records every script may touch whose names are known up front: (Lua local, name).
_FIXED = [("KMETA", "meta"), ("KCNT", "cnt"), ("KSEEN", "seen"), ("KLEASE", "lease"), ("KLEXP", "lexp"),
          ("KRETRY", "retry"), ("KINF", "inf"), ("KIPINF", "ipinf"), ("KIP", "ip"), ("KNEXT", "next"),
          ("KDELAY", "delay"), ("KHOSTN", "hostn"), ("KPEND", "pend"), ("KPENDB", "pendb"), ("KOVR", "ovr"),
          ("KSPILL", "spill"), ("KSPSEQ", "spseq"), ("KSPREF", "spref")]


def job_keys(job: str) -> list[str]:
    """KEYS[] of every script here: ``_FIXED`` in order, then ``c:jobs``."""
    return [keys.meta(job), keys.counters(job), keys.seen(job), keys.leases(job), keys.lease_expiry(job),
            keys.retries(job), keys.host_inflight(job), keys.ip_inflight(job), keys.host_ip(job),
            keys.host_next(job), keys.host_delays(job), keys.host_admitted(job), keys.pending_links(job),
            keys.pending_link_bodies(job), keys.host_overrides(job), keys.spill_staged(job), keys.spill_seq(job),
            keys.spill_refilled(job), keys.JOBS]


def _bind() -> str:
    lines = [f"local {local} = KEYS[{i}]" for i, (local, _) in enumerate(_FIXED, start=1)]
    lines.append(f"local KJOBS = KEYS[{len(_FIXED) + 1}]")
    return "\n".join(lines) + "\n"


_HELPERS = f"""
local PARKED = {PARKED:.0f}
local function wake(shard)
  redis.call('LPUSH', 'c:wake:' .. shard, '1')
  redis.call('LTRIM', 'c:wake:' .. shard, 0, 0)
end
local function host_delay(host, default)
  return tonumber(redis.call('HGET', KDELAY, host) or default)
end
-- Requests in flight one host may have: an operator's override, else the job's per_host.
local function host_limit(host, default)
  local o = redis.call('HGET', KOVR, host)
  if o then
    local n = string.match(o, '^%S+ (%S+)$')
    if n and n ~= '-' then return tonumber(n) end
  end
  return default
end
-- A host with queued URLs becomes due at t, unless it is already scheduled (due or waiting out
-- its delay). A parked host is left parked only when ``keep_parked`` is set.
local function schedule(host, shard, t, keep_parked)
  if redis.call('LLEN', P .. 'q:' .. host) == 0 then return end
  -- Never earlier than the host's delay allows, even if it left the ready set meanwhile.
  local earliest = tonumber(redis.call('HGET', KNEXT, host))
  if earliest and earliest > t then t = earliest end
  local key = P .. 'ready:' .. shard
  local s = redis.call('ZSCORE', key, host)
  if (not s) or ((not keep_parked) and tonumber(s) >= PARKED) then
    redis.call('ZADD', key, t, host)
    wake(shard)
  end
end
local function ip_key(host)
  local ip = redis.call('HGET', KIP, host)
  if ip then return ip end
  return 'h:' .. host
end
-- One request to host finished or was abandoned: free its slots and let the host go again
-- after its delay, and hosts that waited for the address's budget go now.
local function release_slot(host, shard, ipk, now, default_delay)
  local left = redis.call('HINCRBY', KINF, host, -1)
  if left <= 0 then redis.call('HDEL', KINF, host) end
  if redis.call('HINCRBY', KIPINF, ipk, -1) <= 0 then redis.call('HDEL', KIPINF, ipk) end
  redis.call('HINCRBY', KCNT, 'inflight', -1)
  local d = host_delay(host, default_delay)
  if d > 0 then redis.call('HSET', KNEXT, host, now + d) end
  schedule(host, shard, now + d, false)
  local waiting = redis.call('SMEMBERS', P .. 'ipwait:' .. ipk)
  if #waiting > 0 then
    redis.call('DEL', P .. 'ipwait:' .. ipk)
    for _, w in ipairs(waiting) do
      local wshard, whost = string.match(w, '^(%S+) (%S+)$')
      schedule(whost, wshard, now, false)
    end
  end
end
-- A job whose URLs are all stored is done; a periodic one waits for its next cycle.
local function done_check(now)
  local open = tonumber(redis.call('HGET', KCNT, 'open') or '0')
  if open <= 0 and redis.call('ZCARD', KPEND) == 0
      and redis.call('HGET', KMETA, 'status') == 'running' then
    local cycle = redis.call('HGET', KMETA, 'cycle')
    local status = 'done'
    if cycle then
      status = 'waiting'
      redis.call('HSET', P .. 'cyc:' .. cycle, 'finished_at', now)
    end
    redis.call('HSET', KMETA, 'status', status, 'finished_at', now)
    redis.call('SREM', KJOBS, ARGV[2])
  end
end
-- The job dispatches again: in the active set, its shards woken, done at once if nothing is open.
local function run_job(now, shards)
  redis.call('HSET', KMETA, 'status', 'running')
  redis.call('SADD', KJOBS, ARGV[2])
  for shard = 0, shards - 1 do wake(shard) end
  done_check(now)
end
local function entry_depth(e)
  return tonumber(string.match(e, '^(%d+)'))
end
-- An entry is "depth attempts n url referrer": the URL is the n bytes after the third space,
-- whatever they hold. An entry from before n was added has the URL third (it starts with a
-- letter), up to the next space.
local function entry_url(e)
  local n, at = string.match(e, '^%d+ %d+ (%d+) ()')
  if n then return string.sub(e, at, at + tonumber(n) - 1) end
  return string.match(e, '^%d+ %d+ (%S+)')
end
local function with_depth(e, d)
  return d .. string.sub(e, #string.match(e, '^(%d+)') + 1)
end
local function next_attempt(e)
  local d, a, rest = string.match(e, '^(%d+) (%d+) (.*)$')
  return d .. ' ' .. (tonumber(a) + 1) .. ' ' .. rest, tonumber(a) + 1
end
-- cnt.queued counts the entries in host queues (the three places that push or pop them keep it).
local function requeue(host, shard, e, now)
  redis.call('RPUSH', P .. 'q:' .. host, e)
  redis.call('HINCRBY', KCNT, 'queued', 1)
  schedule(host, shard, now, true)
end
-- A new URL joins its host's queue, or, once that queue holds ``cap`` entries or older URLs of
-- the host wait in the store, goes to the store after them: staged in ``spill`` under the
-- host's next sequence number (see ``crawler.frontier.spill``). Returns 1 if it was staged.
local function place(host, shard, e, now, cap)
  if cap > 0 then
    local sent = tonumber(redis.call('HGET', KSPSEQ, host) or '0')
    if sent > tonumber(redis.call('HGET', KSPREF, host) or '0')
        or redis.call('LLEN', P .. 'q:' .. host) >= cap then
      sent = sent + 1
      redis.call('HSET', KSPSEQ, host, sent)
      redis.call('ZADD', KSPILL, now, sent .. ' ' .. host .. ' ' .. e)
      return 1
    end
  end
  requeue(host, shard, e, now)
  return 0
end
local function parse_lease(l)
  return string.match(l, '^(%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
end
"""


def _prelude() -> str:
    return "local P = ARGV[1]\n" + _bind() + _HELPERS

# ARGV: prefix, job, token, now, budget, max_depth, host_budget, trusted, part, last, queue_cap,
# then (url, host, shard, entry). ``queue_cap`` > 0 caps each host's queue (``place``).
# ``trusted`` = 1: the URLs were judged new already (by the Bloom filter), so the exact seen hash
# is neither read nor written. A big link batch is admitted in parts, one call
# each, so no call holds Redis for long: ``part`` (0, 1, ...; '' for a batch in one call) is
# recorded in ``pendc:<token>`` so a redelivered batch skips the parts admitted already, and the
# ``last`` part ('1') ends the batch, as a whole batch does.
ADMIT = _prelude() + """
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
      spilled = spilled + place(host, shard, e, now, cap)
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
done_check(now)
return {new, spilled}
"""

# ARGV: prefix, job, shard, now, max_urls, per_host, delay, lease_deadline, token, concurrency,
# per_ip, batch, min_free, offset. Requests in flight and pages held for parse and store both count against
# ``concurrency``. With batch > 0 the k-th URL leased is leased under
# ``token.(k // batch)``: each fetch task gets a token of its own. While requests are in flight,
# nothing goes until at least min_free slots are free: a finished task frees its slots at once,
# and re-dispatching them one small task at a time would keep every later task as small (each
# task costs the same Celery overhead whatever its size). Returns {entries and hosts
# interleaved, next due time or '', free slots (-1: not running; 0: wait for more to finish)}.
DISPATCH = _prelude() + """
local shard, now = ARGV[3], tonumber(ARGV[4])
local max_urls, per_host, delay = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local deadline, token, concurrency = ARGV[8], ARGV[9], tonumber(ARGV[10])
local per_ip, batch, min_free = tonumber(ARGV[11]), tonumber(ARGV[12] or '0'), tonumber(ARGV[13] or '0')
local rkey = P .. 'ready:' .. shard
-- ARGV[14]: URLs already leased under this token by earlier calls (other shards of the same
-- dispatcher tick), so batch numbers continue across them.
local leased = tonumber(ARGV[14] or '0')
local out = {}
local slots = -1
if redis.call('HGET', KMETA, 'status') == 'running' then
  local cnt = KCNT
  local busy = tonumber(redis.call('HGET', cnt, 'inflight') or '0') + tonumber(redis.call('HGET', cnt, 'held') or '0')
  slots = math.min(max_urls, concurrency - busy)
  if busy > 0 and slots < min_free then slots = 0 end
  local total = 0
  if slots > 0 then
    local hosts = redis.call('ZRANGEBYSCORE', rkey, '-inf', now, 'LIMIT', 0, slots)
    for _, host in ipairs(hosts) do
      if slots <= 0 then break end
      local qkey = P .. 'q:' .. host
      local inf = tonumber(redis.call('HGET', KINF, host) or '0')
      local ipk = ip_key(host)
      local ipinf = tonumber(redis.call('HGET', KIPINF, ipk) or '0')
      local hdelay = host_delay(host, delay)
      local limit = host_limit(host, per_host)
      -- per_ip 0: an address takes what one host of it may (its override included).
      local ip_limit = per_ip
      if ip_limit <= 0 then ip_limit = limit end
      local take = math.min(limit - inf, ip_limit - ipinf, slots)
      -- With a delay, requests to one host start one at a time, ``delay`` apart.
      if hdelay > 0 and take > 1 then take = 1 end
      local got = 0
      while got < take do
        local e = redis.call('LPOP', qkey)
        if not e then break end
        local url = entry_url(e)
        local best = tonumber(redis.call('HGET', KSEEN, url))
        if best and best < entry_depth(e) then e = with_depth(e, best) end
        local t = token
        if batch > 0 then t = token .. '.' .. math.floor(leased / batch) end
        leased = leased + 1
        redis.call('HSET', KLEASE, url, t .. ' f ' .. shard .. ' ' .. host .. ' ' .. ipk .. ' ' .. e)
        redis.call('ZADD', KLEXP, deadline, url)
        out[#out + 1] = e
        out[#out + 1] = host
        got = got + 1
      end
      slots = slots - got
      total = total + got
      inf = inf + got
      if got > 0 then
        redis.call('HSET', KINF, host, inf)
        redis.call('HINCRBY', KIPINF, ipk, got)
        if hdelay > 0 then redis.call('HSET', KNEXT, host, now + hdelay) end
      end
      if redis.call('LLEN', qkey) == 0 then
        redis.call('ZREM', rkey, host)
      elseif inf >= limit then
        redis.call('ZADD', rkey, PARKED, host)
      elseif ipinf + got >= ip_limit then
        redis.call('ZADD', rkey, PARKED, host)
        redis.call('SADD', P .. 'ipwait:' .. ipk, shard .. ' ' .. host)
      else
        redis.call('ZADD', rkey, now + hdelay, host)
      end
    end
  end
  if total > 0 then
    redis.call('HINCRBY', cnt, 'queued', -total)
    redis.call('HINCRBY', cnt, 'inflight', total)
    redis.call('HINCRBY', cnt, 'dispatched', total)
  end
end
local first = redis.call('ZRANGE', rkey, 0, 0, 'WITHSCORES')
local nxt = ''
if #first > 0 then nxt = first[2] end
return {out, nxt, slots}
"""

# ARGV: prefix, job, lease_deadline, then (url, token) pairs. Returns 1/0 per pair: whether
# this holder still owns the lease and should fetch.
CONFIRM = _prelude() + """
local res = {}
for i = 4, #ARGV, 2 do
  local l = redis.call('HGET', KLEASE, ARGV[i])
  local ok = 0
  if l then
    local t, st = parse_lease(l)
    if t == ARGV[i + 1] and st == 'f' then
      redis.call('ZADD', KLEXP, ARGV[3], ARGV[i])
      ok = 1
    end
  end
  res[#res + 1] = ok
end
return res
"""

# ARGV: prefix, job, lease_deadline, then (url, token) pairs. Pushes the expiry of the leases this
# holder still owns (either stage) out to the deadline, never earlier than it was: parse and store
# renew the pages they hold, and a store waiting out an outage renews them past its next try.
# Returns how many were renewed.
RENEW = _prelude() + """
local deadline, n = tonumber(ARGV[3]), 0
for i = 4, #ARGV, 2 do
  local l = redis.call('HGET', KLEASE, ARGV[i])
  if l and parse_lease(l) == ARGV[i + 1] then
    local cur = tonumber(redis.call('ZSCORE', KLEXP, ARGV[i]) or '0')
    if deadline > cur then redis.call('ZADD', KLEXP, deadline, ARGV[i]) end
    n = n + 1
  end
end
return n
"""

# ARGV: prefix, job, now, lease_deadline, delay, then (url, token, retry_at, ip) per request.
# retry_at > 0 sends the URL to the retry set, due then, with one more attempt counted; ip, when
# known, becomes the host's address for the per-address budget.
FETCHED = _prelude() + """
local now, deadline, delay = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local n, retried, held = 0, 0, 0
for i = 6, #ARGV, 4 do
  local url, retry_at, ip = ARGV[i], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local l = redis.call('HGET', KLEASE, url)
  if l then
    local t, st, shard, host, ipk, e = parse_lease(l)
    if t == ARGV[i + 1] and st == 'f' then
      if ip ~= '' then redis.call('HSET', KIP, host, ip) end
      if retry_at > 0 then
        redis.call('HDEL', KLEASE, url)
        redis.call('ZREM', KLEXP, url)
        local again = next_attempt(e)
        redis.call('ZADD', KRETRY, retry_at, shard .. ' ' .. host .. ' ' .. again)
        retried = retried + 1
      else
        redis.call('HSET', KLEASE, url, t .. ' d ' .. shard .. ' ' .. host .. ' ' .. ipk .. ' ' .. e)
        redis.call('ZADD', KLEXP, deadline, url)
        held = held + 1
      end
      release_slot(host, shard, ipk, now, delay)
      n = n + 1
    end
  end
end
if retried > 0 then redis.call('HINCRBY', KCNT, 'retried', retried) end
if held > 0 then redis.call('HINCRBY', KCNT, 'held', held) end
return n
"""

# ARGV: prefix, job, now, delay, max_depth, then (url, token) pairs. Ends leases whose page is
# stored; a page expanded at a depth that cut its links, while a shorter path to it turned up,
# goes back to its queue once more instead.
RELEASE = _prelude() + """
local now, delay, maxd = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local n, again, held = 0, 0, 0
for i = 6, #ARGV, 2 do
  local url = ARGV[i]
  local l = redis.call('HGET', KLEASE, url)
  if l then
    local t, st, shard, host, ipk, e = parse_lease(l)
    if t == ARGV[i + 1] then
      if st == 'f' then release_slot(host, shard, ipk, now, delay) else held = held + 1 end
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
if n > 0 then
  redis.call('HINCRBY', KCNT, 'open', -n)
  redis.call('HINCRBY', KCNT, 'stored', n)
end
if again > 0 then redis.call('HINCRBY', KCNT, 'depth_requeued', again) end
if held > 0 then redis.call('HINCRBY', KCNT, 'held', -held) end
done_check(now)
return n
"""

# ARGV: prefix, job, now, delay, limit, max_attempts, token. Expired leases go back to the front
# of their host queue with one more attempt counted; one whose attempts are spent is re-leased
# under ``token`` as fetched and returned ({entry, shard} pairs), for the caller to store as
# failed. Returns {returned to queue, abandoned pairs}.
REAP = _prelude() + """
local now, delay, limit, max_attempts, token = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]),
  tonumber(ARGV[6]), ARGV[7]
local urls = redis.call('ZRANGEBYSCORE', KLEXP, '-inf', now, 'LIMIT', 0, limit)
local back, gone, held = 0, {}, 0
for _, url in ipairs(urls) do
  local l = redis.call('HGET', KLEASE, url)
  redis.call('ZREM', KLEXP, url)
  if l then
    local t, st, shard, host, ipk, e = parse_lease(l)
    if st == 'f' then release_slot(host, shard, ipk, now, delay) else held = held - 1 end
    local again, attempts = next_attempt(e)
    if attempts >= max_attempts then
      held = held + 1  -- held again, for the failure to be stored
      redis.call('HSET', KLEASE, url, token .. ' d ' .. shard .. ' ' .. host .. ' ' .. ipk .. ' ' .. again)
      redis.call('ZADD', KLEXP, now + 3600, url)
      gone[#gone + 1] = again
      gone[#gone + 1] = shard
    else
      redis.call('HDEL', KLEASE, url)
      redis.call('LPUSH', P .. 'q:' .. host, again)
      schedule(host, shard, now, false)
      back = back + 1
      redis.call('HINCRBY', KCNT, 'queued', 1)
    end
  end
end
if #urls > 0 then redis.call('HINCRBY', KCNT, 'lease_expired', #urls) end
if held ~= 0 then redis.call('HINCRBY', KCNT, 'held', held) end
return {back, gone}
"""

# ARGV: prefix, job, now, limit. Retries whose backoff is over go back to their host queues.
# Returns {moved, next due time or ''}.
PROMOTE = _prelude() + """
local now, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local due = redis.call('ZRANGEBYSCORE', KRETRY, '-inf', now, 'LIMIT', 0, limit)
for _, m in ipairs(due) do
  local shard, host, e = string.match(m, '^(%S+) (%S+) (.*)$')
  redis.call('ZREM', KRETRY, m)
  requeue(host, shard, e, now)
end
local first = redis.call('ZRANGE', KRETRY, 0, 0, 'WITHSCORES')
local nxt = ''
if #first > 0 then nxt = first[2] end
return {#due, nxt}
"""

# ARGV: prefix, job, now. Running -> paused (nothing more is dispatched; what is in flight
# finishes and is stored); a periodic job waiting for its next cycle -> paused (no cycle starts).
# Returns the status the job had.
PAUSE = _prelude() + """
local status = redis.call('HGET', KMETA, 'status')
if status == 'running' or status == 'waiting' then
  redis.call('HSET', KMETA, 'status', 'paused', 'paused_from', status, 'paused_at', ARGV[3])
end
return status
"""

# ARGV: prefix, job, now, shards. Paused -> what it was, its shards woken; a job whose last
# URLs were stored while it was paused is done (or waits for its next cycle) now.
RESUME = _prelude() + """
local now, shards = tonumber(ARGV[3]), tonumber(ARGV[4])
local status = redis.call('HGET', KMETA, 'status')
if status ~= 'paused' then return status end
local was = redis.call('HGET', KMETA, 'paused_from') or 'running'
redis.call('HDEL', KMETA, 'paused_from', 'paused_at')
if was == 'running' then run_job(now, shards) else redis.call('HSET', KMETA, 'status', was) end
return 'paused'
"""

# ARGV: prefix, job, now, next cycle start, stale. A periodic job waiting for a cycle that is due
# starts it: the cycle number goes up, the status becomes 'starting'. Exactly one caller wins,
# however many beats or ticks run at once. A start that crashed (still 'starting' after
# ``stale`` seconds) is handed out again. Returns {cycle, 1 if fresh / 0 if resumed} or {}.
CLAIM_CYCLE = _prelude() + """
local now, nxt, stale = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local m = KMETA
local status = redis.call('HGET', m, 'status')
local cycle = tonumber(redis.call('HGET', m, 'cycle') or '0')
if status == 'starting' and tonumber(redis.call('HGET', m, 'cycle_started_at')) < now - stale then
  redis.call('HSET', m, 'cycle_started_at', now)
  return {cycle, 0}
end
if status ~= 'waiting' or tonumber(redis.call('HGET', m, 'next_cycle_at') or '0') > now then return {} end
cycle = cycle + 1
-- Pages schedule their next visit from when the cycle was due, not from when a tick noticed.
local due = redis.call('HGET', m, 'next_cycle_at') or now
redis.call('HSET', m, 'status', 'starting', 'cycle', cycle, 'cycle_started_at', now, 'cycle_due_at', due,
           'next_cycle_at', nxt, 'start_stage', 'claimed')
redis.call('HSET', P .. 'cyc:' .. cycle, 'started_at', now)
return {cycle, 1}
"""

# ARGV: prefix, job, now, shards. A cycle's work is queued: 'starting' -> running.
RUN_CYCLE = _prelude() + """
if redis.call('HGET', KMETA, 'status') ~= 'starting' then return 0 end
redis.call('HDEL', KMETA, 'start_stage')
run_job(tonumber(ARGV[3]), tonumber(ARGV[4]))
return 1
"""

# ARGV: prefix, job, now, shards, then (host, delay) pairs. A host's delay just got shorter (an
# operator's override or the job's delay changed while it runs): a host waiting out the longer
# one may go once the shorter one has passed, without waiting the rest of the old one.
RETIME = _prelude() + """
local now, shards = tonumber(ARGV[3]), tonumber(ARGV[4])
local n = 0
for i = 5, #ARGV, 2 do
  local host, t = ARGV[i], now + tonumber(ARGV[i + 1])
  local nxt = tonumber(redis.call('HGET', KNEXT, host))
  if nxt and nxt > t then
    redis.call('HSET', KNEXT, host, t)
    for shard = 0, shards - 1 do
      local key = P .. 'ready:' .. shard
      local score = tonumber(redis.call('ZSCORE', key, host))
      if score and score > t and score < PARKED then
        redis.call('ZADD', key, t, host)
        wake(shard)
      end
    end
    n = n + 1
  end
end
return n
"""

# ARGV: prefix, job, now, shards, host. The host may take more requests at once than when it was
# parked for a full in-flight budget (an operator raised its limit): due again now.
UNPARK = _prelude() + """
local now, shards, host = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
for shard = 0, shards - 1 do
  local s = tonumber(redis.call('ZSCORE', P .. 'ready:' .. shard, host))
  if s and s >= PARKED then schedule(host, shard, now, false) end
end
return 1
"""

# ARGV: prefix, job, then hosts. Their queues' lengths, in one reply: a pipeline of one LLEN per
# host costs a reply to parse per host, which with 100,000 hosts is most of a hosts table's time.
QUEUE_LENGTHS = """
local P = ARGV[1]
local out = {}
for i = 3, #ARGV do out[#out + 1] = redis.call('LLEN', P .. 'q:' .. ARGV[i]) end
return out
"""

# ARGV: prefix, job, now, host, shard, then (seq, entry) pairs in ascending seq: the host's URLs
# read back from the store. Each joins the host's queue only if it is the next the host is owed
# (seq = refilled + 1): one already brought back (a refill repeated after a crash) is skipped, and
# a gap (a URL still staged, not yet in the store) stops the refill there, so every URL comes
# back once and in order. Returns the host's refilled sequence number after it.
REFILL = _prelude() + """
local now, host, shard = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local done = tonumber(redis.call('HGET', KSPREF, host) or '0')
local n = 0
for i = 6, #ARGV, 2 do
  local seq = tonumber(ARGV[i])
  if seq == done + 1 then
    requeue(host, shard, ARGV[i + 1], now)
    done = seq
    n = n + 1
  elseif seq > done + 1 then
    break
  end
end
if n > 0 then
  redis.call('HSET', KSPREF, host, done)
  redis.call('HINCRBY', KCNT, 'refilled', n)
end
return done
"""

# ARGV: prefix, job, low. Hosts whose queue is at or below ``low`` entries while URLs of theirs
# wait in the store, each with (host, refilled seq, sent seq): the refill task's work list.
SPILL_LOW = _prelude() + """
local low, out = tonumber(ARGV[3]), {}
local sent = redis.call('HGETALL', KSPSEQ)
for i = 1, #sent, 2 do
  local host, s = sent[i], tonumber(sent[i + 1])
  local r = tonumber(redis.call('HGET', KSPREF, host) or '0')
  if s > r and redis.call('LLEN', P .. 'q:' .. host) <= low then
    out[#out + 1] = host
    out[#out + 1] = r
    out[#out + 1] = s
  end
end
return out
"""
