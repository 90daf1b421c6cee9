"""Scope controls end to end on the loopback test web: rel=nofollow, allow/deny URL patterns,
and export by depth of the stored crawl."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from crawler.store import open_store
from crawler.testweb import TestWeb
from tests.integration.test_crawl import cli, no_private_redis_env


def _stored(out: Path) -> list[dict[str, object]]:
    store = open_store(f"sqlite:///{out / 'crawl.db'}")
    try:
        return list(store.pages())
    finally:
        store.close()


def test_nofollow_links_and_url_patterns_decide_what_is_stored(make_web: Callable[..., TestWeb],
                                                               tmp_path: Path) -> None:
    web = make_web(1, 30)
    seed = web.seeds()[0]

    default = tmp_path / "default"
    res = cli("crawl", seed, "--out", str(default), "--workers", "1", "--deny-url", r"/list\?",
              env=no_private_redis_env())
    assert res.returncode == 0, res.stderr[-3000:]
    urls = {str(r["url"]) for r in _stored(default)}
    assert not any("/private/" in u for u in urls)  # rel=nofollow: dropped by default
    assert any("/missing/" in u for u in urls)
    assert not any("/list?" in u for u in urls)  # denied

    follow = tmp_path / "follow"
    res = cli("crawl", seed, "--out", str(follow), "--workers", "1", "--follow-nofollow",
              "--allow-url", "/(p|private)/", env=no_private_redis_env())
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _stored(follow)
    urls = {str(r["url"]) for r in rows}
    assert any("/private/" in u for u in urls)  # followed with the setting
    assert seed in urls  # seeds are exempt from the patterns
    assert all(u == seed or "/p/" in u or "/private/" in u for u in urls)

    # export: one depth, then one file per depth
    depth1 = cli("export", str(follow), "--depth", "1")
    assert depth1.returncode == 0, depth1.stderr
    got = [json.loads(line) for line in depth1.stdout.splitlines()]
    assert got and got == [r for r in rows if r["depth"] == 1]
    prefix = tmp_path / "pages"
    split = cli("export", str(follow), "--by-depth", "--out", str(prefix))
    assert split.returncode == 0, split.stderr
    depths = sorted({int(str(r["depth"])) for r in rows})
    assert sorted(tmp_path.glob("pages.depth-*.jsonl")) == sorted(
        tmp_path / f"pages.depth-{d}.jsonl" for d in depths)
    for d in depths:
        lines = (tmp_path / f"pages.depth-{d}.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in lines] == [r for r in rows if r["depth"] == d]
    refused = cli("export", str(follow), "--by-depth")
    assert refused.returncode != 0 and "--out" in refused.stderr
