-- KEYS[1]: the page counter (``keys.simhash_seq``). ARGV: the job's key prefix, max distance, band
-- count, pages per record list, budget (pages the index keeps; 0: every page), then (hi, lo, url,
-- (bucket, field) per band) per page. Keys are named by data (a band value's bucket, a page's
-- number), so they are built in the script from the prefix and cannot be in KEYS;
-- ``keys.simhash_band`` and ``keys.simhash_pages`` spell those of an unbounded index.
--
-- Memory, not speed, shapes the layout (a key per band value and each page's URL in every band
-- cost 1.2 KB a page): a page is numbered and its record ("hi lo url") pushed once onto the list
-- of its number's bucket; each band maps the value's low bits, a field of the value's bucket
-- hash, to the numbers of the pages having it, 4 bytes each. Small hashes and lists are packed
-- by Redis (listpack), so a page costs about its URL's length plus 16 bytes.
--
-- With a budget B, pages are indexed by generation of G = floor(B / 3) numbers, each generation's
-- band hashes under keys of their own (``sh:g<gen>:<band>:<value mod K>``, K = G / 64 so a hash
-- stays small). A page is looked up in the current generation and the one before; the one before
-- that is deleted a slice per page added (K / G of its keys), so it is gone by the time the next
-- generation starts, and record lists older than two generations are deleted whole. The index
-- then holds at most B pages (two generations and what remains of the third), compares a page
-- with the G to 2G pages indexed last, and never needs a scan.
-- Returns, per page, the URL it nearly duplicates, or ''.
local P, maxd, nb, per, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
                                  tonumber(ARGV[5])
local G, K, width = 0, 1, 4
if budget > 0 then
  width = 12
  G = math.max(1, math.floor(budget / 3))
  -- Keys per band: as an unbounded index has (a band value's bucket), fewer for a small budget.
  K = math.max(1, math.min(math.ceil(G / 64), 2 ^ math.max(0, math.floor(64 / nb) - 7)))
  -- Record lists are deleted whole: small enough that the ones kept fit in the budget.
  per = math.max(1, math.min(per, math.floor(G / 3)))
end
local function popcount(x)
  local n = 0
  while x ~= 0 do x = bit.band(x, x - 1); n = n + 1 end
  return n
end
local function u32(s, j)
  local a1, a2, a3, a4 = string.byte(s, j, j + 3)
  return ((a1 * 256 + a2) * 256 + a3) * 256 + a4
end
local function be4(x)
  x = x % 4294967296
  return string.char(math.floor(x / 16777216) % 256, math.floor(x / 65536) % 256, math.floor(x / 256) % 256, x % 256)
end
local function record_key(seq) return P .. 'sh:d:' .. math.floor((seq - 1) / per) end
local function gen_of(seq) return math.floor((seq - 1) / G) end
-- (key, field) of band b's value given as (bucket, low bits) in generation g.
local function band_slot(g, b, bucket, low)
  if G == 0 then return P .. 'sh:' .. b .. ':' .. bucket, low end
  local v = tonumber(bucket) * 128 + tonumber(low)
  return P .. 'sh:g' .. g .. ':' .. b .. ':' .. (v % K), v
end
-- What the page numbered ``seq`` forgets: its slice of the keys of the generation two before
-- its own and, when it starts a record list, the record list wholly older than two generations.
local function forget(seq)
  local g, o = gen_of(seq) - 2, (seq - 1) % G
  if g >= 0 then
    for k = math.floor(o * K / G), math.floor((o + 1) * K / G) - 1 do
      for b = 0, nb - 1 do redis.call('UNLINK', P .. 'sh:g' .. g .. ':' .. b .. ':' .. k) end
    end
  end
  if (seq - 1) % per == 0 then
    local old = math.floor((seq - 1) / per) - math.ceil(2 * G / per) - 1
    if old >= 0 then redis.call('UNLINK', P .. 'sh:d:' .. old) end
  end
end

-- The number whose share was forgotten last: numbers skipped since (a call that died after
-- numbering) forget theirs too. None yet on an index numbered before it had a budget: it starts
-- from there rather than walk every number ever given.
local FORGOT = P .. 'sh:f'
local got = redis.call('MGET', KEYS[1], FORGOT)
local current = tonumber(got[1] or '0')
local forgot = G > 0 and tonumber(got[2] or current) or 0
local out = {}
local step = 3 + 2 * nb
for i = 6, #ARGV, step do
  local hi, lo, url = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2]
  local best, best_seq = '', nil
  local checked, packs = {}, {}
  local gens = {0}
  if G > 0 then
    local g = gen_of(current + 1)
    gens = g > 0 and {g - 1, g} or {g}
  end
  for _, g in ipairs(gens) do
    for b = 0, nb - 1 do
      local key, field = band_slot(g, b, ARGV[i + 3 + 2 * b], ARGV[i + 4 + 2 * b])
      local packed = redis.call('HGET', key, field)
      packs[b] = packed or ''  -- the last generation looked in is the one a new page goes in
      if packed then
        for j = 1, #packed, width do
          local seq, mhi, mlo = u32(packed, j), nil, nil
          if G > 0 then mhi, mlo = u32(packed, j + 4), u32(packed, j + 8) end
          if not checked[seq] and (best_seq == nil or seq < best_seq) then
            checked[seq] = true
            local murl
            if mhi == nil or popcount(bit.bxor(hi, mhi)) + popcount(bit.bxor(lo, mlo)) <= maxd then
              local rec = redis.call('LINDEX', record_key(seq), (seq - 1) % per)
              mhi, mlo, murl = string.match(rec or '', '^(%S+) (%S+) (.*)$')
            end
            if mhi and murl ~= url and
               popcount(bit.bxor(hi, tonumber(mhi))) + popcount(bit.bxor(lo, tonumber(mlo))) <= maxd then
              best, best_seq = murl, seq
            end
          end
        end
      end
    end
  end
  if best == '' then
    local seq = redis.call('INCR', KEYS[1])
    current = seq
    local rk, at = record_key(seq), (seq - 1) % per
    local rec = ARGV[i] .. ' ' .. ARGV[i + 1] .. ' ' .. url
    -- A page's record sits at its number's place whatever an earlier, failed call left (pushed
    -- at the end in one command when the list is as it should be).
    local n = redis.call('RPUSH', rk, rec)
    if n ~= at + 1 then
      redis.call('RPOP', rk)
      n = n - 1
      if n > at then
        redis.call('LSET', rk, at, rec)
      else
        while n < at do n = redis.call('RPUSH', rk, '') end
        redis.call('RPUSH', rk, rec)
      end
    end
    -- A bounded index keeps each page's hash beside its number: a candidate that is not near
    -- costs no record lookup.
    local s4 = G > 0 and be4(seq) .. be4(hi) .. be4(lo) or be4(seq)
    local g = G > 0 and gen_of(seq) or 0
    for b = 0, nb - 1 do
      local key, field = band_slot(g, b, ARGV[i + 3 + 2 * b], ARGV[i + 4 + 2 * b])
      -- What the lookup read, unless skipped numbers moved the page to a later generation.
      local was = g == gens[#gens] and packs[b] or (redis.call('HGET', key, field) or '')
      redis.call('HSET', key, field, was .. s4)
    end
    if G > 0 then
      for s2 = math.max(forgot + 1, seq - 3 * G), seq do forget(s2) end
      forgot = seq
    end
  end
  out[#out + 1] = best
end
if G > 0 then redis.call('SET', FORGOT, forgot) end
return out
