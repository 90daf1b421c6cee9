"""64-bit simhash of a page's visible text (Charikar): similar texts get hashes a few bits
apart. Features are words weighted by their count.

The per-bit sums are taken from byte histograms (8 counters per word instead of 64, then a
fixed 8 x 8 x 128 reduction), which keeps this off the top of a parse profile.
"""

from __future__ import annotations

import re
from collections import Counter

import mmh3

_WORD = re.compile(r"\w{2,}", re.UNICODE)
_MEMBERS = [[b for b in range(256) if b >> k & 1] for k in range(8)]


def simhash(text: str) -> int:
    counts = Counter(w.lower() for w in _WORD.findall(text))
    if not counts:
        return 0
    hist = [[0] * 256 for _ in range(8)]
    total = 0
    for word, weight in counts.items():
        h = mmh3.hash64(word, signed=False)[0]
        total += weight
        for j in range(8):
            hist[j][(h >> (8 * j)) & 0xFF] += weight
    out = 0
    for j in range(8):
        get = hist[j].__getitem__
        for k in range(8):
            if 2 * sum(map(get, _MEMBERS[k])) > total:
                out |= 1 << (8 * j + k)
    return out


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def bands(value: int, count: int) -> list[int]:
    """``count`` slices of the 64 bits: two hashes within ``count - 1`` bits of each other agree
    exactly on at least one slice."""
    width = 64 // count
    return [(value >> (i * width)) & ((1 << width) - 1) for i in range(count)]
