"""The benchmark's asyncio server: some addresses may answer late, as slow servers of a real web do."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from bench.polite import PoliteSpec, slow_hosts
from bench.server import free_port, make_server
from bench.web import file_of

IPS = ["127.0.1.31", "127.0.1.32"]


def test_a_slow_address_answers_that_much_later_and_the_others_at_once(tmp_path: Path) -> None:
    for ip in IPS:
        (tmp_path / ip).mkdir()
        (tmp_path / ip / file_of("/")).write_text(f"<html>{ip}</html>")
    server = make_server("asyncio", tmp_path, IPS, free_port(IPS), slow=(0.6, [IPS[1]])).start()
    try:
        took = {}
        with httpx.Client(trust_env=False) as client:
            for ip in IPS:
                t0 = time.monotonic()
                got = client.get(f"http://{ip}:{server.port}/")
                took[ip] = time.monotonic() - t0
                assert got.status_code == 200 and ip in got.text
        assert took[IPS[0]] < 0.4 <= 0.6 <= took[IPS[1]], took
    finally:
        server.stop()
        server.close()


def test_slow_hosts_are_spread_over_the_web_and_never_the_seed() -> None:
    spec = PoliteSpec(hosts=100, pages=2)
    picked = slow_hosts(spec, 10)
    assert len(picked) == 10 and spec.ip(0) not in picked
    assert picked == sorted({spec.ip(5 + 10 * k) for k in range(10)})
    assert slow_hosts(PoliteSpec(hosts=3, pages=2), 5) == [spec.ip(1), spec.ip(2)]
