-- ARGV: prefix, job, shard, now, max_urls, per_host, delay, lease_deadline, token, concurrency,
-- per_ip, batch, min_free, offset. Requests in flight and pages held for parse and store both count against
-- ``concurrency``. With batch > 0 the k-th URL leased is leased under
-- ``token.(k // batch)``: each fetch task gets a token of its own. While requests are in flight,
-- nothing goes until at least min_free slots are free: a finished task frees its slots at once,
-- and re-dispatching them one small task at a time would keep every later task as small (each
-- task costs the same Celery overhead whatever its size). Returns {entries and hosts
-- interleaved, next due time or '', free slots (-1: not running; 0: wait for more to finish),
-- the job's requests in flight once these are leased}.
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
local inflight = 0
if redis.call('HGET', KMETA, 'status') == 'running' then
  local cnt = KCNT
  local c = redis.call('HMGET', cnt, 'inflight', 'held')
  local busy = tonumber(c[1] or '0') + tonumber(c[2] or '0')
  inflight = tonumber(c[1] or '0')
  slots = math.min(max_urls, concurrency - busy)
  if busy > 0 and slots < min_free then slots = 0 end
  local total = 0
  if slots > 0 then
    local hosts = redis.call('ZRANGEBYSCORE', rkey, '-inf', now, 'LIMIT', 0, slots)
    -- Records most jobs never have are looked up per host only when they exist: operators'
    -- overrides, and the exact seen hash's depths (a Bloom job has none).
    local overrides = #hosts > 0 and redis.call('EXISTS', KOVR) == 1
    local depths = #hosts > 0 and redis.call('EXISTS', KSEEN) == 1
    for _, host in ipairs(hosts) do
      if slots <= 0 then break end
      local qkey = P .. 'q:' .. host
      local inf = tonumber(redis.call('HGET', KINF, host) or '0')
      local ipk = ip_key(host)
      local ipinf, waited = ip_inflight(ipk)
      local limit = per_host
      if overrides then limit = host_limit(host, per_host) end
      -- per_ip 0: an address takes what one host of it may (its override included).
      local ip_limit = per_ip
      if ip_limit <= 0 then ip_limit = limit end
      local take = math.min(limit - inf, ip_limit - ipinf, slots)
      -- The host's delay is read only when it matters: for more than one request, or for a host
      -- that stays due (one at its in-flight limit waits for a request to end instead).
      local hdelay = 0
      if take > 1 or inf + math.max(take, 0) < limit then hdelay = host_delay(host, delay) end
      -- With a delay, requests to one host start one at a time, ``delay`` apart.
      if hdelay > 0 and take > 1 then take = 1 end
      local got = 0
      while got < take do
        local e = redis.call('LPOP', qkey)
        if not e then break end
        local url = entry_url(e)
        if depths then
          local best = tonumber(redis.call('HGET', KSEEN, url))
          if best and best < entry_depth(e) then e = with_depth(e, best) end
        end
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
      end
      if inf >= limit then
        -- Parked until a request of it ends, whatever its queue holds (release_slot looks), and
        -- that end sets its next time.
        redis.call('ZADD', rkey, PARKED, host)
      else
        if got > 0 and hdelay > 0 then redis.call('HSET', KNEXT, host, now + hdelay) end
        if redis.call('LLEN', qkey) == 0 then
          redis.call('ZREM', rkey, host)
        elseif ipinf + got >= ip_limit then
          redis.call('ZADD', rkey, PARKED, host)
          if redis.call('SADD', P .. 'ipwait:' .. ipk, shard .. ' ' .. host) == 1 and not waited then
            redis.call('HINCRBY', KIPINF, ipk, WAITING)
            waited = true
          end
        else
          redis.call('ZADD', rkey, now + hdelay, host)
        end
      end
    end
  end
  if total > 0 then
    redis.call('HINCRBY', cnt, 'queued', -total)
    redis.call('HINCRBY', cnt, 'inflight', total)
    redis.call('HINCRBY', cnt, 'dispatched', total)
    inflight = inflight + total
  end
end
local first = redis.call('ZRANGE', rkey, 0, 0, 'WITHSCORES')
local nxt = ''
if #first > 0 then nxt = first[2] end
return {out, nxt, slots, inflight}
