"""64-bit simhash of a page's visible text (Charikar): similar texts get hashes a few bits
apart. Features are the text's distinct words, each counted once: counting
them (a Counter per page) cost more than lxml's whole parse, and for telling near-duplicates
apart a word's presence says nearly all its count would (stop words no longer outvote the
rest, which only helps).

The per-bit sums are counted in C: the hashes laid end to end as bytes, each byte column read
as one integer, each bit counted with one AND and ``int.bit_count``, which keeps this near the
cost of lxml's parse.
"""

from __future__ import annotations

import mmh3

# Words are runs of ASCII letters, digits, "_" and any non-ASCII byte of the UTF-8 text, at least
# two bytes long, ASCII letters lowered: one bytes.translate and split, at C speed, instead of a
# regular expression and a lower() per word (a third of the cost of a page's near-duplicate check).
_WORD_BYTES = frozenset(b"0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") | frozenset(range(128, 256))
_TO_WORDS = bytes((b | 0x20 if 65 <= b <= 90 else b) if b in _WORD_BYTES else 32 for b in range(256))


def simhash(text: str) -> int:
    words = set(text.encode("utf-8", "replace").translate(_TO_WORDS).split())
    # Each distinct word's 64-bit hash, little-endian, end to end.
    hashes = b"".join([mmh3.hash_bytes(w)[:8] for w in words if len(w) > 1])
    total = len(hashes) // 8
    if not total:
        return 0
    masks = [int.from_bytes(bytes((1 << k,)) * total, "little") for k in range(8)]
    out = 0
    for j in range(8):
        column = int.from_bytes(hashes[j::8], "little")  # byte j of every hash, as one integer
        for k in range(8):
            if 2 * (column & masks[k]).bit_count() > total:
                out |= 1 << (8 * j + k)
    return out


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def bands(value: int, count: int) -> list[int]:
    """``count`` slices of the 64 bits: two hashes within ``count - 1`` bits of each other agree
    exactly on at least one slice."""
    width = 64 // count
    return [(value >> (i * width)) & ((1 << width) - 1) for i in range(count)]
