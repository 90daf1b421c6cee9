-- Shared by every script of the frontier (after the KEYS bindings, ``_bind``).
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
-- A job whose URLs are all stored is done; a periodic one waits for its next cycle. Either way
-- its session (keys.session_all) goes: cookies are kept no longer than the crawl that needs them.
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
    redis.call('DEL', P .. 'sess', P .. 'jar', P .. 'login')
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
-- An entry with "\29" before its spec is a request of priority > 0: it goes to the queue's head.
local function requeue(host, shard, e, now)
  if string.find(e, '\29', 1, true) then
    redis.call('LPUSH', P .. 'q:' .. host, e)
  else
    redis.call('RPUSH', P .. 'q:' .. host, e)
  end
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
