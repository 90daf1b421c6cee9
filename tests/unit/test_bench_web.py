"""The benchmark's synthetic web: what the peer benchmark counts against must be right."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urljoin

from bench.web import WebSpec, file_of, identity, links_of, page_path, reachable, render, write


def test_pages_are_realistic_sizes_with_about_twenty_links() -> None:
    spec = WebSpec(hosts=3, pages=60, port=8080)
    sizes, counts = [], []
    for h in range(spec.hosts):
        for i in range(spec.pages):
            body = render(spec, h, i)
            sizes.append(len(body))
            counts.append(len(re.findall(rb"<a href=", body)))
            assert render(spec, h, i) == body  # deterministic
    assert min(sizes) >= 15_000 and max(sizes) <= 25_500
    assert 17 <= sum(counts) / len(counts) <= 25


def test_every_href_resolves_to_a_page_or_a_deliberate_404() -> None:
    spec = WebSpec(hosts=4, pages=100, port=8080)
    pages = {(spec.ip(h), page_path(i)) for h in range(spec.hosts) for i in range(spec.pages)}
    kinds = {"cross": 0, "fragment": 0, "tracking": 0, "relative": 0, "broken": 0}
    for h in range(spec.hosts):
        for i in range(spec.pages):
            base = spec.origin(h) + page_path(i)
            for href, _ in links_of(spec, h, i):
                url = urljoin(base, href)
                target = identity(url)
                if "missing-" in href:
                    kinds["broken"] += 1
                    assert target not in pages
                    continue
                assert target in pages, (base, href)
                kinds["cross"] += target[0] != spec.ip(h)
                kinds["fragment"] += "#" in href
                kinds["tracking"] += "utm_" in href
                kinds["relative"] += not href.startswith(("/", "http"))
    assert all(kinds.values()), kinds
    links = sum(len(links_of(spec, h, i)) for h in range(spec.hosts) for i in range(spec.pages))
    assert 0.08 <= kinds["cross"] / links <= 0.2


def test_everything_is_reachable_from_the_seeds_and_written_where_servers_look(tmp_path: Path) -> None:
    spec = WebSpec(hosts=2, pages=30, port=8080)
    assert reachable(spec) == {(spec.ip(h), page_path(i)) for h in range(2) for i in range(30)}
    info = write(spec, tmp_path)
    assert info["pages"] == 60
    assert (tmp_path / spec.ip(1) / file_of(page_path(7))).read_bytes() == render(spec, 1, 7)
    assert (tmp_path / spec.ip(0) / "index.html").exists()
    assert identity("http://127.0.1.1:8080/s1/p1.html?utm_source=x#top") == ("127.0.1.1", "/s1/p1.html")
