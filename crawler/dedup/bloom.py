"""A scalable, segmented Bloom filter in Redis: a job's seen-set in bounded memory, split into
segments so it can outgrow one Redis string and spread over servers.

Sizing: m = -n ln p / (ln 2)^2 bits and k = (m/n) ln 2 hashes for n URLs at false-positive rate
p. The bits are split into segments, each its own Redis key, so a filter can pass one string's
512 MB limit and segments can sit on different servers by key hash. One 128-bit mmh3 hash per
URL picks its segment and, by double hashing, all k bit positions inside it: a URL is tested and
set in one place, by one ``BITFIELD ... SET u1`` command, which returns the old bits. So the
check-and-add is atomic per URL without optimistic locks: two workers adding one URL at the same
moment are serialised by Redis, and exactly one sees a zero bit. A batch costs one script call
per segment it touches, pipelined.

Capacity: a layer that has taken n URLs is frozen (the add script stops at exactly n and hands
back the rest) and a new layer twice as large, with half the p, takes further additions (a
scalable Bloom filter), so the overall rate stays below p / (1 - 1/2) = 2p instead of silently
degrading. Frozen layers are only read; the script for the current layer refuses to run if a
newer layer exists, so the growth boundary is exactly-once
too. Segments are created at full size, sized to fill an allocator size class, so Redis memory
is the bits plus a few bytes per segment.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import mmh3
from redis import Redis

from crawler.state import keys
from crawler.state.conn import is_cluster_client, text

log = logging.getLogger(__name__)

MAX_SEGMENT_BYTES = (1 << 20) - 16  # one 1 MiB allocation with the string header
_SDS_OVERHEAD = 10  # Redis string header and terminator
_KEY_OVERHEAD = 80  # a key's name, object and hash-table entry, roughly, per segment
GROWTH = 2
TIGHTENING = 0.5
MEMO_TTL = 3600


def _size_class(n: int) -> int:
    """The allocation jemalloc makes for n bytes: four classes per power of two."""
    if n <= 4096:
        return max(16, 1 << (n - 1).bit_length()) if n & (n - 1) else n
    spacing = 1 << (n.bit_length() - 3)
    return -(-n // spacing) * spacing


@dataclass(frozen=True)
class Layer:
    index: int
    capacity: int  # URLs it is sized for
    p: float
    k: int
    segments: int
    segment_bits: int

    @property
    def bits(self) -> int:
        return self.segments * self.segment_bits

    @property
    def expected_fp(self) -> float:
        """The false-positive rate at capacity, for the bits actually allocated."""
        return float((1 - math.exp(-self.k * self.capacity / self.bits)) ** self.k)

    @classmethod
    def sized(cls, index: int, capacity: int, p: float, max_segment_bytes: int = MAX_SEGMENT_BYTES) -> Layer:
        if capacity < 1 or not 0 < p < 1:
            raise ValueError(f"a Bloom filter needs capacity >= 1 and 0 < p < 1, got {capacity}, {p}")
        m = math.ceil(-capacity * math.log(p) / math.log(2) ** 2)
        k = max(1, round(m / capacity * math.log(2)))
        segments, seg_bytes = _segmenting(math.ceil(m / 8), max_segment_bytes)
        return cls(index, capacity, p, k, segments, seg_bytes * 8)


def _segmenting(need: int, max_segment_bytes: int) -> tuple[int, int]:
    """(segments, bytes each) holding ``need`` bytes with the least memory allocated. The
    allocator rounds each string up to a size class (four per power of two), which can waste up
    to a fifth of one big segment: a few more, smaller segments usually land near a class
    boundary. Each segment is then grown to fill its class, since those bytes are allocated anyway."""
    fewest = max(1, math.ceil(need / max_segment_bytes))
    best: tuple[int, int, int] | None = None  # (allocated, segments, bytes each)
    for segments in range(fewest, fewest * 64 + 1):
        want = math.ceil(need / segments)
        seg_bytes = min(max_segment_bytes, max(want, _size_class(want + _SDS_OVERHEAD) - _SDS_OVERHEAD))
        allocated = segments * (_size_class(seg_bytes + _SDS_OVERHEAD) + _KEY_OVERHEAD)
        if best is None or allocated < best[0]:
            best = (allocated, segments, seg_bytes)
        if allocated <= need * 1.025:
            break  # close enough to the bits themselves: fewer keys beat a last fraction of a percent
    assert best is not None
    return best[1], best[2]


# What it takes and returns: scripts/bloom_add.lua.
_ADD = (Path(__file__).resolve().parent / "scripts" / "bloom_add.lua").read_text()

# What it takes and returns: scripts/bloom_grow.lua.
_GROW = (Path(__file__).resolve().parent / "scripts" / "bloom_grow.lua").read_text()


def _hashes(url: str) -> tuple[int, int, int]:
    h = mmh3.hash128(url, signed=False)
    # Low 32 bits and the next 32 (made odd, so positions cycle) for the bits; the top 64 bits
    # pick the segment, independently of the positions.
    return h & 0xFFFFFFFF, ((h >> 32) & 0xFFFFFFFF) | 1, h >> 64


def _offsets(hashes: tuple[int, int, int], layer: Layer) -> list[int]:
    """The URL's k bit positions in its segment of ``layer`` (double hashing)."""
    h1, h2, _ = hashes
    return [(h1 + j * h2) % layer.segment_bits for j in range(layer.k)]


