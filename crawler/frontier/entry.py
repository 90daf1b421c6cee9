"""The frontier's unit of work, kept compact because millions of them sit in Redis lists.

Encoded as ``"depth attempts n url referrer"``, ``n`` being the URL's length in bytes: the URL
is cut out by its length, never by a separator, so no byte in it (a space, a newline) can shift
the fields, and the referrer is the rest. The Lua scripts read the URL the same way
(``entry_url`` in ``lua``). Entries written before the length was added (``"depth attempts url
referrer"``: the third field starts with a scheme, never a digit) still decode.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    url: str
    depth: int = 0
    referrer: str = ""
    attempts: int = 0

    def encode(self) -> str:
        # Canonical URLs are ASCII, where characters and bytes agree; Lua counts bytes.
        n = len(self.url) if self.url.isascii() else len(self.url.encode())
        return f"{self.depth} {self.attempts} {n} {self.url} {self.referrer}"

    @classmethod
    def decode(cls, raw: str | bytes) -> Entry:
        text = raw.decode() if isinstance(raw, bytes) else raw
        depth, attempts, size, rest = text.split(" ", 3)
        if not size.isdigit():  # the older form: the URL is the third field
            url, _, referrer = f"{size} {rest}".partition(" ")
            return cls(url, int(depth), referrer, int(attempts))
        n = int(size)
        if rest.isascii():
            url, tail = rest[:n], rest[n:]
            whole = len(url) == n
        else:  # n counts bytes, as Lua does
            data = rest.encode()
            whole = len(data) >= n
            url, tail = data[:n].decode(), data[n:].decode()
        if not whole or tail[:1] not in (" ", ""):
            raise ValueError(f"frontier entry's URL is not {n} bytes long: {text[:80]!r}")
        return cls(url, int(depth), tail[1:], int(attempts))
