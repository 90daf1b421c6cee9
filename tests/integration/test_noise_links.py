"""``--noise-links skip`` end to end: a site of articles wrapped in navigation, a tag cloud, a
share bar and a footer, crawled twice. Following the noise stores its target pages; skipping it
stores every article (no content link lost) and counts what it skipped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from crawler.config.settings import Settings
from crawler.embedded import crawl
from crawler.store import open_store
from crawler.testweb import TestWeb
from crawler.testweb.noisy import NOISE_PATHS, content_reachable, noisy_page
from tests.integration.test_crawl import cli, no_private_redis_env

ARTICLES = 30
# Measured: every noise link on these pages is skipped (share 1.0); the floor leaves margin for
# a change of the block rule's thresholds.
SKIPPED_FLOOR = 0.9


def _stored(out: Path) -> dict[str, dict[str, object]]:
    store = open_store(f"sqlite:///{out / 'crawl.db'}")
    try:
        return {str(r["url"]): r for r in store.pages()}
    finally:
        store.close()


def test_skipping_noise_links_stores_every_article_and_none_of_the_noise(make_web: Callable[..., TestWeb],
                                                                          tmp_path: Path) -> None:
    web = make_web(1, 1, noisy=ARTICLES)
    seed = web.url(0, "/p/0.html")
    articles = {web.url(0, f"/p/{n}.html") for n in content_reachable(0, ARTICLES)}
    noise_pages = {web.url(0, p) for p in NOISE_PATHS}
    assert len(articles) > ARTICLES // 2  # the test needs content links to follow

    follow = tmp_path / "follow"
    res = cli("crawl", seed, "--out", str(follow), "--workers", "1", "--noise-links", "follow",
              env=no_private_redis_env())
    assert res.returncode == 0, res.stderr[-3000:]
    followed = {u for u, r in _stored(follow).items() if r["status"] == 200}
    assert articles <= followed and noise_pages <= followed  # the default follows the noise

    skip = tmp_path / "skip"
    # in process, for the counters (the command's private Redis goes with it)
    outcome = crawl(Settings.from_env(noise_links="skip", workers=1), [seed], str(skip))
    assert outcome.status["status"] == "done", outcome.status
    rows = _stored(skip)
    stored = {u for u, r in rows.items() if r["status"] == 200}
    assert articles <= stored, "a content link was skipped"
    noise_links = sum(len(noisy_page(int(u.rsplit("/", 1)[1][:-5]), pages=ARTICLES).noise_links)
                      for u in stored if u in articles)
    c = outcome.status["counters"]
    skipped = c.get("links_noise_block", 0) + c.get("links_noise_pattern", 0)
    share = skipped / noise_links
    print(f"noise links skipped: {skipped}/{noise_links} = {share:.3f} "
          f"(block {c.get('links_noise_block', 0)}, pattern {c.get('links_noise_pattern', 0)}); "
          f"noise pages stored {len(stored & noise_pages)}/{len(noise_pages)}")
    assert share >= SKIPPED_FLOOR
    assert skipped <= noise_links  # counted once per page and link, and never a content link
    if skipped == noise_links:
        assert not stored & noise_pages
    # the stored outlinks stay complete: the noise is there, just not followed
    page0 = rows[seed]
    assert any(web.url(0, "/tag/") in str(link) for link in page0["outlinks"])  # type: ignore[attr-defined]
