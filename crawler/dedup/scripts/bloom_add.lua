-- KEYS: segment, meta, memo ('' when not memoised). ARGV: layer, k, segment_bits, capacity, then
-- h1, h2, id per URL. Returns one character per URL: '1' new, '0' seen, '?' not taken because the
-- layer is full (the caller grows a layer and adds those there); or 'STALE' if a newer layer exists.
-- A URL the memo already answers for keeps that answer and its bits are left alone: two runs of
-- one batch (a redelivery while the first still runs) can both miss the memo before either adds,
-- and the second must not then record the first one's bits as "seen".
local layer, k, m, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if tonumber(redis.call('HGET', KEYS[2], 'layers')) ~= layer + 1 then return 'STALE' end
local filled = tonumber(redis.call('HGET', KEYS[2], 'n:' .. layer) or '0')
local memo = KEYS[3]
local out, todo, new = {}, {}, 0
local n = (#ARGV - 4) / 3
for u = 0, n - 1 do
  local known = false
  if memo ~= '' then known = redis.call('HGET', memo, ARGV[7 + 3 * u]) end
  if known then out[u + 1] = known else todo[#todo + 1] = u end
end
-- Many URLs per BITFIELD call (one call has a per-call cost), few enough to unpack, and never
-- more than the layer has room for.
local group = math.floor(7000 / (4 * k))
local t0 = 1
while t0 <= #todo do
  local room = cap - filled - new
  if room <= 0 then break end
  local t1 = math.min(#todo, t0 + math.min(group, room) - 1)
  local args, c = {}, 0
  for t = t0, t1 do
    local u = todo[t]
    local a, b = tonumber(ARGV[5 + 3 * u]), tonumber(ARGV[6 + 3 * u])
    for j = 0, k - 1 do
      args[c + 1] = 'SET'; args[c + 2] = 'u1'; args[c + 3] = (a + j * b) % m; args[c + 4] = 1
      c = c + 4
    end
  end
  local old = redis.call('BITFIELD', KEYS[1], unpack(args, 1, c))
  for t = t0, t1 do
    local flag = '0'
    local base = (t - t0) * k
    for j = base + 1, base + k do
      if old[j] == 0 then flag = '1'; new = new + 1; break end
    end
    out[todo[t] + 1] = flag
    if memo ~= '' then redis.call('HSET', memo, ARGV[7 + 3 * todo[t]], flag) end
  end
  t0 = t1 + 1
end
for t = t0, #todo do out[todo[t] + 1] = '?' end
if memo ~= '' then redis.call('EXPIRE', memo, 3600) end
if new > 0 then redis.call('HINCRBY', KEYS[2], 'n:' .. layer, new) end
return table.concat(out)
