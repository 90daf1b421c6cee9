"""Which pages go to the browser (``render``: never, always, auto), and what ``auto`` learns.

``auto`` decides per host. A new host's first ``render_sample`` pages are rendered; each rendered
page is compared with its own HTML (distinct links, visible text), and it gained if the browser
added at least ``render_more_links`` links or ``render_more_text`` characters. Once the sample is
in, the host is rendered from then on only if at least half of its compared pages gained.
Either way one page in ``render_recheck`` is rendered again and compared, and the decision
follows what the last sample's worth of comparisons say, so a site that starts or stops building
its pages in the browser is noticed. The decisions and their counts live in Redis under the
job's keys: any worker may fetch, render or decide.

Samples and rechecks are handed out by counters in Redis, atomically, so pages fetched at once
on many workers get no more of them than one worker would. A page of a host still sampling that
finds its sample all handed out goes to the browser marked ``LATER``: it is rendered only if the
host is not decided ``no`` by the time its turn comes (behind the samples in the render queue).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from redis import Redis
from redis.client import Pipeline

from crawler.config.settings import Settings
from crawler.state import keys
from crawler.state.conn import text

YES, NO = "yes", "no"
NOW, LATER = "now", "later"  # a page to render, a page to render unless its host turns out not to need it


@dataclass(frozen=True)
class Comparison:
    """What one page yields from its HTML and from the browser."""

    raw_links: int
    rendered_links: int
    raw_text: int
    rendered_text: int

    def gained(self, s: Settings) -> bool:
        return (self.rendered_links - self.raw_links >= s.render_more_links
                or self.rendered_text - self.raw_text >= s.render_more_text)


def choose(r: Redis, job_id: str, s: Settings, hosts: Sequence[str]) -> list[str]:
    """For the pages just fetched (``hosts``: one entry per page, its host), in order: NOW for a
    page to render, LATER for one to render unless its host is decided ``no`` by then, "" for one
    not to. ``always`` renders every page, ``never`` none; ``auto`` renders the pages of hosts
    decided ``yes``, the first ``render_sample`` pages of a new host (later ones: LATER), and
    one in ``render_recheck`` of a host decided ``no``."""
    pages = list(hosts)
    if s.render == "never" or not pages:
        return [""] * len(pages)
    if s.render == "always":
        return [NOW] * len(pages)
    n = Counter(pages)
    distinct = sorted(n)
    got = dict(zip(distinct, r.hmget(keys.render_decisions(job_id), distinct), strict=True))
    decided = {h: text(d) for h, d in got.items() if d is not None}
    asked = [h for h in distinct if decided.get(h) != YES]
    pipe = r.pipeline(transaction=False)
    for host in asked:
        pipe.hincrby(keys.render_stats(job_id), f"{host}|{'since' if host in decided else 'sampled'}", n[host])
    # Each counter's values before and after this call's pages say how many of them fall within
    # the sample, or on a multiple of render_recheck: whichever calls race, each is handed once.
    quota: dict[str, int] = {}
    every = max(1, s.render_recheck)
    for host, after in zip(asked, pipe.execute(), strict=True):
        before = int(after) - n[host]
        quota[host] = (int(after) // every - before // every if host in decided
                       else max(0, min(int(after), s.render_sample) - before))
    out: list[str] = []
    for host in pages:
        if decided.get(host) == YES or quota[host] > 0:
            if host in quota:
                quota[host] -= 1
            out.append(NOW)
        else:
            out.append("" if host in decided else LATER)
    return out


def learn(r: Redis, job_id: str, s: Settings, host: str, seen: Comparison) -> str:
    """Count one compared page of ``host`` and return the host's decision after it ('' while its
    sample is not in yet)."""
    st = keys.render_stats(job_id)
    pipe = r.pipeline(transaction=False)
    pipe.hincrby(st, f"{host}|pages", 1)
    pipe.hincrby(st, f"{host}|gained", int(seen.gained(s)))
    # The evidence, never halved: pages compared, and the links and text the browser added.
    pipe.hincrby(st, f"{host}|compared", 1)
    pipe.hincrby(st, f"{host}|links_gained", seen.rendered_links - seen.raw_links)
    pipe.hincrby(st, f"{host}|text_gained", seen.rendered_text - seen.raw_text)
    pages, gained, *_ = pipe.execute()
    if pages < s.render_sample:
        return ""
    decision = YES if 2 * gained >= pages else NO
    # The last sample's worth of pages decide from here on: halve the counts as they grow.
    if pages >= 2 * s.render_sample:
        r.hset(st, mapping={f"{host}|pages": pages // 2, f"{host}|gained": gained // 2})
    r.hset(keys.render_decisions(job_id), host, decision)
    return decision


def unfinished(r: Redis | Pipeline, job_id: str, host: str, error: str) -> None:
    """Count a render of ``host`` that did not complete (``render_timeout``: ``timeouts``, any
    other error: ``failures``); it is not learnt from, as it says nothing of what rendering gains."""
    r.hincrby(keys.render_stats(job_id), f"{host}|{'timeouts' if error == 'render_timeout' else 'failures'}", 1)


EVIDENCE = ("compared", "links_gained", "text_gained", "timeouts", "failures")


def evidence(r: Redis, job_id: str, hosts: Sequence[str]) -> dict[str, dict[str, int]]:
    """host -> what its decision rests on: pages compared, links and characters of text the
    browser added over them, and renders that timed out or failed (not learnt from)."""
    if not hosts:
        return {}
    fields = [f"{h}|{name}" for h in hosts for name in EVIDENCE]
    got = iter(r.hmget(keys.render_stats(job_id), fields))
    return {h: {name: int(next(got) or 0) for name in EVIDENCE} for h in hosts}


def decisions(r: Redis, job_id: str, hosts: Sequence[str] | None = None) -> dict[str, str]:
    """host -> its decision, of ``hosts`` or of all (hosts still sampling are absent)."""
    if hosts is None:
        return {text(h): text(d) for h, d in r.hgetall(keys.render_decisions(job_id)).items()}
    if not hosts:
        return {}
    got = r.hmget(keys.render_decisions(job_id), list(hosts))
    return {h: text(d) for h, d in zip(hosts, got, strict=True) if d is not None}
