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
-- A command's arguments gathered while a script runs and sent at its end in one command, with
-- every field or member at once: a call from Lua costs more than the work of one more field.
local function gather()
  return {n = 0}
end
local function add(b, x, y)
  b[b.n + 1] = x
  b[b.n + 2] = y
  b.n = b.n + 2
end
local function push1(b, x)
  b.n = b.n + 1
  b[b.n] = x
end
-- Arguments a command takes from Lua at once: ``unpack`` stops at about 8,000 values. Even, so
-- a chunk of (field, value) or (score, member) pairs never splits a pair.
local CHUNK = 4000
-- Sends the gathered arguments (after up to two flags), a command per CHUNK of them; returns
-- the sum of the replies.
local function send(cmd, key, b, flag1, flag2)
  local total = 0
  for i = 1, b.n, CHUNK do
    local j = math.min(b.n, i + CHUNK - 1)
    if flag2 then
      total = total + redis.call(cmd, key, flag1, flag2, unpack(b, i, j))
    elseif flag1 then
      total = total + redis.call(cmd, key, flag1, unpack(b, i, j))
    else
      total = total + redis.call(cmd, key, unpack(b, i, j))
    end
  end
  return total
end
-- ``cmd`` of ``key`` and ``names``, CHUNK names a command: the replies, in order.
local function read_many(cmd, key, names)
  local out = {}
  for i = 1, #names, CHUNK do
    local got = redis.call(cmd, key, unpack(names, i, math.min(#names, i + CHUNK - 1)))
    for k = 1, #got do out[i + k - 1] = got[k] end
  end
  return out
end
-- The values of a hash's fields, by field, read in one HMGET (false for a missing one).
local function hmget(key, fields)
  local out = {}
  local got = read_many('HMGET', key, fields)
  for i, f in ipairs(fields) do out[f] = got[i] end
  return out
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
-- Adds ``deltas`` (field -> amount) to a hash's counters: one HINCRBY for one field, a read and a
-- write for more however many there are. Returns the new values by field.
local function bump(key, deltas)
  local names = {}
  for name, d in pairs(deltas) do
    if d ~= 0 then names[#names + 1] = name end
  end
  local out = {}
  if #names == 1 then
    out[names[1]] = redis.call('HINCRBY', key, names[1], deltas[names[1]])
  elseif #names > 1 then
    local got = read_many('HMGET', key, names)
    local w = gather()
    for i, name in ipairs(names) do
      out[name] = tonumber(got[i] or '0') + deltas[name]
      -- As an integer: a Lua number is printed with "%.17g", which a later HINCRBY refuses
      -- beyond 1e17 only.
      add(w, name, string.format('%d', out[name]))
    end
    send('HSET', key, w)
  end
  return out
end
-- Counters a caller passes in ARGV from ``at`` on: a count n, then n (field, amount) pairs.
-- Returns them (field -> amount) and where the ARGV after them starts.
local function counts_at(at)
  local n, out = tonumber(ARGV[at]), {}
  for i = at + 1, at + 2 * n, 2 do out[ARGV[i]] = (out[ARGV[i]] or 0) + tonumber(ARGV[i + 1]) end
  return out, at + 1 + 2 * n
end
-- Hosts leave their own delay (``{host, shard, t, next_known}``) and come due at t, unless their
-- delay ends later (``next_known``: t is that end, just written); those whose queue is empty
-- leave the ready set. As ``schedule`` does for one host not kept parked, with one ZADD and
-- one ZREM per shard.
local function schedule_hosts(list)
  local ask = {}
  for _, it in ipairs(list) do
    if not it[4] then ask[#ask + 1] = it[1] end
  end
  local earliest = hmget(KNEXT, ask)
  local due, gone = {}, {}
  for _, it in ipairs(list) do
    local host, shard, t = it[1], it[2], it[3]
    if redis.call('LLEN', P .. 'q:' .. host) == 0 then
      gone[shard] = gone[shard] or gather()
      push1(gone[shard], host)
    else
      local e = earliest[host]
      e = e and tonumber(e)
      if e and e > t then t = e end
      due[shard] = due[shard] or gather()
      add(due[shard], t, host)
    end
  end
  for shard, b in pairs(gone) do send('ZREM', P .. 'ready:' .. shard, b) end
  -- LT: added if absent, and a parked host (PARKED is above any time) comes due at t.
  for shard, b in pairs(due) do
    if send('ZADD', P .. 'ready:' .. shard, b, 'LT', 'CH') > 0 then wake(shard) end
  end
end
-- Requests ended or were abandoned, ``{host, shard, ipk, d}`` each: free their slots, let each
-- host go again after its delay (``d``, when the caller knows it, else its own or
-- ``default_delay``), and hosts that waited for an address's budget go now. The caller takes
-- the requests off cnt.inflight.
local function release_slots(items, now, default_delay)
  if #items == 0 then return end
  -- ``shards``: the shards each host's requests named (one, but while a shard's hosts move to
  -- another, a call may free a host's requests from both: each ready set gets the host).
  local hosts, per_host, last, shards, ipks, per_ip = {}, {}, {}, {}, {}, {}
  for _, it in ipairs(items) do
    local host, ipk = it[1], it[3]
    if not per_host[host] then
      per_host[host] = 0
      hosts[#hosts + 1] = host
      shards[host] = {}
    end
    per_host[host] = per_host[host] + 1
    last[host] = it
    if not shards[host][it[2]] then
      shards[host][it[2]] = true
      shards[host][#shards[host] + 1] = it[2]
    end
    if not per_ip[ipk] then
      per_ip[ipk] = 0
      ipks[#ipks + 1] = ipk
    end
    per_ip[ipk] = per_ip[ipk] + 1
  end
  local inf = hmget(KINF, hosts)
  local keep, drop = gather(), gather()
  for _, host in ipairs(hosts) do
    local left = tonumber(inf[host] or '0') - per_host[host]
    if left > 0 then add(keep, host, left) else push1(drop, host) end
  end
  send('HDEL', KINF, drop)
  send('HSET', KINF, keep)
  local ipinf = hmget(KIPINF, ipks)
  local waited = {}
  keep, drop = gather(), gather()
  for _, ipk in ipairs(ipks) do
    local left = tonumber(ipinf[ipk] or '0') - per_ip[ipk]
    if left >= WAITING / 2 then
      left = left - WAITING
      waited[#waited + 1] = ipk
    end
    if left > 0 then add(keep, ipk, left) else push1(drop, ipk) end
  end
  send('HDEL', KIPINF, drop)
  send('HSET', KIPINF, keep)
  local ask = {}
  for _, host in ipairs(hosts) do
    if not last[host][4] then ask[#ask + 1] = host end
  end
  local own = hmget(KDELAY, ask)
  local nexts, list = gather(), {}
  for _, host in ipairs(hosts) do
    local d = last[host][4] or tonumber(own[host] or default_delay)
    if d > 0 then add(nexts, host, now + d) end
    for _, shard in ipairs(shards[host]) do
      if d > 0 then
        list[#list + 1] = {host, shard, now + d, true}
      else
        list[#list + 1] = {host, shard, now, false}
      end
    end
  end
  send('HSET', KNEXT, nexts)
  for _, ipk in ipairs(waited) do
    local w = P .. 'ipwait:' .. ipk
    for _, m in ipairs(redis.call('SMEMBERS', w)) do
      local wshard, whost = string.match(m, '^(%S+) (%S+)$')
      list[#list + 1] = {whost, wshard, now, false}
    end
    redis.call('DEL', w)
  end
  schedule_hosts(list)
end
-- One request to host finished or was abandoned (see ``release_slots``).
local function release_slot(host, shard, ipk, now, default_delay, d)
  release_slots({{host, shard, ipk, d}}, now, default_delay)
end
-- A job whose URLs are all stored is done; a periodic one waits for its next cycle. Either way
-- its session (keys.session_all) goes: cookies are kept no longer than the crawl that needs them.
-- ``open``: cnt.open if the caller has it (from its own HINCRBY).
-- A part of a split frontier (``keys.frontier_part``), or the job's own tag over them, only says
-- that it is idle (``ENDED``): its caller looks at every part before ending the job.
local function done_check(now, open)
  open = open or tonumber(redis.call('HGET', KCNT, 'open') or '0')
  if open > 0 or redis.call('ZCARD', KPEND) > 0 then return end
  local m = redis.call('HMGET', KMETA, 'status', 'part', 'fparts', 'cycle')
  if m[1] ~= 'running' then return end
  if m[2] or m[3] then
    ENDED = 1
    return
  end
  local cycle = m[4]
  local status = 'done'
  if cycle then
    status = 'waiting'
    redis.call('HSET', P .. 'cyc:' .. cycle, 'finished_at', now)
  end
  redis.call('HSET', KMETA, 'status', status, 'finished_at', now)
  if KJOBS then redis.call('SREM', KJOBS, ARGV[2]) else ENDED = 1 end
  redis.call('DEL', P .. 'sess', P .. 'jar', P .. 'login')
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
-- Hosts whose queues took URLs in this call (``touched[shard][host]``) become due now unless
-- already scheduled, or at their next allowed time if that is later (``schedule`` with
-- keep_parked, for all of them at once: one ZMSCORE per shard finds the few not scheduled yet).
local function schedule_touched(touched, now)
  for shard, set in pairs(touched) do
    local hosts = {}
    for host in pairs(set) do hosts[#hosts + 1] = host end
    local key = P .. 'ready:' .. shard
    local scores = read_many('ZMSCORE', key, hosts)
    local absent = {}
    for i, host in ipairs(hosts) do
      if not scores[i] then absent[#absent + 1] = host end
    end
    if #absent > 0 then
      local earliest = hmget(KNEXT, absent)
      local w = gather()
      for _, host in ipairs(absent) do
        local e = earliest[host]
        e = e and tonumber(e)
        add(w, (e and e > now) and e or now, host)
      end
      send('ZADD', key, w, 'NX')
      wake(shard)
    end
  end
end
-- A new URL joins its host's queue, or, once that queue holds ``cap`` entries or older URLs of
-- the host wait in the store, goes to the store after them: staged in ``spill`` under the
-- host's next sequence number (see ``crawler.frontier.spill``). Returns 1 if it was staged.
-- ``staged``: whether any host of the job has ever staged a URL (if not, none is looked up).
-- A host whose queue took it is noted in ``touched``, for ``schedule_touched``.
local function place(host, shard, e, now, cap, staged, touched)
  if cap > 0 then
    local sent = 0
    if staged then sent = tonumber(redis.call('HGET', KSPSEQ, host) or '0') end
    -- Pushed first and taken back if it went over the cap: one command for the usual URL.
    if sent == 0 or sent <= tonumber(redis.call('HGET', KSPREF, host) or '0') then
      local n, undo = push(host, e)
      if n > cap then
        redis.call(undo, P .. 'q:' .. host)
      else
        QUEUED = QUEUED + 1
        touched[shard] = touched[shard] or {}
        touched[shard][host] = true
        return 0
      end
    end
    sent = sent + 1
    redis.call('HSET', KSPSEQ, host, sent)
    redis.call('ZADD', KSPILL, now, sent .. ' ' .. host .. ' ' .. e)
    return 1
  end
  push(host, e)
  QUEUED = QUEUED + 1
  touched[shard] = touched[shard] or {}
  touched[shard][host] = true
  return 0
end
local function parse_lease(l)
  return string.match(l, '^(%S+) (%S+) (%S+) (%S+) (%S+) (.*)$')
end
