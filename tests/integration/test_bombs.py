"""Compression bombs cost a fetching process about ``max_body`` of memory, not their inflated
size: measured as the peak resident set of a fresh process that fetches them with the crawler's
own fetch code from a real server on loopback; and ordinary compressed pages still decode to the
very bytes that were compressed."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterator

import brotli
import pytest

from crawler.fetch import FetchConfig, fetch_batch
from crawler.testweb import TestWeb
from tests.conftest import ROOT, TEST_NETWORKS
from tests.web import handlers as hw

MB = 1_000_000
MAX_BODY = 5 * MB

# Fetches each URL in turn and prints the peak RSS (VmHWM) before the first and after the last:
# the baseline already holds the interpreter, the crawler, the client and one small page.
CHILD = """
import json, sys
from crawler.fetch import FetchConfig, fetch_batch

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

cfg = FetchConfig(user_agent="t", max_body=int(sys.argv[1]), allow_networks=tuple(sys.argv[2].split(",")),
                  read_timeout=20, deadline=60)
fetch_batch([sys.argv[3]], cfg)
base = peak()
results = []
for url in sys.argv[4:]:
    (r,) = fetch_batch([url], cfg)
    results.append((r.error, len(r.body)))
    del r
print(json.dumps({"base": base, "peak": peak(), "results": results}))
"""


def zeros_compressed(compressor: Callable[[bytes], bytes], finish: Callable[[], bytes], mib: int) -> bytes:
    block = bytes(1 << 20)  # streamed one MiB at a time: the test itself never holds the inflated bomb
    return b"".join(compressor(block) for _ in range(mib)) + finish()


@pytest.fixture(scope="module")
def bombs() -> Iterator[dict[str, bytes]]:
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    br = brotli.Compressor(quality=1)
    yield {"gzip": zeros_compressed(gz.compress, gz.flush, 256),  # ~250 KB -> 256 MiB
           "br": zeros_compressed(br.process, br.finish, 1024)}  # ~190 KB -> 1 GiB


def test_bombs_stop_at_the_cap_within_a_small_multiple_of_it(make_web: Callable[..., TestWeb],
                                                             bombs: dict[str, bytes]) -> None:
    web = make_web(1, 2)
    for name, data in bombs.items():
        web.route(0, f"/{name}-bomb", hw.body(data, headers={"Content-Encoding": name}))
    urls = [web.url(0, "/gzip-bomb"), web.url(0, "/br-bomb")]
    child = subprocess.run([sys.executable, "-c", CHILD, str(MAX_BODY), TEST_NETWORKS, web.url(0, "/"), *urls],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]
    got = json.loads(child.stdout)
    grew = got["peak"] - got["base"]
    print(f"bombs: baseline {got['base'] / MB:.1f} MB, peak {got['peak'] / MB:.1f} MB, grew {grew / MB:.1f} MB "
          f"(max_body {MAX_BODY / MB:.0f} MB); results {got['results']}")
    assert got["results"] == [["too_large", MAX_BODY], ["too_large", MAX_BODY]]
    assert grew < 4 * MAX_BODY


def test_compressed_pages_decode_to_the_same_bytes(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    page = b"<html><title>t</title>" + b"".join(b"<p>line %d</p>" % i for i in range(30_000)) + b"</html>"
    raw_deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    variants = {
        "gzip": gzip.compress(page), "deflate": zlib.compress(page),
        "deflate-raw": raw_deflate.compress(page) + raw_deflate.flush(), "br": brotli.compress(page),
        "gzip, br": brotli.compress(gzip.compress(page)), "identity": page,
    }
    for i, (enc, data) in enumerate(variants.items()):
        web.route(0, f"/v{i}", hw.body(data, headers={"Content-Encoding": enc.replace("-raw", "")}))
    web.route(0, "/zstd", hw.body(b"(\xb5/\xfd" + b"x" * 100, headers={"Content-Encoding": "zstd"}))
    web.route(0, "/corrupt", hw.body(b"\x1f\x8b\x08\x00" + b"\xff" * 100, headers={"Content-Encoding": "gzip"}))
    cfg = FetchConfig(user_agent="t", allow_networks=tuple(TEST_NETWORKS.split(",")), deadline=10)
    got = fetch_batch([web.url(0, f"/v{i}") for i in range(len(variants))] + [web.url(0, "/zstd"),
                                                                             web.url(0, "/corrupt")], cfg)
    for enc, res in zip(variants, got, strict=False):
        assert (res.error, res.status, res.body == page) == (None, 200, True), enc
        assert res.header("content-encoding") is None  # the body is stored decoded
    assert ("Accept-Encoding", "gzip, deflate, br") in got[0].request_headers
    zstd, corrupt = got[-2:]
    assert (zstd.error, zstd.status, zstd.body) == ("unsupported_encoding", 200, b"")
    assert (corrupt.error, corrupt.status) == ("decode", 200)


def test_compressed_input_that_inflates_to_nothing_stops_too(make_web: Callable[..., TestWeb]) -> None:
    web = make_web(1, 2)
    empty_members = gzip.compress(b"") * 20_000  # 400 KB of valid gzip that decodes to no byte at all
    web.route(0, "/empty", hw.body(empty_members, headers={"Content-Encoding": "gzip"}))
    cfg = FetchConfig(user_agent="t", allow_networks=tuple(TEST_NETWORKS.split(",")), max_body=50_000, deadline=10)
    (res,) = fetch_batch([web.url(0, "/empty")], cfg)
    assert (res.error, res.body) == ("too_large", b"")
