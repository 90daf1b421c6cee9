-- Shared by every script of the frontier (after the KEYS bindings, ``_bind``).
-- Shards to wake, pushed once each when the script ends (``flush_wakes``, see ``lua``): a call
-- that reschedules many hosts of a shard wakes it once. One element in a wake list is enough:
-- none is pushed while one waits (the usual case while dispatchers are busy).
-- On a Redis Cluster (no KJOBS among the KEYS) the wake lists and the active jobs' set are in
-- slots of their own, which a script of the job may not touch: the script returns the shards to
-- wake and whether the job ended, and the caller (``Frontier._call``) does both.
local WAKES = {}
local ENDED = 0
local function wake(shard)
  WAKES[tostring(shard)] = true
end
local function flush_wakes()
  local out = {}
  for shard in pairs(WAKES) do
    if KJOBS then
      local w = 'c:{wake}:' .. shard
      if redis.call('LLEN', w) == 0 then redis.call('LPUSH', w, '1') end
    else
      out[#out + 1] = shard
    end
  end
  WAKES = {}
  return out
end
-- ipinf holds an address's requests in flight, plus WAITING while hosts wait on it in ``ipwait``:
-- the decrement of a finished request then says whether anyone waits, with no lookup per request.
local WAITING = 1000000
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
-- its delay). A parked host is left parked only when ``keep_parked`` is set; a parked host whose
-- queue is empty leaves the ready set otherwise (dispatch parks a host without looking at its
-- queue). ``queued``: the queue's length if the caller knows it; ``next_known``: t is the host's
-- next allowed time, just written.
local function schedule(host, shard, t, keep_parked, queued, next_known)
  local key = P .. 'ready:' .. shard
  if (queued or redis.call('LLEN', P .. 'q:' .. host)) == 0 then
    if not keep_parked then redis.call('ZREM', key, host) end
    return
  end
  if keep_parked then
    -- Added at t for now; a host scheduled already (the usual case) costs this one command.
    if redis.call('ZADD', key, 'NX', t, host) == 0 then return end
    -- Never earlier than the host's delay allows, even if it left the ready set meanwhile.
    local earliest = tonumber(redis.call('HGET', KNEXT, host))
    if earliest and earliest > t then redis.call('ZADD', key, 'XX', earliest, host) end
    wake(shard)
    return
  end
  if not next_known then
    local earliest = tonumber(redis.call('HGET', KNEXT, host))
    if earliest and earliest > t then t = earliest end
  end
  -- LT: added if absent, and a parked host (PARKED is above any time) comes due at t.
  if redis.call('ZADD', key, 'LT', 'CH', t, host) == 1 then wake(shard) end
end
local function ip_key(host)
  local ip = redis.call('HGET', KIP, host)
  if ip then return ip end
  return 'h:' .. host
end
-- One request to host finished or was abandoned: free its slots and let the host go again
-- after its delay (``d``, when the caller knows it), and hosts that waited for the address's budget
-- go now. The caller takes the request off cnt.inflight (once per call, for all it released).
local function release_slot(host, shard, ipk, now, default_delay, d)
  if redis.call('HINCRBY', KINF, host, -1) <= 0 then redis.call('HDEL', KINF, host) end
  local left = redis.call('HINCRBY', KIPINF, ipk, -1)
  local waited = left >= WAITING / 2
  if waited then left = redis.call('HINCRBY', KIPINF, ipk, -WAITING) end
  if left <= 0 then redis.call('HDEL', KIPINF, ipk) end
  d = d or host_delay(host, default_delay)
  if d > 0 then
    redis.call('HSET', KNEXT, host, now + d)
    schedule(host, shard, now + d, false, nil, true)
  else
    schedule(host, shard, now, false)
  end
  if waited then
    local waiting = redis.call('SMEMBERS', P .. 'ipwait:' .. ipk)
    redis.call('DEL', P .. 'ipwait:' .. ipk)
    for _, w in ipairs(waiting) do
      local wshard, whost = string.match(w, '^(%S+) (%S+)$')
      schedule(whost, wshard, now, false)
    end
  end
