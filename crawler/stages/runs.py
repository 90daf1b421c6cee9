"""A fetch task's host runs (``Frontier.dispatch``): which of its URLs go one after another,
how long each waits for the one before, and where a run stops.

A run stops (the rest go back untried, the host's slot with them) at a failure worth a retry or
the end of a login session (the caller says which), once a quarter of its leases' time is spent,
or where its waits (its host's delay, adapted to its answers as autothrottle adapts it, never
below the floor that keeps to: the job's or an operator's delay and robots.txt's Crawl-delay,
which the host's own delay takes in only once a page of it is fetched) would add up to more than
``RUN_WAIT``: a host that slow goes a URL a task. The leases' time counts from their dispatch, or
from the confirmation that renewed them (a task that waited in its queue).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from crawler.config.settings import Settings
from crawler.fetch.client import FetchResult
from crawler.fetch.robots import RobotsPolicy, origin_of
from crawler.frontier import Entry
from crawler.frontier.core import FRESH, RunPace, token_time
from crawler.frontier.dispatcher import RUN_WAIT
from crawler.stages.politeness import delay_floor
from crawler.stages.ratecontrol import next_delay
from crawler.urls import host_key


def find_runs(todo: Sequence[Entry], paces: Sequence[RunPace | None]) -> list[tuple[list[int], RunPace]]:
    """(positions in ``todo``, pace) of the hosts' runs: a run's URLs before its last (``paces``:
    what ``Frontier.confirm`` said of each, None for a URL of no run) and the URL of the same host
    after them, its last. A run whose last URL this task no longer holds is still fetched one URL
    after another."""
    out: list[tuple[list[int], RunPace]] = []
    run: list[int] = []
    for i, e in enumerate([*todo, None]):
        if e is not None and run and paces[run[-1]] is not None and host_key(todo[run[-1]].url) == host_key(e.url):
            run.append(i)
            continue
        first = paces[run[0]] if run else None  # a run's first URL is never its last
        if len(run) > 1 and first is not None:
            out.append((run, first))
        run = [i]
    return out


@dataclass
class TaskRuns:
    """A fetch task's runs, by position in the task's URLs (``todo``) and among those sent
    (``go``, the URLs robots.txt let through)."""

    in_todo: list[tuple[list[int], RunPace]]
    go: list[tuple[list[int], float]]  # (positions among those sent, first wait): two or more each
    floor: dict[int, float]  # by position among those sent
    until: float  # no run starts a request after this
    run_at: dict[int, int] = field(default_factory=dict)  # position among those sent -> run in ``go``
    run_of: dict[int, int] = field(default_factory=dict)  # position in ``todo`` -> run in ``in_todo``
    waited: list[float] = field(default_factory=list)  # by run in ``go``

    def report_now(self, i: int, over: set[int], blocked: set[int], first: bool) -> bool:
        """Whether URL ``i`` of the task, kept from the network by robots.txt, goes with a report
        of the positions ``over``: a run's go with the last of its requests (its last URL's report
        frees the host), any other with the ``first`` report."""
        if i not in self.run_of:
            return first
        return all(j in over or j in blocked for j in self.in_todo[self.run_of[i]][0])

    def pace(self, i: int, wait: float, r: FetchResult, s: Settings, stop: bool) -> float | None:
        """The wait before the request after the one sent at ``i`` (waited ``wait`` for, answered
        ``r``), or None to stop its run there (``stop``: the caller's own reasons)."""
        if stop or time.time() >= self.until:
            return None
        nxt = next_delay(wait, floor=self.floor[i], latency=r.elapsed, status=r.status, retry_after=None,
                         max_delay=s.max_delay) if s.autothrottle else wait
        self.waited[self.run_at[i]] += nxt
        return nxt if self.waited[self.run_at[i]] <= RUN_WAIT else None


def plan(todo: Sequence[Entry], paces: Sequence[RunPace | None], go_at: Sequence[int],
         policies: dict[str, RobotsPolicy], s: Settings, token: str, confirmed_at: float) -> TaskRuns:
    """The runs of a task whose URLs are ``todo``, of which those at ``go_at`` are sent."""
    made = token_time(token)
    young = made is not None and confirmed_at - made < s.lease_timeout * FRESH
    runs = TaskRuns(find_runs(todo, paces), [], {},
                    (made if young and made is not None else confirmed_at) + s.lease_timeout * FRESH)
    in_go = {i: k for k, i in enumerate(go_at)}
    for k, (run, p) in enumerate(runs.in_todo):
        runs.run_of.update(dict.fromkeys(run, k))
        kept = [in_go[i] for i in run if i in in_go]
        if len(kept) > 1:
            floor = delay_floor(s, p.override, policies.get(origin_of(todo[run[0]].url)))
            runs.run_at.update(dict.fromkeys(kept, len(runs.go)))
            runs.go.append((kept, max(s.delay if p.own is None else p.own, floor)))
            runs.floor.update(dict.fromkeys(kept, floor))
            runs.waited.append(0.0)
    return runs
