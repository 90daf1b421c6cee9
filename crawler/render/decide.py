"""Which pages go to the browser (``render``: never, always, auto), and what ``auto`` learns.

``auto`` decides per host. A new host's first ``render_sample`` pages are rendered; each rendered
page is compared with its own HTML (distinct links, visible text), and once the sample is in,
the host is rendered from then on only if its pages gained, on average, at least
``render_more_links`` links or ``render_more_text`` characters. Either way one page in
``render_recheck`` is rendered again and compared, and the decision follows what the last
sample's worth of comparisons say, so a site that starts or stops building its pages in the
browser is noticed. The decisions and their counts live in Redis under the job's keys: any
worker may fetch, render or decide.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from redis import Redis

from crawler import keys
from crawler.redisconn import text
from crawler.settings import Settings

YES, NO = "yes", "no"


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


def choose(r: Redis, job_id: str, s: Settings, hosts: Iterable[str]) -> set[str]:
    """Of the hosts of pages just fetched (one entry per page), those whose page goes to the
    browser: every one with ``always``, none with ``never``, and with ``auto`` those sampling, those
    decided ``yes``, and those due a recheck."""
    pages = list(hosts)
    if s.render == "never" or not pages:
        return set()
    if s.render == "always":
        return set(pages)
    distinct = sorted(set(pages))
    decided = dict(zip(distinct, r.hmget(keys.render_decisions(job_id), distinct), strict=True))
    out: set[str] = set()
    pipe = r.pipeline(transaction=False)
    due: list[str] = []
    for host in distinct:
        d = text(decided[host]) if decided[host] is not None else ""
        if d == YES or not d:
            out.add(host)
        else:
            pipe.hincrby(keys.render_stats(job_id), f"{host}|since", pages.count(host))
            due.append(host)
    for host, since in zip(due, pipe.execute(), strict=True):
        if int(since) >= s.render_recheck:
            r.hset(keys.render_stats(job_id), f"{host}|since", 0)
            out.add(host)
    return out


def learn(r: Redis, job_id: str, s: Settings, host: str, seen: Comparison) -> str:
    """Count one compared page of ``host`` and return the host's decision after it ('' while its
    sample is not in yet)."""
    st = keys.render_stats(job_id)
    pipe = r.pipeline(transaction=False)
    pipe.hincrby(st, f"{host}|pages", 1)
    pipe.hincrby(st, f"{host}|gained", int(seen.gained(s)))
    pages, gained = pipe.execute()
    if pages < s.render_sample:
        return ""
    decision = YES if 2 * gained >= pages else NO
    # The last sample's worth of pages decide from here on: halve the counts as they grow.
    if pages >= 2 * s.render_sample:
        r.hset(st, mapping={f"{host}|pages": pages // 2, f"{host}|gained": gained // 2})
    r.hset(keys.render_decisions(job_id), host, decision)
    return decision


def decisions(r: Redis, job_id: str, hosts: Sequence[str] | None = None) -> dict[str, str]:
    """host -> its decision, of ``hosts`` or of all (hosts still sampling are absent)."""
    if hosts is None:
        return {text(h): text(d) for h, d in r.hgetall(keys.render_decisions(job_id)).items()}
    if not hosts:
        return {}
    got = r.hmget(keys.render_decisions(job_id), list(hosts))
    return {h: text(d) for h, d in zip(hosts, got, strict=True) if d is not None}
