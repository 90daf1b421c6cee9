"""The frontier's unit of work, kept compact because millions of them sit in Redis lists.

Encoded as ``"depth attempts url referrer"``: canonical URLs contain no spaces, and the Lua
scripts read the URL with one pattern match.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    url: str
    depth: int = 0
    referrer: str = ""
    attempts: int = 0

    def encode(self) -> str:
        return f"{self.depth} {self.attempts} {self.url} {self.referrer}"

    @classmethod
    def decode(cls, raw: str | bytes) -> Entry:
        if isinstance(raw, bytes):
            raw = raw.decode()
        depth, attempts, url, referrer = raw.split(" ", 3)
        return cls(url, int(depth), referrer, int(attempts))
