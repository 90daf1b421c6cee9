"""render=auto's per-host decision (no browser needed): sample, decide, recheck, change its mind."""

from __future__ import annotations

import redis

from crawler.render import decide
from crawler.render.decide import Comparison
from crawler.settings import Settings

JOB = "job-render"
GAIN = Comparison(raw_links=0, rendered_links=12, raw_text=10, rendered_text=900)
SAME = Comparison(raw_links=12, rendered_links=12, raw_text=900, rendered_text=905)


def test_never_and_always(r: redis.Redis) -> None:
    assert decide.choose(r, JOB, Settings(render="never"), ["a", "b"]) == set()
    assert decide.choose(r, JOB, Settings(render="always"), ["a", "b", "a"]) == {"a", "b"}


def test_a_host_is_sampled_then_decided_each_way(r: redis.Redis) -> None:
    s = Settings(render="auto", render_sample=3, render_recheck=10)
    assert decide.choose(r, JOB, s, ["js", "plain"]) == {"js", "plain"}  # both sampling
    for _ in range(2):
        assert decide.learn(r, JOB, s, "js", GAIN) == ""
        assert decide.learn(r, JOB, s, "plain", SAME) == ""
    assert decide.learn(r, JOB, s, "js", GAIN) == decide.YES
    assert decide.learn(r, JOB, s, "plain", SAME) == decide.NO
    assert decide.decisions(r, JOB) == {"js": "yes", "plain": "no"}
    assert decide.choose(r, JOB, s, ["js", "plain"]) == {"js"}
    # The plain host comes back for a recheck once in render_recheck of its pages.
    picked = [decide.choose(r, JOB, s, ["plain"]) for _ in range(18)]
    assert sum(1 for p in picked if p) == 1


def test_a_host_that_starts_scripting_is_noticed(r: redis.Redis) -> None:
    s = Settings(render="auto", render_sample=2, render_more_links=3, render_more_text=400)
    for _ in range(2):
        decide.learn(r, JOB, s, "site", SAME)
    assert decide.decisions(r, JOB, ["site"]) == {"site": "no"}
    got = [decide.learn(r, JOB, s, "site", GAIN) for _ in range(3)]
    assert got[-1] == decide.YES
    assert not Comparison(10, 12, 100, 300).gained(s) and Comparison(10, 13, 100, 100).gained(s)
