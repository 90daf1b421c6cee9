"""A fetch task's requests run together, and a slow one must not hold the others' hosts.

The frontier frees a host's slot (and starts its delay) when its request is reported fetched. A
task reporting once, at its end, would keep every host of the task waiting for its slowest
server: with one request per host in flight, a host answering in 20 seconds would hold up to a
batch's worth of other hosts for those 20 seconds. So while requests are still out after
``STRAGGLER_AFTER`` seconds, those finished are reported, and again each time the wait doubles.
A task whose requests all end in time (the usual one) reports once, as before. An early report
costs a script call, the hosts' delays read and written, one round trip, and its requests still
out wait on a paused event loop for that long. A task that fails after one (its final report
raising) leaves the pages reported early to come back when their leases expire, an attempt spent.

A host's run (several of its URLs under its one slot, see ``Frontier.dispatch``) is fetched one
request after another, waiting the host's delay between them, and is reported whole: its last
URL, whose report frees the host, never goes before the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from crawler.fetch import FetchConfig
from crawler.fetch.client import ExtraHeaders, Fetcher, FetchResult, HopCheck, Hops, RequestSpec, Runtime

STRAGGLER_AFTER = 1.0  # seconds before a task's finished requests are reported without the rest
UNTRIED = "untried"  # the error of a run's request never sent: the run stopped before it

# How a run goes on after one of its results: given that request's position, the wait before it
# and its result, the wait before the next request, or None to stop the run there.
Pace = Callable[[int, float, FetchResult], float | None]


def untried(url: str) -> FetchResult:
    return FetchResult(url=url, final_url=url, error=UNTRIED, sent=False)


def is_untried(r: FetchResult) -> bool:
    return r.error == UNTRIED and not r.sent


def fetch_reporting_early(rt: Runtime, fetcher: Fetcher, urls: Sequence[str], config: FetchConfig,
                          check: HopCheck | None, headers: ExtraHeaders, hops: Hops | None,
                          specs: Sequence[RequestSpec | None] | None,
                          report: Callable[[list[int], list[FetchResult]], None],
                          after: float = STRAGGLER_AFTER, runs: Sequence[tuple[Sequence[int], float]] = (),
                          pace: Pace | None = None) -> list[FetchResult]:
    """``fetcher.fetch_many`` of ``urls``, but while some are still out after ``after``
    seconds (then twice as long, and so on), ``report`` gets those finished since the last
    report: their positions in ``urls`` and their results. Returns every result, in order.
    Should ``report`` raise, the requests still out are cancelled. ``runs``: (positions, first
    wait) of URLs fetched one after another, each waiting before the next as ``pace`` says
    (whose None leaves the rest ``untried``); every other URL goes at once. A run is reported
    whole."""

    def one(i: int) -> Coroutine[Any, Any, list[FetchResult]]:
        # A fetcher is asked for a spider's requests only when there are some (``fetch_many``).
        if specs:
            return fetcher.fetch_many([urls[i]], config, check, headers, hops, requests=[specs[i]])
        return fetcher.fetch_many([urls[i]], config, check, headers, hops)

    async def in_turn(positions: Sequence[int], wait: float) -> list[FetchResult]:
        out: list[FetchResult] = []
        for k, i in enumerate(positions):
            if k and wait > 0:
                await asyncio.sleep(wait)
            r = (await one(i))[0]
            out.append(r)
            go_on = pace(i, wait, r) if pace is not None else wait
            if go_on is None:
                out.extend(untried(urls[j]) for j in positions[k + 1:])
                break
            wait = go_on
        return out

    in_runs = {i for positions, _ in runs for i in positions}
    groups = [*([i] for i in range(len(urls)) if i not in in_runs), *(list(p) for p, _ in runs)]
    tasks = [rt.loop.create_task(one(i)) for i in range(len(urls)) if i not in in_runs]
    tasks += [rt.loop.create_task(in_turn(p, wait)) for p, wait in runs]
    reported: set[int] = set()
    pending: set[asyncio.Task[list[FetchResult]]] = set(tasks)
    wait = after
    try:
        while pending:
            _, pending = rt.run(asyncio.wait(pending, timeout=wait))
            wait *= 2
            fresh = [g for g, t in enumerate(tasks) if g not in reported and t.done()] if pending else []
            if fresh:
                reported.update(fresh)
                report([i for g in fresh for i in groups[g]], [r for g in fresh for r in tasks[g].result()])
    finally:
        if pending:
            for t in pending:
                t.cancel()
            rt.run(_settle(pending))
    got: dict[int, FetchResult] = {}
    for g, t in enumerate(tasks):
        got.update(zip(groups[g], t.result(), strict=True))
    return [got[i] for i in range(len(urls))]


async def _settle(tasks: set[asyncio.Task[list[FetchResult]]]) -> None:
    """Wait for cancelled tasks to end (what they raise is theirs)."""
    await asyncio.gather(*tasks, return_exceptions=True)
