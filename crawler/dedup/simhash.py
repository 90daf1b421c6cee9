"""64-bit simhash of a page's visible text (Charikar): similar texts get hashes a few bits
apart. Features are the text's distinct words, each counted once (for telling near-duplicates
apart a word's presence says nearly all its count would, and stop words no longer outvote the
rest): a word is a run of ASCII letters, digits, "_" and non-ASCII bytes of the UTF-8 text, at
least two bytes long, ASCII letters lowered; its feature is the first 64 bits of its
MurmurHash3_x64_128, and features are distinct by that value. Bit i of the hash is set when more
than half of the features have it set.

``simhash`` runs the C version (``_simhash.c``, built at install): in Python the split and the
set of a 100 KB page's words alone cost more than lxml's whole parse of the page, the C version
a fraction of it. Where no compiler was at hand, ``simhash_py`` answers, with the same values.
"""

from __future__ import annotations

from collections.abc import Callable

import mmh3

_simhash_c: Callable[[bytes], int] | None
try:
    # Imported from its package, not by its own name: import-linter reads .py files only and
    # would take an extension module's name for the top package's.
    from crawler.dedup import _simhash

    _simhash_c = _simhash.simhash
except ImportError:  # built without a C compiler: the Python version gives the same values
    _simhash_c = None

# bytes.translate and split find the words at C speed, instead of a regular expression and a
# lower() per word.
_WORD_BYTES = frozenset(b"0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") | frozenset(range(128, 256))
_TO_WORDS = bytes((b | 0x20 if 65 <= b <= 90 else b) if b in _WORD_BYTES else 32 for b in range(256))
_SHORT = frozenset(bytes((b,)) for b in range(256))


def simhash(text: str) -> int:
    data = text.encode("utf-8", "replace")
    return _simhash_c(data) if _simhash_c is not None else _from_words(data)


def simhash_py(text: str) -> int:
    """The pure-Python version: the same value as ``simhash``."""
    return _from_words(text.encode("utf-8", "replace"))


def _from_words(data: bytes) -> int:
    words = set(data.translate(_TO_WORDS).split()) - _SHORT
    # Each distinct feature's 64 bits, little-endian, end to end.
    hashes = b"".join({mmh3.hash_bytes(w)[:8] for w in words})
    total = len(hashes) // 8
    if not total:
        return 0
    # Each of the 64 bit columns counted with one AND and int.bit_count over all features at once.
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