end
-- An address's requests in flight, and whether hosts wait on it (see WAITING).
local function ip_inflight(ipk)
  local v = tonumber(redis.call('HGET', KIPINF, ipk) or '0')
  if v >= WAITING / 2 then return v - WAITING, true end
  return v, false
end
-- A job whose URLs are all stored is done; a periodic one waits for its next cycle. Either way
-- its session (keys.session_all) goes: cookies are kept no longer than the crawl that needs them.
-- ``open``: cnt.open if the caller has it (from its own HINCRBY).
local function done_check(now, open)
  open = open or tonumber(redis.call('HGET', KCNT, 'open') or '0')
  if open <= 0 and redis.call('ZCARD', KPEND) == 0
      and redis.call('HGET', KMETA, 'status') == 'running' then
    local cycle = redis.call('HGET', KMETA, 'cycle')
    local status = 'done'
    if cycle then
      status = 'waiting'
      redis.call('HSET', P .. 'cyc:' .. cycle, 'finished_at', now)
    end
    redis.call('HSET', KMETA, 'status', status, 'finished_at', now)
    if KJOBS then redis.call('SREM', KJOBS, ARGV[2]) else ENDED = 1 end
    redis.call('DEL', P .. 'sess', P .. 'jar', P .. 'login')
  end
end
-- The job dispatches again: in the active set, its shards woken, done at once if nothing is open.
local function run_job(now, shards)
  redis.call('HSET', KMETA, 'status', 'running')
  if KJOBS then redis.call('SADD', KJOBS, ARGV[2]) end  -- else added before the call
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
-- cnt.queued counts the entries in host queues (the places that push or pop them keep it):
-- ``QUEUED`` gathers a script's pushes, written once by ``count_queued`` at its end.
local QUEUED = 0
local function count_queued()
  if QUEUED ~= 0 then redis.call('HINCRBY', KCNT, 'queued', QUEUED) end
  QUEUED = 0
end
-- An entry with "\29" before its spec is a request of priority > 0: it goes to the queue's head.
-- Returns the queue's length after it and the command that takes it back off (a push over a cap).
local function push(host, e)
  if string.find(e, '\29', 1, true) then
    return redis.call('LPUSH', P .. 'q:' .. host, e), 'LPOP'
  end
  return redis.call('RPUSH', P .. 'q:' .. host, e), 'RPOP'
end
local function requeue(host, shard, e, now)
  local n = push(host, e)
  QUEUED = QUEUED + 1
  schedule(host, shard, now, true, n)
end
-- A new URL joins its host's queue, or, once that queue holds ``cap`` entries or older URLs of
-- the host wait in the store, goes to the store after them: staged in ``spill`` under the
-- host's next sequence number (see ``crawler.frontier.spill``). Returns 1 if it was staged.
-- ``staged``: whether any host of the job has ever staged a URL (if not, none is looked up).
local function place(host, shard, e, now, cap, staged)
  if cap > 0 then
    local sent = 0
    if staged then sent = tonumber(redis.call('HGET', KSPSEQ, host) or '0') end
    -- Pushed first and taken back if it went over the cap: one command for the usual URL.
    if sent == 0 or sent <= tonumber(redis.call('HGET', KSPREF, host) or '0') then
      local n, undo = push(host, e)
      if n <= cap then
        QUEUED = QUEUED + 1
        schedule(host, shard, now, true, n)
        return 0
      end
      redis.call(undo, P .. 'q:' .. host)
    end
    sent = sent + 1
    redis.call('HSET', KSPSEQ, host, sent)
    redis.call('ZADD', KSPILL, now, sent .. ' ' .. host .. ' ' .. e)
    return 1
  end
  requeue(host, shard, e, now)
  return 0
end
local function parse_lease(l)
  return string.match(l, '^(%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
end
