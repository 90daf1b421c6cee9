-- KEYS[1]: the page counter (``keys.simhash_seq``). ARGV: the job's key prefix, max distance, band
-- count, pages per record list, then (hi, lo, url, (bucket, field) per band) per page. Keys are
-- named by data (a band value's bucket, a page's number), so they are built in the script from
-- the prefix and cannot be in KEYS; ``keys.simhash_band`` and ``keys.simhash_pages`` spell them.
--
-- Memory, not speed, shapes the layout (a key per band value and each page's URL in every band
-- cost 1.2 KB a page): a page is numbered and its record ("hi lo url") pushed once onto the list
-- of its number's bucket; each band maps the value's low bits, a field of the value's bucket
-- hash, to the numbers of the pages having it, 4 bytes each. Small hashes and lists are packed
-- by Redis (listpack), so a page costs about its URL's length plus 16 bytes.
-- Returns, per page, the URL it nearly duplicates, or ''.
local P, maxd, nb, per = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function popcount(x)
  local n = 0
  while x ~= 0 do x = bit.band(x, x - 1); n = n + 1 end
  return n
end
local function record_key(seq) return P .. 'sh:d:' .. math.floor((seq - 1) / per) end
local out = {}
local step = 3 + 2 * nb
for i = 5, #ARGV, step do
  local hi, lo, url = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2]
  local best, best_seq = '', nil
  local checked, packs = {}, {}
  for b = 0, nb - 1 do
    local packed = redis.call('HGET', P .. 'sh:' .. b .. ':' .. ARGV[i + 3 + 2 * b], ARGV[i + 4 + 2 * b])
    packs[b] = packed or ''
    if packed then
      for j = 1, #packed, 4 do
        local a1, a2, a3, a4 = string.byte(packed, j, j + 3)
        local seq = ((a1 * 256 + a2) * 256 + a3) * 256 + a4
        if not checked[seq] and (best_seq == nil or seq < best_seq) then
          checked[seq] = true
          local rec = redis.call('LINDEX', record_key(seq), (seq - 1) % per)
          local mhi, mlo, murl = string.match(rec or '', '^(%S+) (%S+) (.*)$')
          if mhi and murl ~= url and
             popcount(bit.bxor(hi, tonumber(mhi))) + popcount(bit.bxor(lo, tonumber(mlo))) <= maxd then
            best, best_seq = murl, seq
          end
        end
      end
    end
  end
  if best == '' then
    local seq = redis.call('INCR', KEYS[1])
    local rk, at = record_key(seq), (seq - 1) % per
    local rec = ARGV[i] .. ' ' .. ARGV[i + 1] .. ' ' .. url
    -- A page's record sits at its number's place whatever an earlier, failed call left.
    local n = redis.call('LLEN', rk)
    if n > at then
      redis.call('LSET', rk, at, rec)
    else
      while n < at do n = redis.call('RPUSH', rk, '') end
      redis.call('RPUSH', rk, rec)
    end
    local s4 = string.char(math.floor(seq / 16777216) % 256, math.floor(seq / 65536) % 256,
                           math.floor(seq / 256) % 256, seq % 256)
    for b = 0, nb - 1 do
      redis.call('HSET', P .. 'sh:' .. b .. ':' .. ARGV[i + 3 + 2 * b], ARGV[i + 4 + 2 * b], packs[b] .. s4)
    end
  end
  out[#out + 1] = best
end
return out
