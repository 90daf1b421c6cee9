"""Near-duplicate pages of a job, by simhash, through a banded index in Redis.

With distance d, the 64 bits are cut into d + 1 bands; two hashes within d bits agree exactly on
at least one band, so candidates are found by d + 1 set lookups instead of a scan. Finding and
registering a page is one script, so of two near-duplicate pages stored at the same moment, one
is the original and the other is marked as its duplicate.
"""

from __future__ import annotations

from collections.abc import Sequence

from redis import Redis

from crawler import keys
from crawler.dedup.simhash import bands

# KEYS[1]: the page counter (``keys.simhash_seq``). ARGV: the job's key prefix, max distance, band
# count, then (hi, lo, url, band values...) per page. A band's set (``keys.simhash_band``) is named
# by the page's band value, so it is built in the script from the prefix and cannot be in KEYS.
# Returns, per page, the URL it nearly duplicates, or ''.
_FIND_OR_ADD = """
local P, maxd, nb = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local function popcount(x)
  local n = 0
  while x ~= 0 do x = bit.band(x, x - 1); n = n + 1 end
  return n
end
local out = {}
local step = 3 + nb
for i = 4, #ARGV, step do
  local hi, lo, url = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2]
  local best, best_seq = '', nil
  for b = 0, nb - 1 do
    local members = redis.call('SMEMBERS', P .. 'sh:' .. b .. ':' .. ARGV[i + 3 + b])
    for _, m in ipairs(members) do
      local seq, mhi, mlo, murl = string.match(m, '^(%d+) (%S+) (%S+) (.*)$')
      local d = popcount(bit.bxor(hi, tonumber(mhi))) + popcount(bit.bxor(lo, tonumber(mlo)))
      if d <= maxd and murl ~= url and (best_seq == nil or tonumber(seq) < best_seq) then
        best, best_seq = murl, tonumber(seq)
      end
    end
  end
  if best == '' then
    local seq = redis.call('INCR', KEYS[1])
    for b = 0, nb - 1 do
      local member = seq .. ' ' .. ARGV[i] .. ' ' .. ARGV[i + 1] .. ' ' .. url
      redis.call('SADD', P .. 'sh:' .. b .. ':' .. ARGV[i + 3 + b], member)
    end
  end
  out[#out + 1] = best
end
return out
"""


def _signed32(v: int) -> int:
    # Redis's Lua bit library works on signed 32-bit numbers.
    return v - (1 << 32) if v >= 1 << 31 else v


class NearDuplicates:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._script = redis.register_script(_FIND_OR_ADD)

    def find_or_add(self, job: str, pages: Sequence[tuple[str, int]], max_distance: int) -> list[str | None]:
        """For each (url, simhash): the earlier page of the job it nearly duplicates, or None
        (and then it is indexed as an original)."""
        if not pages:
            return []
        n = max_distance + 1
        args: list[str | int] = [keys.prefix(job), max_distance, n]
        for url, h in pages:
            args += [_signed32(h >> 32), _signed32(h & 0xFFFFFFFF), url, *bands(h, n)]
        return [r.decode() or None for r in self._script(keys=[keys.simhash_seq(job)], args=args)]

    def reset(self, job: str) -> int:
        """Forget every page indexed for the job (a periodic job's new cycle). Returns keys deleted."""
        doomed = [keys.simhash_seq(job), *self.redis.scan_iter(keys.simhash_band_pattern(job), count=1000)]
        return int(self.redis.delete(*doomed))
