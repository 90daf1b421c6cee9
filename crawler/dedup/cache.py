"""The local weighted cache in front of Redis: URLs seen again and again (navigation links) are
answered in-process, weighted by how often they repeat.

Navigation links repeat on every page of a site, so most link occurrences are URLs this process
has already seen. An access list holds recently seen URLs; one that is seen again moves to the
cache list, which keeps URLs by a weight that grows with each repeat and fades with age. A hit
skips the Redis round trip. The cache only ever answers "seen": a miss asks Redis, so it can
never make a URL look new. Memory is bounded by ``size`` entries.
"""

from __future__ import annotations

import random
from collections import OrderedDict

HALF_LIFE = 50_000  # lookups after which an unused weight counts half
SAMPLE = 5  # eviction looks at this many random cache entries and drops the lightest


class SeenCache:
    def __init__(self, size: int, access_share: float = 0.5, seed: int | None = None) -> None:
        self.access_size = max(1, int(size * access_share))
        self.cache_size = max(1, size - self.access_size)
        self.access: OrderedDict[str, int] = OrderedDict()
        self.weights: dict[str, tuple[float, int]] = {}
        self._keys: list[str] = []  # the cache list's keys, for O(1) random sampling
        self._pos: dict[str, int] = {}
        self.tick = 0
        self.lookups = 0
        self.hits = 0
        self._rng = random.Random(seed)

    def _weight(self, key: str) -> float:
        w, t = self.weights[key]
        return float(w * 0.5 ** ((self.tick - t) / HALF_LIFE))

    def seen(self, key: str) -> bool:
        """True if this process knows the URL was seen; False means: ask Redis."""
        self.tick += 1
        self.lookups += 1
        if key in self.weights:
            self.weights[key] = (self._weight(key) + 1.0, self.tick)
            self.hits += 1
            return True
        count = self.access.pop(key, 0)
        if not count:
            return False
        self.hits += 1
        self._promote(key, float(count + 1))
        return True

    def add(self, key: str) -> None:
        """Redis has answered for this URL: it is seen from now on."""
        if key in self.weights:
            return
        self.access[key] = self.access.get(key, 0) + 1
        self.access.move_to_end(key)
        while len(self.access) > self.access_size:
            self.access.popitem(last=False)

    def _promote(self, key: str, weight: float) -> None:
        if len(self._keys) >= self.cache_size:
            sample = [self._keys[self._rng.randrange(len(self._keys))] for _ in range(SAMPLE)]
            victim = min(sample, key=self._weight)
            if self._weight(victim) > weight:
                self.add(key)  # not heavy enough yet: back to the access list
                return
            self._remove(victim)
        self.weights[key] = (weight, self.tick)
        self._pos[key] = len(self._keys)
        self._keys.append(key)

    def _remove(self, key: str) -> None:
        i = self._pos.pop(key)
        last = self._keys.pop()
        if last != key:
            self._keys[i] = last
            self._pos[last] = i
        del self.weights[key]

    def __len__(self) -> int:
        return len(self.access) + len(self.weights)
