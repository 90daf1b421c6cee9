"""Near-duplicate pages of a job, by simhash, through a banded index in Redis.

With distance d, the 64 bits are cut into d + 1 bands; two hashes within d bits agree exactly on
at least one band, so candidates are found by d + 1 set lookups instead of a scan.

On one Redis, finding and registering a batch of pages is one script, so of two near-duplicate
pages stored at the same moment, one is the original and the other is marked as its duplicate.
On a Redis Cluster each band has a hash tag of its own (``keys.neardup_band_prefix``), so one
job's index spreads over the masters: a batch is looked up band by band, decided on the records'
tag, then added band by band. A batch still answers as its pages taken one by one would; of two
near-duplicate pages in batches stored at the same moment, both may be kept (never both dropped:
only an earlier page can make one a duplicate).

The index keeps at most the job's ``near_duplicate_budget`` pages (0: every page), forgetting the
oldest by whole generations (the script says how), so its memory has a bound whatever the crawl's
size; a page is compared with the last third to two thirds of the budget's pages indexed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from redis import Redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from crawler.config.settings import Settings
from crawler.dedup.bloom import layout
from crawler.dedup.simhash import bands
from crawler.errors import JobNotFound
from crawler.lru import LRU
from crawler.state import jobconf, keys
from crawler.state.conn import is_cluster_client, queue_script, text

# Its steps and what each takes and returns: scripts/neardup.lua.
_STEPS = (Path(__file__).resolve().parent / "scripts" / "neardup.lua").read_text()
# name -> the script run (``bench.redis_cost`` names them so).
SCRIPTS = {name: _STEPS + f"return {main}()\n" for name, main in
           (("neardup", "all_main"), ("neardup_lookup", "lookup_main"), ("neardup_decide", "decide_main"),
            ("neardup_add", "add_main"))}
_ALL, _LOOKUP, _DECIDE, _ADD = SCRIPTS.values()
# KEYS: the count of resets, to count one more, then the keys of the records' tag to delete.
_RESET = """
redis.call('INCR', KEYS[1])
local n = 0
for i = 2, #KEYS do n = n + redis.call('UNLINK', KEYS[i]) end
return n
"""
Split = tuple[str, int, int, list[tuple[int, int]]]  # (url, hi, lo, (bucket, low bits) per band)

TAGS_MAX_AGE = 5.0  # seconds a process trusts what it read of a job's band tags
_DEFAULT_BUDGET: int = Settings.__dataclass_fields__["near_duplicate_budget"].default  # type: ignore[assignment]


def _apart(found: str | None) -> bool:
    """Whether a job of layout ``found`` has its bands under tags of their own (``BANDS_APART``)."""
    return found is not None and int(found) >= int(keys.BANDS_APART)


def _signed32(v: int) -> int:
    # Redis's Lua bit library works on signed 32-bit numbers.
    return v - (1 << 32) if v >= 1 << 31 else v


class NearDuplicates:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._all = redis.register_script(_ALL)
        self._lookup = redis.register_script(_LOOKUP)
        self._decide = redis.register_script(_DECIDE)
        self._add = redis.register_script(_ADD)
        self._reset = redis.register_script(_RESET)
        self.cluster = is_cluster_client(redis)
        self._layouts: LRU[str, str | None] = LRU(256)
        # job -> (when read, its bands' tag names); read again after TAGS_MAX_AGE: a rebuild
        # (``crawler recover``) onto other masters may name them anew.
        self._tags: LRU[str, tuple[float, tuple[str, ...]]] = LRU(256)

    def band_tag(self, job: str, band: int) -> str:
        """The name of band ``band``'s tag (``keys.neardup_band_prefix``): as the job's record
        placed it on a Redis Cluster (``jobs.place_bands``), else the band's number."""
        if not self.cluster:
            return str(band)  # one Redis: placed nowhere
        hit = self._tags.get(job)
        now = time.monotonic()
        if hit is None or now - hit[0] >= TAGS_MAX_AGE:
            raw = self.redis.hget(keys.meta(job), keys.BAND_TAGS_FIELD)
            hit = (now, tuple(text(raw).split(",")) if raw else ())
            self._tags.put(job, hit)
        return hit[1][band] if band < len(hit[1]) else str(band)

    def layout(self, job: str) -> str | None:
        """The job's layout (``bloom.layout``: None for an index under the job's tag); asked once
        per job."""
        if job in self._layouts:
            return self._layouts.get(job)
        got = layout(self.redis, job)
        self._layouts.put(job, got)
        return got

    def legacy(self, job: str) -> bool:
        """Whether the job's index stays under the job's tag (``bloom.legacy_layout``)."""
        return self.layout(job) is None

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
        found = self.layout(job)
        legacy = found is None
        apart = _apart(found)
        records = keys.neardup_prefix(job, legacy)
        head: list[str | int] = [max_distance, n, keys.SIMHASH_PAGES_PER_KEY, budget]
        counter = [keys.simhash_seq(job, legacy), keys.simhash_mark(job, legacy)]
        split = [_split(url, h, n) for url, h in pages]
        if not (self.cluster and apart):  # one script: one slot holds it all, or one Redis does
            band_prefixes = [keys.neardup_band_prefix(job, self.band_tag(job, b)) if apart else records
                             for b in range(n)]
            # An unbounded index from before the bands had tags keeps only numbers in them.
            width = 12 if apart or budget else 4
            args: list[str | int] = [*head, records, width, *band_prefixes]
            for url, hi, lo, parts in split:
                args += [hi, lo, url, *(v for part in parts for v in part)]
            return [text(r) or None for r in self._all(keys=counter, args=args)]
        return self._stepwise(job, head, counter, records, split, n)

    def _stepwise(self, job: str, head: list[str | int], counter: list[str], records: str,
                  split: list[Split], n: int) -> list[str | None]:
        """``find_or_add`` on a Redis Cluster: each band looked up on its own tag, the pages
        decided on the records' tag, the originals added to each band on its tag."""
        return self._settle(job, head, counter, records, split, n, self._look(job, head, counter, split, n))

    def _look(self, job: str, head: list[str | int], counter: list[str], split: list[Split],
              n: int) -> list[set[int]]:
        """Per page, the numbers of the indexed pages within the distance in any band."""
        next_number = int(self.redis.get(counter[0]) or 0) + 1
        calls = []
        for b in range(n):
            args: list[str | int] = [*head, keys.neardup_band_prefix(job, self.band_tag(job, b)), b, next_number]
            for _, hi, lo, parts in split:
                args += [hi, lo, *parts[b]]
            calls.append(([keys.neardup_band_mark(job, self.band_tag(job, b))], args))
        candidates: list[set[int]] = [set() for _ in split]
        for band in self._at_once(self._lookup, calls):
            for found, got in zip(candidates, band, strict=True):
                found.update(int(x) for x in got)
        return candidates

    def _settle(self, job: str, head: list[str | int], counter: list[str], records: str, split: list[Split],
                n: int, candidates: list[set[int]]) -> list[str | None]:
        """Decide each page from its candidates, then add the originals to every band."""
        args: list[str | int] = [*head, records]
        for (url, hi, lo, _), found in zip(split, candidates, strict=True):
            # All of them: which is the answer (not the page's own URL, within the window) only
            # the records say. Only originals are indexed, so they are few but for a URL met
            # again and again.
            args += [hi, lo, url, len(found), *sorted(found)]
        bests, numbers, epoch = self._decide(keys=[*counter, keys.simhash_epoch(job)], args=args)
        originals = [(int(number), page) for number, page in zip(numbers, split, strict=True) if int(number)]
        if originals:
            self._add_to_bands(job, head, originals, n, int(epoch))
        return [text(r) or None for r in bests]

    def _add_to_bands(self, job: str, head: list[str | int], originals: list[tuple[int, Split]], n: int,
                      epoch: int) -> None:
        """Add the originals, numbered after ``epoch`` resets of the index, to every band."""
        calls = []
        for b in range(n):
            tag = self.band_tag(job, b)
            args: list[str | int] = [*head, keys.neardup_band_prefix(job, tag), b, epoch]
            for number, (_, hi, lo, parts) in originals:
                args += [number, hi, lo, *parts[b]]
            calls.append(([keys.neardup_band_mark(job, tag), keys.neardup_band_epoch(job, tag)], args))
        self._at_once(self._add, calls)

    def _at_once(self, script: Script, calls: list[tuple[list[str], list[str | int]]]) -> list[Any]:
        """``script`` run for each (keys, args), the calls to each master in one round trip (a
        cluster's pipeline); one that finds the script not loaded (a master restarted or new)
        is run again on its own, which loads it."""
        pipe = self.redis.pipeline(transaction=False)
        for k, a in calls:
            queue_script(pipe, script, k, a)
        got = pipe.execute(raise_on_error=False)
        for i, (reply, (k, a)) in enumerate(zip(got, calls, strict=True)):
            if isinstance(reply, NoScriptError):
                got[i] = script(keys=k, args=a)
            elif isinstance(reply, Exception):
                raise reply
        return got

    def budget(self, job: str) -> int:
        """The job's index budget, from its settings as this process caches them."""
        try:
            return jobconf.load(self.redis, job).settings.near_duplicate_budget
        except JobNotFound:
            return _DEFAULT_BUDGET

    def reset(self, job: str) -> int:
        """Forget every page indexed for the job (a periodic job's new cycle). Returns keys deleted.
        On a cluster the count of resets is kept and counted, with the records' keys deleted in
        the same script (one tag holds them): a batch decided then is numbered either before the
        reset or after it, and its adds, held up past it, are known by the count
        (``add_main`` in ``scripts/neardup.lua``). The bands' keys go after."""
        found = self.layout(job)
        legacy = found is None
        doomed = {keys.simhash_seq(job, legacy),
                  *(text(k) for k in self.redis.scan_iter(keys.simhash_band_pattern(job, legacy), count=1000))}
        if not (self.cluster and _apart(found)):
            return int(self.redis.delete(*doomed))
        kept = keys.simhash_epoch(job)
        doomed.discard(kept)
        records = sorted(k for k in doomed if k.startswith(keys.neardup_prefix(job)))
        # One call, however many: a record list deleted after a new number was given would be
        # the new cycle's.
        deleted = int(self._reset(keys=[kept, *records]))
        bands = sorted(doomed.difference(records))
        return deleted + (int(self.redis.delete(*bands)) if bands else 0)


def _split(url: str, h: int, n: int) -> Split:
    """(url, hi, lo, (bucket, low bits) per band) of a page, as the scripts take them."""
    low = (1 << keys.SIMHASH_BUCKET_BITS) - 1
    return url, _signed32(h >> 32), _signed32(h & 0xFFFFFFFF), \
        [(v >> keys.SIMHASH_BUCKET_BITS, v & low) for v in bands(h, n)]
