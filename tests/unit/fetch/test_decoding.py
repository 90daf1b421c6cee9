"""Content-Encoding decoding in bounded steps: every encoding and stack round-trips, however the
input is cut, and no single step returns more than about what was asked."""

from __future__ import annotations

import gzip
import random
import zlib

import brotli
import pytest

from crawler import errors
from crawler.fetch import decoding

TEXT = b"".join(b"<p>%d %s</p>" % (i, random.Random(i).randbytes(8).hex().encode()) for i in range(20_000))


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def decode_all(encodings: list[str], data: bytes, piece: int, step: int) -> tuple[bytes, int]:
    """Feeds ``piece`` bytes at a time, reads ``step`` at a time; returns output and the largest step."""
    d = decoding.decoder(encodings)
    out: list[bytes] = []
    largest = 0
    for i in range(0, len(data), piece):
        d.feed(data[i:i + piece])
        while chunk := d.read(step):
            largest = max(largest, len(chunk))
            out.append(chunk)
    return b"".join(out), largest


ENCODED = {
    "gzip": gzip.compress(TEXT),
    "x-gzip": gzip.compress(TEXT),
    "deflate": zlib.compress(TEXT),
    "br": brotli.compress(TEXT),
    "identity": TEXT,
}


@pytest.mark.parametrize("name", list(ENCODED))
@pytest.mark.parametrize("piece", [1, 1000, 1 << 20])
def test_each_encoding_round_trips_however_cut(name: str, piece: int) -> None:
    data = ENCODED[name][:5000] if piece == 1 else ENCODED[name]  # byte by byte is slow: a prefix
    expect = TEXT if piece != 1 else decode_all([name], data, len(data), 1 << 30)[0]
    got, largest = decode_all([name], data, piece, 4096)
    assert got == expect and len(got) > 0
    assert largest <= (4096 if name != "br" else 3 * 32768)  # brotli hands out whole 32 KiB blocks


def test_raw_deflate_and_gzip_labelled_zlib_are_accepted() -> None:
    assert decode_all(["deflate"], raw_deflate(TEXT), 7, 4096)[0] == TEXT
    assert decode_all(["gzip"], zlib.compress(TEXT), 1 << 20, 4096)[0] == TEXT


def test_stacked_and_repeated_headers_are_undone_in_reverse() -> None:
    both = brotli.compress(gzip.compress(TEXT))  # gzip applied first: "gzip, br"
    assert decode_all(["gzip", "br"], both, 999, 4096)[0] == TEXT
    assert decode_all(["GZIP ", " identity", "br"], both, 1 << 20, 65536)[0] == TEXT
    assert decode_all(["deflate", "gzip"], gzip.compress(raw_deflate(TEXT[:20_000])), 333, 7)[0] == TEXT[:20_000]


def test_gzip_members_in_turn_and_trailing_junk_ignored() -> None:
    two = gzip.compress(TEXT[:1000]) + gzip.compress(TEXT[1000:2000])
    assert decode_all(["gzip"], two, 1, 100)[0] == TEXT[:2000]
    assert decode_all(["gzip"], gzip.compress(TEXT[:1000]) + b"\0junk", 1 << 20, 100)[0] == TEXT[:1000]


def test_empty_and_truncated_bodies_give_what_there_is() -> None:
    assert decode_all(["gzip"], b"", 1, 100)[0] == b""
    assert decode_all(["br"], b"", 1, 100)[0] == b""
    cut = gzip.compress(TEXT)[: len(gzip.compress(TEXT)) // 2]
    got = decode_all(["gzip"], cut, 4096, 4096)[0]
    assert 0 < len(got) < len(TEXT) and TEXT.startswith(got)


@pytest.mark.parametrize("name,data", [("gzip", b"\x1f\x8b\x08\x00" + b"\xff" * 100), ("br", b"\xff" * 100),
                                       ("deflate", b"\x78\x9c" + b"\xff" * 100)])
def test_corrupt_data_is_a_decode_error(name: str, data: bytes) -> None:
    with pytest.raises(errors.Decode):
        decode_all([name], data, 10, 4096)


@pytest.mark.parametrize("encodings", [["zstd"], ["gzip", "compress"], ["gzip"] * (decoding.MAX_LAYERS + 1)])
def test_unknown_or_too_deep_encodings_are_named(encodings: list[str]) -> None:
    with pytest.raises(errors.UnsupportedEncoding) as info:
        decoding.decoder(encodings)
    assert "\n" not in str(info.value) and len(str(info.value)) < 120


@pytest.mark.parametrize("name", ["gzip", "br"])
def test_a_bomb_comes_out_in_steps_no_larger_than_asked(name: str) -> None:
    zeros = bytes(1 << 20)
    if name == "gzip":
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        bomb = b"".join(c.compress(zeros) for _ in range(64)) + c.flush()
    else:
        b = brotli.Compressor(quality=1)
        bomb = b"".join(b.process(zeros) for _ in range(64)) + b.finish()
    d = decoding.decoder([name])
    d.feed(bomb)  # 64 MiB inflated, fed whole: each read must still be small
    total = 0
    for _ in range(20):
        chunk = d.read(decoding.STEP)
        assert 0 < len(chunk) <= 2 * decoding.STEP
        total += len(chunk)
    assert total < 40 * decoding.STEP
