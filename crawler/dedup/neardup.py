"""Near-duplicate pages of a job, by simhash, through a banded index in Redis.

With distance d, the 64 bits are cut into d + 1 bands; two hashes within d bits agree exactly on
at least one band, so candidates are found by d + 1 set lookups instead of a scan. Finding and
registering a page is one script, so of two near-duplicate pages stored at the same moment, one
is the original and the other is marked as its duplicate.

The index keeps at most the job's ``near_duplicate_budget`` pages (0: every page), forgetting the
oldest by whole generations (the script says how), so its memory has a bound whatever the crawl's
size; a page is compared with the last third to two thirds of the budget's pages indexed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from redis import Redis

from crawler.config.settings import Settings
from crawler.dedup.bloom import legacy_layout
from crawler.dedup.simhash import bands
from crawler.errors import JobNotFound
from crawler.lru import LRU
from crawler.state import jobconf, keys

# What it takes and returns: scripts/neardup_find_or_add.lua.
_FIND_OR_ADD = (Path(__file__).resolve().parent / "scripts" / "neardup_find_or_add.lua").read_text()


_DEFAULT_BUDGET: int = Settings.__dataclass_fields__["near_duplicate_budget"].default  # type: ignore[assignment]


def _signed32(v: int) -> int:
    # Redis's Lua bit library works on signed 32-bit numbers.
    return v - (1 << 32) if v >= 1 << 31 else v


class NearDuplicates:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._script = redis.register_script(_FIND_OR_ADD)
        self._legacy: LRU[str, bool] = LRU(256)

    def legacy(self, job: str) -> bool:
        """Whether the job's index stays under the job's tag (``bloom.legacy_layout``); asked once
        per job."""
        got = self._legacy.get(job)
        if got is None:
            got = legacy_layout(self.redis, job)
            self._legacy.put(job, got)
        return got

    def find_or_add(self, job: str, pages: Sequence[tuple[str, int]], max_distance: int,
                    budget: int | None = None) -> list[str | None]:
        """For each (url, simhash): the earlier page of the job it nearly duplicates, or None
        (and then it is indexed as an original). ``budget``: pages the index keeps (0: all);
        None: the job's ``near_duplicate_budget`` (the default for a job Redis does not hold)."""
        if not pages:
            return []
        if budget is None:
            budget = self.budget(job)
        n = max_distance + 1
        legacy = self.legacy(job)
        args: list[str | int] = [keys.neardup_prefix(job, legacy), max_distance, n, keys.SIMHASH_PAGES_PER_KEY, budget]
        low = (1 << keys.SIMHASH_BUCKET_BITS) - 1
        for url, h in pages:
            args += [_signed32(h >> 32), _signed32(h & 0xFFFFFFFF), url]
            for value in bands(h, n):
                args += [value >> keys.SIMHASH_BUCKET_BITS, value & low]
        return [r.decode() or None for r in self._script(keys=[keys.simhash_seq(job, legacy)], args=args)]

    def budget(self, job: str) -> int:
        """The job's index budget, from its settings as this process caches them."""
        try:
            return jobconf.load(self.redis, job).settings.near_duplicate_budget
        except JobNotFound:
            return _DEFAULT_BUDGET

    def reset(self, job: str) -> int:
        """Forget every page indexed for the job (a periodic job's new cycle). Returns keys deleted."""
        legacy = self.legacy(job)
        doomed = [keys.simhash_seq(job, legacy), *self.redis.scan_iter(keys.simhash_band_pattern(job, legacy),
                                                                      count=1000)]
        return int(self.redis.delete(*doomed))
