"""One bounded cache for every per-process memo: least recently used out first, bounded by a
count of entries and, when given a size function, by bytes.

A worker lives for days and serves many jobs; any dict keyed by URL, origin, job or policy that
only ever grows is a slow leak a hostile site or a busy tenant can speed up. Values that hold
resources (HTTP clients, store connections, WARC files) are handed to ``on_evict`` when they
leave, so they are closed rather than dropped.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# What a dict slot, the ordering links and two small Python objects cost beyond the payload
# (measured with tracemalloc on short str keys and values: 180-230 bytes per entry).
ENTRY_OVERHEAD = 200


class LRU(Generic[K, V]):
    """At most ``max_items`` entries and, with ``sizeof``, at most ``max_bytes`` of them by
    that measure (0: no byte bound). A value larger than ``max_bytes`` on its own is not kept.
    ``on_evict(key, value)`` runs, outside the lock, for each entry pushed out by the bounds or
    replaced by another value; not for ``pop`` or ``clear``, whose callers get the values.
    Safe to share between threads (the worker's dispatcher thread and its tasks)."""

    def __init__(self, max_items: int, max_bytes: int = 0, sizeof: Callable[[K, V], int] | None = None,
                 on_evict: Callable[[K, V], None] | None = None) -> None:
        if max_items < 1 or max_bytes < 0:
            raise ValueError(f"an LRU needs max_items >= 1 and max_bytes >= 0, got {max_items}, {max_bytes}")
        self.max_items = max_items
        self.max_bytes = max_bytes if sizeof is not None else 0
        self._sizeof = sizeof
        self._on_evict = on_evict
        self._data: OrderedDict[K, V] = OrderedDict()
        self._sizes: dict[K, int] = {}
        self.nbytes = 0
        self.evictions = 0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        # No lock on the hit path (it runs per link): each dict call is atomic under the GIL,
        # and a key evicted between the two by another thread is simply not refreshed.
        value = self._data.get(key)
        if value is not None:
            try:
                self._data.move_to_end(key)
            except KeyError:
                pass
        return value

    def put(self, key: K, value: V) -> None:
        size = self._sizeof(key, value) if self._sizeof is not None else 0
        out: list[tuple[K, V]] = []
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self.nbytes -= self._sizes.pop(key, 0)
                if old is not value:
                    out.append((key, old))
            if not self.max_bytes or size <= self.max_bytes:
                self._data[key] = value
                if self._sizeof is not None:
                    self._sizes[key] = size
                    self.nbytes += size
            while len(self._data) > self.max_items or (self.max_bytes and self.nbytes > self.max_bytes):
                k, v = self._data.popitem(last=False)
                self.nbytes -= self._sizes.pop(k, 0)
                self.evictions += 1
                out.append((k, v))
        if self._on_evict is not None:
            for k, v in out:
                self._on_evict(k, v)

    def pop(self, key: K) -> V | None:
        with self._lock:
            self.nbytes -= self._sizes.pop(key, 0)
            return self._data.pop(key, None)

    def clear(self) -> list[V]:
        """Empty the cache; returns what it held, oldest first."""
        with self._lock:
            values = list(self._data.values())
            self._data.clear()
            self._sizes.clear()
            self.nbytes = 0
            return values

    def values(self) -> list[V]:
        with self._lock:
            return list(self._data.values())

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)


def str_size(key: str, value: str) -> int:
    """Bytes a str -> str entry holds, near enough (ASCII: one byte a character)."""
    return len(key) + len(value) + ENTRY_OVERHEAD
