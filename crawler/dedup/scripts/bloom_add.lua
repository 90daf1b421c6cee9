-- KEYS: segment, meta, memo (meta again when not memoised: every key in the job's slot). ARGV: layer, k, segment_bits, capacity, then
-- h1, h2, id per URL. Returns one character per URL: '1' new, '0' seen, '?' not taken because the
-- layer is full (the caller grows a layer and adds those there); or 'STALE' if a newer layer exists.
-- A URL the memo already answers for keeps that answer and its bits are left alone: two runs of
-- one batch (a redelivery while the first still runs) can both miss the memo before either adds,
-- and the second must not then record the first one's bits as "seen".
local layer, k, m, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local meta = redis.call('HMGET', KEYS[2], 'layers', 'n:' .. layer)
if tonumber(meta[1]) ~= layer + 1 then return 'STALE' end
local filled = tonumber(meta[2] or '0')
local memo = KEYS[3]
if memo == KEYS[2] then memo = '' end
local out, todo, new = {}, {}, 0
local n = (#ARGV - 4) / 3
-- The memo is read a thousand URLs a command (unpack's stack is bounded) and written once per
-- BITFIELD group.
local known = {}
if memo ~= '' then
  for u0 = 0, n - 1, 1000 do
    local ids = {}
    for u = u0, math.min(n, u0 + 1000) - 1 do ids[#ids + 1] = ARGV[7 + 3 * u] end
    local got = redis.call('HMGET', memo, unpack(ids))
    for j = 1, #ids do known[u0 + j] = got[j] end
  end
end
for u = 0, n - 1 do
  if known[u + 1] then out[u + 1] = known[u + 1] else todo[#todo + 1] = u end
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
  local memos = {}
  for t = t0, t1 do
    local flag = '0'
    local base = (t - t0) * k
    for j = base + 1, base + k do
      if old[j] == 0 then flag = '1'; new = new + 1; break end
    end
    out[todo[t] + 1] = flag
    memos[#memos + 1] = ARGV[7 + 3 * todo[t]]
    memos[#memos + 1] = flag
  end
  if memo ~= '' then redis.call('HSET', memo, unpack(memos)) end
  t0 = t1 + 1
end
for t = t0, #todo do out[todo[t] + 1] = '?' end
if memo ~= '' then redis.call('EXPIRE', memo, 3600) end
if new > 0 then redis.call('HINCRBY', KEYS[2], 'n:' .. layer, new) end
return table.concat(out)
