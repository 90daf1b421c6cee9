"""render=auto's per-host decision (no browser needed): sample, decide, recheck, change its mind."""

from __future__ import annotations

import threading
from pathlib import Path

import redis

from crawler.config.settings import Settings
from crawler.render import decide
from crawler.render.decide import LATER, NOW, Comparison

JOB = "job-render"
GAIN = Comparison(raw_links=0, rendered_links=12, raw_text=10, rendered_text=900)
SAME = Comparison(raw_links=12, rendered_links=12, raw_text=900, rendered_text=905)


def test_never_and_always(r: redis.Redis) -> None:
    assert decide.choose(r, JOB, Settings(render="never"), ["a", "b"]) == ["", ""]
    assert decide.choose(r, JOB, Settings(render="always"), ["a", "b", "a"]) == [NOW, NOW, NOW]


def test_a_host_is_sampled_then_decided_each_way(r: redis.Redis) -> None:
    s = Settings(render="auto", render_sample=3, render_recheck=10)
    assert decide.choose(r, JOB, s, ["js", "plain"]) == [NOW, NOW]  # both sampling
    for _ in range(2):
        assert decide.learn(r, JOB, s, "js", GAIN) == ""
        assert decide.learn(r, JOB, s, "plain", SAME) == ""
    assert decide.learn(r, JOB, s, "js", GAIN) == decide.YES
    assert decide.learn(r, JOB, s, "plain", SAME) == decide.NO
    assert decide.decisions(r, JOB) == {"js": "yes", "plain": "no"}
    assert decide.choose(r, JOB, s, ["js", "plain"]) == [NOW, ""]
    # The plain host comes back for a recheck once in render_recheck of its pages.
    picked = [decide.choose(r, JOB, s, ["plain"]) for _ in range(18)]
    assert sum(1 for p in picked if p == [NOW]) == 1 and all(p in ([NOW], [""]) for p in picked)


def test_a_host_that_starts_scripting_is_noticed(r: redis.Redis) -> None:
    s = Settings(render="auto", render_sample=2, render_more_links=3, render_more_text=400)
    for _ in range(2):
        decide.learn(r, JOB, s, "site", SAME)
    assert decide.decisions(r, JOB, ["site"]) == {"site": "no"}
    got = [decide.learn(r, JOB, s, "site", GAIN) for _ in range(3)]
    assert got[-1] == decide.YES
    assert not Comparison(10, 12, 100, 300).gained(s) and Comparison(10, 13, 100, 100).gained(s)


def _race(redis_url: str, s: Settings, batches: list[list[str]]) -> list[str]:
    """choose() for each batch at once, from as many threads and Redis connections."""
    out: list[str] = []
    lock, go = threading.Lock(), threading.Barrier(len(batches))

    def one(hosts: list[str]) -> None:
        client = redis.Redis.from_url(redis_url)
        go.wait()
        got = decide.choose(client, JOB, s, hosts)
        client.close()
        with lock:
            out.extend(got)

    threads = [threading.Thread(target=one, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_concurrent_fetches_of_a_new_host_get_no_more_than_its_sample(r: redis.Redis, redis_url: str) -> None:
    s = Settings(render="auto", render_sample=3, render_recheck=10)
    # 40 fetch batches at once, with one to three pages of the same undecided host each.
    got = _race(redis_url, s, [["plain"] * (1 + i % 3) for i in range(40)])
    assert got.count(NOW) == s.render_sample and got.count(LATER) == len(got) - s.render_sample
    for _ in range(3):
        decide.learn(r, JOB, s, "plain", SAME)
    # Decided "no": one recheck per render_recheck pages, however the pages arrive.
    got = _race(redis_url, s, [["plain"] for _ in range(25)])
    assert got.count(NOW) == 25 // s.render_recheck and got.count("") == 25 - 25 // s.render_recheck


def test_the_browsers_host_delay_is_the_one_fetches_keep(r: redis.Redis, tmp_path: Path) -> None:
    from crawler import jobs
    from crawler.frontier.core import HostOverride
    from crawler.stages.context import Context
    from crawler.stages.render import host_limits

    job_id = jobs.submit(r, Settings.from_env(delay=1.0, per_host=1, shards=1, store=f"sqlite:///{tmp_path / 'c.db'}"),
                         ["http://127.0.4.50/"])
    ctx = Context.default(r)
    # An operator's delay replaces the job's as the host's floor (crawler.stages.politeness), shorter
    # or longer; the adaptive delay only raises it.
    ctx.frontier.set_host_override(job_id, "127.0.4.51:80", HostOverride(delay=0.2), shards=1)
    ctx.frontier.set_host_override(job_id, "127.0.4.52:80", HostOverride(delay=0.2), shards=1)
    ctx.frontier.set_host_delays(job_id, {"127.0.4.52:80": 0.5, "127.0.4.53:80": 1.5})
    limits = host_limits(ctx, jobs.load(r, job_id), ["127.0.4.51:80"])
    assert limits("127.0.4.51:80") == (1, 0.2)
    assert limits("127.0.4.52:80") == (1, 0.5)
    assert limits("127.0.4.53:80") == (1, 1.5)
    assert limits("127.0.4.54:80") == (1, 1.0)
    ctx.close()


def test_renders_that_did_not_complete_are_counted_not_learnt(r: redis.Redis) -> None:
    s = Settings(render="auto", render_sample=2)
    # A host whose pages need scripts, some of whose renders time out or fail: not "no" for it.
    for _ in range(3):
        decide.unfinished(r, JOB, "js", "render_timeout")
    decide.unfinished(r, JOB, "js", "render_failed")
    assert decide.decisions(r, JOB) == {}
    assert decide.learn(r, JOB, s, "js", GAIN) == ""
    assert decide.learn(r, JOB, s, "js", GAIN) == decide.YES
    # The decision's evidence, as status --hosts and the console show it.
    assert decide.evidence(r, JOB, ["js", "other"]) == {
        "js": {"compared": 2, "links_gained": 24, "text_gained": 1780, "timeouts": 3, "failures": 1},
        "other": dict.fromkeys(decide.EVIDENCE, 0)}
