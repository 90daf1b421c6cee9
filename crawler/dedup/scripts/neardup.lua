-- The near-duplicate index's steps, run in one script on one Redis (``all_main``) or, on a Redis
-- Cluster, one script per tag (``crawler.dedup.neardup``): each band of the index under a hash
-- tag of its own (``keys.neardup_band_prefix``) and the page records under the index's
-- (``keys.neardup_prefix``), so one job's index spreads over several masters.
--
-- ARGV of every entry point begins: max distance, band count, pages per record list, budget
-- (pages the index keeps; 0: every page). What follows is each entry point's (see below).
--
-- Memory, not speed, shapes the layout (a key per band value and each page's URL in every band
-- cost 1.2 KB a page): an original page is numbered and its record ("hi lo url") put once in the
-- list of its number's bucket (``sh:d:<bucket>``); each band maps the value's low bits, a field
-- of the value's bucket hash, to the pages having it: 12 bytes each (number, hi, lo), so a
-- candidate that is not near costs no record lookup. Indexes made before the bands had tags of
-- their own keep 4 bytes (the number) when unbounded: ``width`` 4 then, and hi and lo are read
-- from the record. Small hashes and lists are packed by Redis (listpack).
--
-- With a budget B, pages are indexed by generation of G = floor(B / 3) numbers, each generation's
-- band hashes under keys of their own (``sh:g<gen>:<band>:<value mod K>``, K = G / 64 so a hash
-- stays small). A page is looked up in the current generation and the one before; the one before
-- that is deleted a slice per page numbered (K / G of its keys), so it is gone by the time the
-- next generation starts, and record lists older than two generations are deleted whole. The
-- index then holds at most B pages (two generations and what remains of the third), compares a
-- page with the G to 2G pages indexed last, and never needs a scan.
--
-- Only originals are numbered, after every band was looked up, so they are added to the bands
-- last. Of a batch, each page is compared with the originals before it in the batch as well
-- (``decide``, within the same window), so a batch answers as pages taken one by one would, on
-- one Redis or several.
--
-- On a cluster the index's resets (a periodic job's new cycle) are counted (``keys.simhash_epoch``,
-- on the records' tag, which a reset does not delete), and each band notes the count its mark
-- belongs to: an add held up past a reset is dropped rather than set its band's mark back to the
-- numbers of the cycle before (the band would take the new cycle's adds for late ones). A reset
-- by a worker from before the count (a rolling upgrade) deletes it: resets are to run on workers
-- that keep it.
local maxd, nb, per, budget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local G, K = 0, 1
if budget > 0 then
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
local function near(hi, lo, mhi, mlo)
  return popcount(bit.bxor(hi, mhi)) + popcount(bit.bxor(lo, mlo)) <= maxd
end
local function u32(s, j)
  local a1, a2, a3, a4 = string.byte(s, j, j + 3)
  return ((a1 * 256 + a2) * 256 + a3) * 256 + a4
end
local function be4(x)
  x = x % 4294967296
  return string.char(math.floor(x / 16777216) % 256, math.floor(x / 65536) % 256, math.floor(x / 256) % 256, x % 256)
end
local function gen_of(n) return G > 0 and math.floor((n - 1) / G) or 0 end
-- The generations a page is compared with when ``next`` is the next number to give.
local function window(next)
  local g = gen_of(next)
  return g > 0 and {g - 1, g} or {g}
end
local function record_key(PR, n) return PR .. 'sh:d:' .. math.floor((n - 1) / per) end
local function record(PR, n)
  local rec = redis.call('LINDEX', record_key(PR, n), (n - 1) % per)
  return string.match(rec or '', '^(%S+) (%S+) (.*)$')
end
-- (key, field) of band b's value given as (bucket, low bits) in generation g.
local function band_slot(PB, g, b, bucket, low)
  if G == 0 then return PB .. 'sh:' .. b .. ':' .. bucket, low end
  local v = tonumber(bucket) * 128 + tonumber(low)
  return PB .. 'sh:g' .. g .. ':' .. b .. ':' .. (v % K), v
end

-- Band b's pages within the distance, in the generations ``gens``, into the set ``into``
-- (number -> true). Returns what the last generation's field held (where the page would go).
local function lookup(PB, b, gens, hi, lo, bucket, low, width, PR, into)
  local packed
  for _, g in ipairs(gens) do
    local key, field = band_slot(PB, g, b, bucket, low)
    packed = redis.call('HGET', key, field)
    if packed then
      for j = 1, #packed, width do
        local n = u32(packed, j)
        if not into[n] then
          local mhi, mlo
          if width == 12 then
            mhi, mlo = u32(packed, j + 4), u32(packed, j + 8)
          else
            mhi, mlo = record(PR, n)
          end
          if mhi and near(hi, lo, tonumber(mhi), tonumber(mlo)) then into[n] = true end
        end
      end
    end
  end
  return packed or ''
end

-- Band b's entry for the original numbered n; ``was``: what its field held, if known.
local function add(PB, b, n, hi, lo, bucket, low, width, was)
  local key, field = band_slot(PB, gen_of(n), b, bucket, low)
  was = was or redis.call('HGET', key, field) or ''
  redis.call('HSET', key, field, was .. (width == 12 and be4(n) .. be4(hi) .. be4(lo) or be4(n)))
end

-- What the numbers a..z forget of band b: each its slice of the band's keys of the generation two
-- before its own, worked out a generation at a time (a range may be long: see ``unforgotten``).
local function forget_slices(PB, b, a, z)
  if z < a then return end
  for g = gen_of(a), gen_of(z) do
    if g >= 2 then
      local oa = g == gen_of(a) and (a - 1) % G or 0
      local oz = g == gen_of(z) and (z - 1) % G or G - 1
      for k = math.floor(oa * K / G), math.floor((oz + 1) * K / G) - 1 do
        redis.call('UNLINK', PB .. 'sh:g' .. (g - 2) .. ':' .. b .. ':' .. k)
      end
    end
  end
end

-- What the numbers a..z forget of the records: each that starts a record list, the one wholly
-- older than two generations.
local function forget_records(PR, a, z)
  if z < a then return end
  local back = math.ceil(2 * G / per) + 1
  for list = math.ceil((a - 1) / per), math.floor((z - 1) / per) do
    if list - back >= 0 then redis.call('UNLINK', PR .. 'sh:d:' .. (list - back)) end
  end
end

-- The numbers since ``forgot`` whose share is to forget, up to ``n``: numbers skipped since forget
-- theirs too (a call that died after numbering; on a cluster, a band's adds coming out of order,
-- by as many numbers as callers hold at once), but not past three generations and 10,000 numbers,
-- so a counter moved by hand cannot make one call work for ever.
local function unforgotten(forgot, n) return math.max(forgot + 1, n - 3 * G - 10000), n end

-- The index's counter and the number whose share was forgotten last (none yet on an index
-- numbered before it had a budget: it starts from there rather than walk every number given).
local function state(kseq, kforgot)
  local got = redis.call('MGET', kseq, kforgot)
  local current = tonumber(got[1] or '0')
  return {current = current, given = current, forgot = G > 0 and tonumber(got[2] or current) or 0}
end

-- Writes what numbering and forgetting moved.
local function save(kseq, kforgot, st)
  if st.current == st.given then return end
  if G > 0 then
    redis.call('MSET', kseq, st.current, kforgot, st.forgot)
  else
    redis.call('SET', kseq, st.current)
  end
end

-- The page (hi, lo, url) given the numbers of its candidates (``cands``, a set) and the originals
-- of its batch before it (``mine``, a list of {hi, lo, url, number}): the earliest indexed page within
-- the distance in the current window that is not itself, or ''; if none, it is numbered (in
-- ``st``) and recorded. Returns the URL it nearly duplicates and, for an original, its number.
local function decide(PR, st, hi, lo, hs, ls, url, cands, mine)
  local ns = {}
  for n in pairs(cands) do ns[#ns + 1] = n end
  table.sort(ns)
  local oldest = G > 0 and gen_of(st.current + 1) - 1 or 0
  for _, n in ipairs(ns) do
    if gen_of(n) >= oldest and n <= st.current then
      -- The record's own hash, checked again: a band's entry may outlive its page (an add that
      -- came after a reset) and name a number another page has since.
      local mhi, mlo, murl = record(PR, n)
      if murl and murl ~= url and near(hi, lo, tonumber(mhi), tonumber(mlo)) then return murl, nil end
    end
  end
  for _, m in ipairs(mine) do
    if gen_of(m[4]) >= oldest and m[3] ~= url and near(hi, lo, m[1], m[2]) then return m[3], nil end
  end
  st.current = st.current + 1
  local n = st.current
  local rk, at = record_key(PR, n), (n - 1) % per
  local rec = hs .. ' ' .. ls .. ' ' .. url
  -- A page's record sits at its number's place whatever an earlier, failed call left (pushed
  -- at the end in one command when the list is as it should be).
  local len = redis.call('RPUSH', rk, rec)
  if len ~= at + 1 then
    redis.call('RPOP', rk)
    len = len - 1
    if len > at then
      redis.call('LSET', rk, at, rec)
    else
      while len < at do len = redis.call('RPUSH', rk, '') end
      redis.call('RPUSH', rk, rec)
    end
  end
  mine[#mine + 1] = {hi, lo, url, n}
  return '', n
end

-- One Redis: KEYS[1] the counter (``keys.simhash_seq``), KEYS[2] the forgotten mark; ARGV[5] the
-- records' prefix, ARGV[6] the entry width, ARGV[7..6+nb] each band's prefix, then per page
-- (hi, lo, url, (bucket, low) per band). Returns per page the URL it nearly duplicates, or ''.
local function all_main()
  local PR, width = ARGV[5], tonumber(ARGV[6])
  local PB = {}
  for b = 0, nb - 1 do PB[b] = ARGV[7 + b] end
  local st = state(KEYS[1], KEYS[2])
  local out, mine = {}, {}
  local step = 3 + 2 * nb
  for i = 7 + nb, #ARGV, step do
    local hi, lo, url = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2]
    local gens, cands, packs = window(st.current + 1), {}, {}
    for b = 0, nb - 1 do
      packs[b] = lookup(PB[b], b, gens, hi, lo, ARGV[i + 3 + 2 * b], ARGV[i + 4 + 2 * b], width, PR, cands)
    end
    local best, n = decide(PR, st, hi, lo, ARGV[i], ARGV[i + 1], url, cands, mine)
    if n then
      if G > 0 then
        local from, to = unforgotten(st.forgot, n)
        st.forgot = n
        forget_records(PR, from, to)
        for b = 0, nb - 1 do forget_slices(PB[b], b, from, to) end
      end
      local last = gens[#gens]
      for b = 0, nb - 1 do
        -- What the lookup read, unless the page went in a later generation than it looked in.
        add(PB[b], b, n, hi, lo, ARGV[i + 3 + 2 * b], ARGV[i + 4 + 2 * b], width,
            gen_of(n) == last and packs[b] or nil)
      end
    end
    out[#out + 1] = best
  end
  save(KEYS[1], KEYS[2], st)
  return out
end

-- A cluster, step 1, per band: KEYS[1] any key of the band's tag; ARGV[5] its prefix, ARGV[6] the
-- band, ARGV[7] the next number to give, then per page (hi, lo, bucket, low). Returns per page
-- the numbers of the band's pages within the distance.
local function lookup_main()
  local PB, b = ARGV[5], tonumber(ARGV[6])
  local gens = window(tonumber(ARGV[7]))
  local out = {}
  for i = 8, #ARGV, 4 do
    local cands, ns = {}, {}
    lookup(PB, b, gens, tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3], 12, nil, cands)
    for n in pairs(cands) do ns[#ns + 1] = n end
    out[#out + 1] = ns
  end
  return out
end

-- Step 2, on the records' tag: KEYS as ``all_main``'s, then the count of resets; ARGV[5] the
-- records' prefix, then per page (hi, lo, url, candidate count, candidates). Returns per page the
-- URL it nearly duplicates or '', per page its number (0: not an original), and the count of
-- resets (for the adds).
local function decide_main()
  local PR = ARGV[5]
  local st = state(KEYS[1], KEYS[2])
  local out, numbers, mine = {}, {}, {}
  local i = 6
  while i <= #ARGV do
    local hi, lo, url, c = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2], tonumber(ARGV[i + 3])
    local cands = {}
    for j = 1, c do cands[tonumber(ARGV[i + 3 + j])] = true end
    local best, n = decide(PR, st, hi, lo, ARGV[i], ARGV[i + 1], url, cands, mine)
    if n and G > 0 then
      forget_records(PR, unforgotten(st.forgot, n))
      st.forgot = n
    end
    out[#out + 1] = best
    numbers[#numbers + 1] = n or 0
    i = i + 4 + c
  end
  save(KEYS[1], KEYS[2], st)
  return {out, numbers, tonumber(redis.call('GET', KEYS[3]) or '0')}
end

-- Step 3, per band: KEYS[1] the band's forgotten mark, KEYS[2] the count of resets it belongs to;
-- ARGV[5] its prefix, ARGV[6] the band, ARGV[7] the count of resets the originals were numbered
-- under, then per original (number, hi, lo, bucket, low). Adds them, and forgets the band's share
-- of every number up to theirs that it has not (its own mark: each band's tag is apart).
local function add_main()
  local PB, b, epoch = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
  local forgot
  if G > 0 then
    local got = redis.call('MGET', KEYS[1], KEYS[2])
    local mine = tonumber(got[2])
    -- Numbered before a reset this band has seen: the index they were numbered in is gone.
    if mine and mine > epoch then return 0 end
    -- A mark of a cycle before (an add held up past a reset wrote it) means nothing now. (One
    -- with no count was written by a worker from before counts, in this cycle.)
    if not (mine and mine < epoch) then forgot = tonumber(got[1] or '') end
    if mine ~= epoch then redis.call('SET', KEYS[2], epoch) end
  end
  for i = 8, #ARGV, 5 do
    local n = tonumber(ARGV[i])
    local late = false
    if G > 0 then
      forgot = forgot or (n - 1)
      if n > forgot then
        forget_slices(PB, b, unforgotten(forgot, n))
        forgot = n
      end
      -- An add that comes after its generation was (being) forgotten here, its caller slow:
      -- outside every window, and its keys would never be deleted again.
      late = gen_of(n) < gen_of(forgot) - 1
    end
    if not late then
      add(PB, b, n, tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4], 12, nil)
    end
  end
  if forgot then redis.call('SET', KEYS[1], forgot) end
  return #ARGV
end