def _memo_id(hashes: tuple[int, int, int]) -> str:
    h1, h2, top = hashes
    return f"{h1:08x}{h2:08x}{top:016x}"


def _claim_ids(hashes: Sequence[tuple[int, int, int]], claimers: Sequence[str]) -> list[str]:
    """Memo ids of (URL, claimer) pairs: the URL's own id and 8 bytes of the claimer's digest."""
    return [f"{_memo_id(h)}:{hashlib.blake2b(c.encode(), digest_size=8).hexdigest()}"
            for h, c in zip(hashes, claimers, strict=True)]


def layout(redis: Redis, job: str) -> str | None:
    """How the job's Bloom filter and near-duplicate index are laid out (``keys.LAYOUT_FIELD``):
    None if it was submitted before they had tags of their own; today's for a job Redis does
    not hold."""
    job_id, got = redis.hmget(keys.meta(job), ["id", keys.LAYOUT_FIELD])
    if job_id is None:
        return keys.LAYOUT
    return None if got is None else text(got)


def legacy_layout(redis: Redis, job: str) -> bool:
    """Whether the job was submitted before its Bloom filter and near-duplicate index had tags of
    their own: then they stay under the job's tag, whatever resets them."""
    return layout(redis, job) is None


class BloomSeen:
    """The seen-set of one job as a scalable segmented Bloom filter. ``add_many`` may report a
    URL as already seen although it is not (at rate below 2p); it never reports a URL as new
    twice."""

    def __init__(self, redis: Redis, job: str, capacity: int = 1_000_000, p: float = 1e-6,
                 max_segment_bytes: int = MAX_SEGMENT_BYTES) -> None:
        self.redis = redis
        self.job = job
        self.capacity = capacity
        self.p = p
        self.max_segment_bytes = max_segment_bytes
        self.legacy = legacy_layout(redis, job)
        self.meta = keys.bloom_meta(job, self.legacy)
        self._add = redis.register_script(_ADD)
        self._grow = redis.register_script(_GROW)
        self.cluster = is_cluster_client(redis)
        self._layers: list[Layer] = []

    def segment_key(self, layer: int, segment: int) -> str:
        return keys.bloom_segment(self.job, layer, segment, self.legacy)

    # -- layers ------------------------------------------------------------------------------
    def layers(self, refresh: bool = False) -> list[Layer]:
        if refresh or not self._layers:
            meta = {text(k): text(v) for k, v in self.redis.hgetall(self.meta).items()}
            count = int(meta.get("layers", 0))
            if count == 0:
                self._create(0)
                return self.layers(refresh=True)
            self._layers = [Layer(i, int(meta[f"cap:{i}"]), float(meta[f"p:{i}"]), int(meta[f"k:{i}"]),
                                  int(meta[f"segs:{i}"]), int(meta[f"bits:{i}"])) for i in range(count)]
        return self._layers

    def _create(self, index: int) -> None:
        layer = Layer.sized(index, self.capacity * GROWTH**index, self.p * TIGHTENING**index, self.max_segment_bytes)
        keys = [self.meta] + [self.segment_key(index, s) for s in range(layer.segments)]
        made = self._grow(keys=keys, args=[index, layer.capacity, repr(layer.p), layer.k, layer.segments,
                                           layer.segment_bits, layer.segment_bits // 8])
        if int(made) == index + 1 and index > 0:
            log.warning("bloom filter of job %s passed its capacity: grew layer %d for %d URLs at p=%g (%.1f MB)",
                        self.job, index, layer.capacity, layer.p, layer.bits / 8e6)

    def count(self, layer: int) -> int:
        return int(self.redis.hget(self.meta, f"n:{layer}") or 0)

    # -- the seam ----------------------------------------------------------------------------
    def has_memo(self, token: str) -> bool:
        """Did a run of the batch ``token`` already get its answers (kept to give them again)?"""
        return bool(token) and bool(self.redis.exists(keys.bloom_memo(self.job, token, self.legacy)))

    def drop_memo(self, token: str) -> None:
        """Forget a batch's answers once its URLs are queued: a redelivery is then ignored by
        the frontier before it asks the filter. Kept, memos were the largest thing in a
        200,000-page job's Redis (7.8 MB, an hour's worth of batches)."""
        if token:
            self.redis.delete(keys.bloom_memo(self.job, token, self.legacy))

    def add_many(self, urls: Sequence[str], token: str = "") -> list[str]:
        """Add the URLs; return those that were not in the filter before, in order. With a
        ``token``, calling again with the same token and URLs returns the same answer (a
        redelivered batch loses nothing)."""
        answer = self._answers(urls, token, [_hashes(u) for u in urls], None)
        return [u for i, u in enumerate(urls) if answer.get(i)]

    def claim(self, urls: Sequence[str], claimers: Sequence[str], token: str) -> list[bool]:
        """Add each URL on behalf of its claimer: True where it was not in the filter before.
        Asked again by the same claimer under the same ``token`` a URL gets the same answer (a
        redelivery, or a page parsed again); by any other claimer, it is seen."""
        hashes = [_hashes(u) for u in urls]
        answer = self._answers(urls, token, hashes, _claim_ids(hashes, claimers))
        return [bool(answer.get(i)) for i in range(len(urls))]

    def forget_claims(self, urls: Sequence[str], claimers: Sequence[str], token: str) -> None:
        """Drop the answers ``claim`` keeps for these (URL, claimer) pairs: the claimers' pages
        are stored, nothing will ask again."""
        if urls:
            self.redis.hdel(keys.bloom_memo(self.job, token, self.legacy),
                            *_claim_ids([_hashes(u) for u in urls], claimers))

    def _answers(self, urls: Sequence[str], token: str, hashes: list[tuple[int, int, int]],
                 memo_ids: list[str] | None) -> dict[int, bool]:
        """Position -> whether the URL there was new. ``memo_ids``: what each URL's answer is
        kept under in the token's memo (default: the URL's own id)."""
        if not urls:
            return {}
        ids = memo_ids or [_memo_id(h) for h in hashes]
        answer: dict[int, bool] = {}
        memo = keys.bloom_memo(self.job, token, self.legacy) if token else self.meta  # the meta: none (bloom_add.lua)
        # The add script answers from the memo first (no read of it here): URLs of a frozen
        # layer that the memo answers are handled below.
        todo = list(range(len(urls)))
        in_frozen: list[int] = []
        while todo:
            layers = self.layers()
            current = layers[-1]
            if len(layers) > 1:
                before = set(todo)
                todo = self._drop_seen_in_frozen(todo, hashes, layers[:-1], answer)
                in_frozen += sorted(before.difference(todo))
            stale = self._add_to(current, todo, hashes, ids, memo, answer)
            todo = [i for i in todo if i not in answer]
            if todo and not stale:
                self._create(current.index + 1)  # the layer is full: what is left goes to a new one
            if todo:
                self.layers(refresh=True)
        if token and in_frozen:
            # Bits a run of this same batch set, before its layer froze, read as "seen" here;
            # its memo (written with those bits, so visible now) says what it answered.
            for i, flag in zip(in_frozen, self.redis.hmget(memo, [ids[i] for i in in_frozen]), strict=True):
                if flag is not None:
                    answer[i] = flag == b"1"
        return answer

    def _present(self, todo: Sequence[int], hashes: list[tuple[int, int, int]], layers: Sequence[Layer]) -> set[int]:
        """Which of the URLs all k bits of some layer say are present (read-only)."""
        pipe = self.redis.pipeline(transaction=False)
        plan = []
        for i in todo:
            top = hashes[i][2]
            for layer in layers:
                ops: list[str | int] = []
                for offset in _offsets(hashes[i], layer):
                    ops += ["GET", "u1", offset]
                pipe.execute_command("BITFIELD_RO",  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                                      self.segment_key(layer.index, top % layer.segments), *ops)
                plan.append(i)
        return {i for i, bits in zip(plan, pipe.execute(), strict=True) if all(bits)}

    def contains_many(self, urls: Sequence[str]) -> list[bool]:
        """Whether each URL is (probably) in the filter, without adding it."""
        hashes = [_hashes(u) for u in urls]
        found = self._present(range(len(urls)), hashes, self.layers(refresh=True))
        return [i in found for i in range(len(urls))]

    def _drop_seen_in_frozen(self, todo: list[int], hashes: list[tuple[int, int, int]], frozen: list[Layer],
                             answer: dict[int, bool]) -> list[int]:
        seen = self._present(todo, hashes, frozen)
        for i in seen:
            answer[i] = False
        return [i for i in todo if i not in seen]

    def _add_to(self, layer: Layer, todo: list[int], hashes: list[tuple[int, int, int]], ids: list[str],
                memo: str, answer: dict[int, bool]) -> bool:
        by_segment: dict[int, list[int]] = defaultdict(list)
        for i in todo:
            by_segment[hashes[i][2] % layer.segments].append(i)
        if not by_segment:
            return False
        # One call for every segment the batch touches (a layer's segments share a slot).
        script_keys = [self.meta, memo]
        args: list[int | str] = [layer.index, layer.k, layer.segment_bits, layer.capacity]
        order: list[int] = []
        for seg, members in by_segment.items():
            script_keys.append(self.segment_key(layer.index, seg))
            for i in members:
                args += [len(script_keys), ids[i], *_offsets(hashes[i], layer)]
            order += members
        res = self._add(keys=script_keys, args=args)
        res = res.decode() if isinstance(res, bytes) else res
        if res == "STALE":
            return True
        for i, flag in zip(order, res, strict=True):
            if flag != "?":
                answer[i] = flag == "1"
        return False

    def reset(self) -> int:
        """Forget everything this job has seen. Returns the keys deleted."""
        found = [self.meta, *self.redis.scan_iter(keys.bloom_segment(self.job, "*", "*", self.legacy), count=1000)]
        self._layers = []
        return int(self.redis.delete(*found))

    def memory(self) -> int:
        """Bytes Redis allocates for the filter's segments."""
        total = 0
        for layer in self.layers():
            for s in range(layer.segments):
                total += int(self.redis.memory_usage(self.segment_key(layer.index, s)) or 0)
        return total
