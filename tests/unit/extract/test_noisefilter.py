"""The parse stage's noise-link filter over parsed pages, and the job setting that turns it on."""

from __future__ import annotations

import pytest

from crawler.config.settings import SettingError, Settings
from crawler.extract.noise import UrlClusters
from crawler.extract.noisefilter import NoiseCounts, filter_noise, new_cluster_cache
from crawler.lru import LRU
from crawler.parse import parse_html
from crawler.testweb.noisy import noisy_page
from crawler.urls import canonicalize

BASE = "http://127.0.1.9"


def _run(n: int, cache: LRU[tuple[str, str], UrlClusters] | None = None,
         body: bytes | None = None) -> tuple[list[str], list[str], NoiseCounts]:
    page = noisy_page(n, pages=50)
    parsed = parse_html(f"{BASE}/p/{n}.html", body if body is not None else page.html, "text/html")
    outlinks = [canonicalize(u) for u in parsed.links]
    kept, counts = filter_noise(parsed, outlinks, "job", cache if cache is not None else new_cluster_cache())
    return outlinks, kept, counts


def test_noisy_articles_keep_every_content_link_and_lose_every_noise_link() -> None:
    cache = new_cluster_cache()
    for n in range(10):
        page = noisy_page(n, pages=50)
        outlinks, kept, counts = _run(n, cache)
        content = {canonicalize(BASE + h) for h in page.content_links}
        noise = {canonicalize(BASE + h) for h in page.noise_links}
        assert set(kept) == content
        assert counts.block + counts.pattern == len(set(outlinks) & noise) == len(outlinks) - len(kept)


def test_a_link_also_cited_in_the_text_is_not_block_noise_but_its_known_noise_pattern_still_counts() -> None:
    page = noisy_page(1, pages=50)
    tag = next(h for h in page.noise_links if h.startswith("/tag/"))
    # the article cites one of its tag pages inline: the cloud's copy does not make it block noise,
    # but the page's own tag cloud has made /tag/* a known-noise cluster
    body = page.html.replace(b"for more.", f'for more, and <a href="{tag}">this</a>.'.encode(), 1)
    outlinks, kept, counts = _run(1, body=body)
    _outlinks, _kept, plain = _run(1)
    assert BASE + tag in outlinks and BASE + tag not in kept
    assert (counts.block, counts.pattern) == (plain.block - 1, plain.pattern + 1)


def test_url_clusters_learn_per_job_and_host_and_skip_a_known_noise_pattern_outside_a_block() -> None:
    cache = new_cluster_cache()
    _run(0, cache)
    _run(2, cache)
    assert cache.get(("job", "127.0.1.9")) is not None  # one state per (job, host)
    # an unseen tag linked from content-like text in a page that is otherwise plain prose
    prose = " ".join(["word"] * 200)
    body = f'<html><body><div><p>{prose} <a href="/tag/fortran">fortran</a> {prose}</p></div></body></html>'.encode()
    parsed = parse_html(f"{BASE}/x.html", body, "text/html")
    outlinks = [canonicalize(u) for u in parsed.links]
    kept, counts = filter_noise(parsed, outlinks, "job", cache)
    assert kept == [] and (counts.block, counts.pattern) == (0, 1)
    # another job has its own clusters: the same link is followed there
    kept, counts = filter_noise(parsed, outlinks, "other", cache)
    assert kept == outlinks and counts.pattern == 0


def test_a_page_without_a_tree_or_links_keeps_what_it_has() -> None:
    parsed = parse_html(f"{BASE}/e", b"", "text/html")
    assert filter_noise(parsed, [], "job", new_cluster_cache())[0] == []


def test_noise_links_setting_is_follow_or_skip() -> None:
    assert Settings.from_env().noise_links == "follow"
    assert Settings.from_env(noise_links="skip").noise_links == "skip"
    with pytest.raises(SettingError, match="noise_links: must be follow or skip"):
        Settings.from_env(noise_links="drop")
