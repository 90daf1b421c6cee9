"""Content-Encoding decoding in bounded steps, so a compression bomb costs no more memory than
the bytes the caller decides to keep.

httpx decodes each network chunk whole before its caller sees a byte: 317 bytes of brotli grew
to 200 MiB in one step, far past any body cap checked afterwards. Here every decompressor is
asked for a bounded amount of output (zlib's ``max_length``, brotli's ``output_buffer_limit``),
what it could not yet decode waits as compressed input, and stacked encodings
(``Content-Encoding: gzip, br``) pull from one another in bounded steps.

``decoder(encodings)`` is the seam: ``feed(raw)`` gives it bytes as they come off the wire,
``read(n)`` returns the next decoded bytes (about ``n`` at most; brotli rounds up to its next
output block, at most ~2.5x a request) and ``b""`` once it needs more input. Pure: no I/O.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Protocol

import brotli

from crawler import errors

# What we decode, and so what we ask for: httpx would otherwise advertise whatever its optional
# packages decode (zstd once `zstandard` is installed), which this module would then refuse.
ACCEPT_ENCODING = "gzip, deflate, br"
# More layers than this are no real server's doing; each costs a decompressor's window.
MAX_LAYERS = 3
# Output asked of one inner layer at a time.
STEP = 64 * 1024

_GZIP_MAGIC = b"\x1f\x8b"


class Decoder(Protocol):
    def feed(self, data: bytes) -> None:
        """More encoded input; call only after ``read`` has returned ``b""``."""

    def read(self, n: int) -> bytes:
        """Up to about ``n`` (>= 1) decoded bytes; ``b""`` when more input is needed."""


class _Identity:
    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> None:
        self._tail = self._tail + data if self._tail else data

    def read(self, n: int) -> bytes:
        out, self._tail = (self._tail, b"") if len(self._tail) <= n else (self._tail[:n], self._tail[n:])
        return out


class _Zlib:
    """gzip and deflate. The first two bytes choose: a gzip or zlib header (wbits 47 detects
    either), else raw deflate, which some servers send as ``deflate``. Concatenated gzip members
    are decoded in turn; other bytes after the end are ignored, as zlib and httpx do."""

    def __init__(self) -> None:
        self._d: zlib._Decompress | None = None
        self._tail = b""
        self._first = True
        self._done = False

    def feed(self, data: bytes) -> None:
        if not self._done:
            self._tail = self._tail + data if self._tail else data

    def _start(self) -> bool:
        if len(self._tail) < 2:
            return False  # a header split across network reads: wait for its second byte
        if self._first:
            self._first = False
            header_ok = self._tail[:2] == _GZIP_MAGIC or _is_zlib_header(self._tail)
            self._d = zlib.decompressobj(47 if header_ok else -zlib.MAX_WBITS)
        elif self._tail[:2] == _GZIP_MAGIC:
            self._d = zlib.decompressobj(47)
        else:
            self._done = True
            self._tail = b""
            return False
        return True

    def read(self, n: int) -> bytes:
        while not self._done:
            if self._d is None and not self._start():
                return b""
            d = self._d
            assert d is not None
            data, self._tail = self._tail, b""
            try:
                # With input consumed, an empty call still flushes output zlib held back when
                # the last call reached max_length.
                out = d.decompress(data, n)
            except zlib.error as exc:
                raise errors.Decode(f"corrupt deflate data: {exc}") from exc
            self._tail = d.unconsumed_tail
            if d.eof:
                self._tail = d.unused_data + self._tail
                self._d = None
            if out:
                return out
            if not self._tail:
                return b""
        return b""


def _is_zlib_header(b: bytes) -> bool:
    return b[0] & 0x0F == 8 and (b[0] << 8 | b[1]) % 31 == 0


class _Brotli:
    def __init__(self) -> None:
        self._d = brotli.Decompressor()
        self._tail = b""

    def feed(self, data: bytes) -> None:
        if not self._d.is_finished():  # bytes after the end are ignored, as for gzip
            self._tail = self._tail + data if self._tail else data

    def read(self, n: int) -> bytes:
        d = self._d
        while not d.is_finished():
            # The decoder keeps input it had no output room for, and takes new input only once
            # that is used up: drain it first with empty calls.
            out = self._process(b"", n)
            if out:
                return out
            if not self._tail:
                return b""
            data, self._tail = self._tail, b""
            out = self._process(data, n)
            if out:
                return out
        return b""

    def _process(self, data: bytes, n: int) -> bytes:
        try:
            out: bytes = self._d.process(data, output_buffer_limit=n)  # brotli is untyped
            return out
        except brotli.error as exc:
            raise errors.Decode(f"corrupt brotli data: {exc}") from exc


class _Stack:
    """Layers in the order they are undone: the wire's outermost encoding first."""

    def __init__(self, layers: list[Decoder]) -> None:
        self._layers = layers

    def feed(self, data: bytes) -> None:
        self._layers[0].feed(data)

    def read(self, n: int) -> bytes:
        return self._read(len(self._layers) - 1, n)

    def _read(self, i: int, n: int) -> bytes:
        layer = self._layers[i]
        while True:
            out = layer.read(n)
            if out or i == 0:
                return out
            more = self._read(i - 1, STEP)
            if not more:
                return b""
            layer.feed(more)


_CODECS: dict[str, type[_Zlib] | type[_Brotli]] = {"gzip": _Zlib, "x-gzip": _Zlib, "deflate": _Zlib, "br": _Brotli}


def decoder(encodings: Iterable[str]) -> Decoder:
    """A decoder for a response's Content-Encoding values, in the order the server applied them
    (header order; several header lines count in turn). Raises ``UnsupportedEncoding`` naming an
    encoding we do not decode, or too many layers."""
    names = [e.strip().lower() for e in encodings]
    names = [e for e in names if e and e != "identity"]
    unknown = [e for e in names if e not in _CODECS]
    if unknown:
        raise errors.UnsupportedEncoding(f"Content-Encoding {unknown[0][:40]!r} is not one of {ACCEPT_ENCODING}")
    if len(names) > MAX_LAYERS:
        raise errors.UnsupportedEncoding(f"{len(names)} stacked Content-Encodings (at most {MAX_LAYERS})")
    if not names:
        return _Identity()
    if len(names) == 1:
        return _CODECS[names[0]]()
    return _Stack([_CODECS[e]() for e in reversed(names)])
