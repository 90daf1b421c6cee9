-- KEYS: meta, memo (meta again when not memoised: every key in the job's slot), then the layer's
-- segments this batch touches. ARGV: layer, k, segment_bits, capacity, then per URL the index in
-- KEYS of its segment, its id and its k bit offsets in the segment (worked out by the caller: a
-- number Lua hands to Redis is printed with "%.17g", which cost more than the rest of the
-- script), the URLs of a segment next to each other. Returns one character per URL: '1' new,
-- '0' seen, '?' not taken because the layer is full (the caller grows a layer and adds those
-- there); or 'STALE' if a newer layer exists.
-- A URL the memo already answers for keeps that answer and its bits are left alone: two runs of
-- one batch (a redelivery while the first still runs) can both miss the memo before either adds,
-- and the second must not then record the first one's bits as "seen".
local layer, k, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
local meta = redis.call('HMGET', KEYS[1], 'layers', 'n:' .. layer)
if tonumber(meta[1]) ~= layer + 1 then return 'STALE' end
local filled = tonumber(meta[2] or '0')
local memo = KEYS[2]
if memo == KEYS[1] then memo = '' end
local out, todo, new = {}, {}, 0
local w = k + 2
local n = (#ARGV - 4) / w
local function id_of(u) return ARGV[6 + w * u] end
-- The memo is read a thousand URLs a command (unpack's stack is bounded).
local known = {}
if memo ~= '' then
  for u0 = 0, n - 1, 1000 do
    local ids = {}
    for u = u0, math.min(n, u0 + 1000) - 1 do ids[#ids + 1] = id_of(u) end
    local got = redis.call('HMGET', memo, unpack(ids))
    for j = 1, #ids do known[u0 + j] = got[j] end
  end
end
for u = 0, n - 1 do
  if known[u + 1] then out[u + 1] = known[u + 1] else todo[#todo + 1] = u end
end
-- Many URLs of one segment per BITFIELD call (one call has a per-call cost), few enough to
-- unpack, and never more than the layer has room for.
local group = math.floor(7000 / (4 * k))
local memos = {}
local t0 = 1
while t0 <= #todo do
  local room = cap - filled - new
  if room <= 0 then break end
  local seg = ARGV[5 + w * todo[t0]]
  local t1 = t0
  local last = math.min(#todo, t0 + math.min(group, room) - 1)
  while t1 < last and ARGV[5 + w * todo[t1 + 1]] == seg do t1 = t1 + 1 end
  local args, c = {}, 0
  for t = t0, t1 do
    local at = 6 + w * todo[t]
    for j = 1, k do
      args[c + 1] = 'SET'; args[c + 2] = 'u1'; args[c + 3] = ARGV[at + j]; args[c + 4] = '1'
      c = c + 4
    end
  end
  local old = redis.call('BITFIELD', KEYS[tonumber(seg)], unpack(args, 1, c))
  for t = t0, t1 do
    local flag = '0'
    local base = (t - t0) * k
    for j = base + 1, base + k do
      if old[j] == 0 then flag = '1'; new = new + 1; break end
    end
    out[todo[t] + 1] = flag
    memos[#memos + 1] = id_of(todo[t])
    memos[#memos + 1] = flag
  end
  t0 = t1 + 1
end
for t = t0, #todo do out[todo[t] + 1] = '?' end
if memo ~= '' and #memos > 0 then
  for i = 1, #memos, 2000 do redis.call('HSET', memo, unpack(memos, i, math.min(#memos, i + 1999))) end
  redis.call('EXPIRE', memo, 3600)
end
if new > 0 then redis.call('HINCRBY', KEYS[1], 'n:' .. layer, new) end
return table.concat(out)
