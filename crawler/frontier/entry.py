"""The frontier's unit of work, kept compact because millions of them sit in Redis lists.

Encoded as ``"depth attempts n url referrer"``, ``n`` being the URL's length in bytes: the URL
is cut out by its length, never by a separator, so no byte in it (a space, a newline) can shift
the fields, and the referrer is the rest. The Lua scripts read the URL the same way
(``entry_url`` in ``lua``). Entries written before the length was added (``"depth attempts url
referrer"``: the third field starts with a scheme, never a digit) still decode.

A request with more than a URL to it (``crawler.spiders.request``: a callback, data, a method or
a body) carries its spec, compact JSON, after the referrer: ``"... referrer\x1espec"``, or
``"\x1d"`` instead of ``"\x1e"`` for a request with a priority above 0, which the admit script
puts at the head of its host's queue instead of the tail. JSON escapes every control character
and canonical URLs have none, so neither separator can occur in a referrer or a spec. The spec
travels with the entry wherever the entry goes: host queues, leases, retries, the store's
frontier table.
"""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    url: str
    depth: int = 0
    referrer: str = ""
    attempts: int = 0
    spec: str = ""  # the request's spec (``crawler.spiders.request.to_spec``); "" for a plain link
    urgent: bool = False  # priority > 0: to the head of its host's queue

    def encode(self) -> str:
        # Canonical URLs are ASCII, where characters and bytes agree; Lua counts bytes.
        n = len(self.url) if self.url.isascii() else len(self.url.encode())
        if self.spec:
            sep = URGENT if self.urgent else SPEC
            return f"{self.depth} {self.attempts} {n} {self.url} {self.referrer}{sep}{self.spec}"
        return f"{self.depth} {self.attempts} {n} {self.url} {self.referrer}"

    @classmethod
    def decode(cls, raw: str | bytes) -> Entry:
        text = raw.decode() if isinstance(raw, bytes) else raw
        depth, attempts, size, rest = text.split(" ", 3)
        if not size.isdigit():  # the older form: the URL is the third field
            url, _, referrer = f"{size} {rest}".partition(" ")
            return _with_spec(cls(url, int(depth), referrer, int(attempts)))
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
        return _with_spec(cls(url, int(depth), tail[1:], int(attempts)))


SPEC = "\x1e"
URGENT = "\x1d"


def _with_spec(e: Entry) -> Entry:
    r = e.referrer
    if SPEC in r:
        ref, _, spec = r.partition(SPEC)
        return e._replace(referrer=ref, spec=spec)
    if URGENT in r:
        ref, _, spec = r.partition(URGENT)
        return e._replace(referrer=ref, spec=spec, urgent=True)
    return e
