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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from crawler.fetch import FetchConfig
from crawler.fetch.client import ExtraHeaders, Fetcher, FetchResult, HopCheck, Hops, RequestSpec, Runtime

STRAGGLER_AFTER = 1.0  # seconds before a task's finished requests are reported without the rest


def fetch_reporting_early(rt: Runtime, fetcher: Fetcher, urls: Sequence[str], config: FetchConfig,
                          check: HopCheck | None, headers: ExtraHeaders, hops: Hops | None,
                          specs: Sequence[RequestSpec | None] | None,
                          report: Callable[[list[int], list[FetchResult]], None],
                          after: float = STRAGGLER_AFTER) -> list[FetchResult]:
    """``fetcher.fetch_many`` of ``urls``, but while some are still out after ``after``
    seconds (then twice as long, and so on), ``report`` gets those finished since the last
    report: their positions in ``urls`` and their results. Returns every result, in order.
    Should ``report`` raise, the requests still out are cancelled."""
    # A fetcher is asked for a spider's requests only when there are some (``fetch_many``).
    tasks = [rt.loop.create_task(fetcher.fetch_many([u], config, check, headers, hops, requests=[specs[i]])
                                 if specs else fetcher.fetch_many([u], config, check, headers, hops))
             for i, u in enumerate(urls)]
    reported: set[int] = set()
    pending: set[asyncio.Task[list[FetchResult]]] = set(tasks)
    wait = after
    try:
        while pending:
            _, pending = rt.run(asyncio.wait(pending, timeout=wait))
            wait *= 2
            fresh = [i for i, t in enumerate(tasks) if i not in reported and t.done()] if pending else []
            if fresh:
                reported.update(fresh)
                report(fresh, [tasks[i].result()[0] for i in fresh])
    finally:
        if pending:
            for t in pending:
                t.cancel()
            rt.run(_settle(pending))
    return [t.result()[0] for t in tasks]


async def _settle(tasks: set[asyncio.Task[list[FetchResult]]]) -> None:
    """Wait for cancelled tasks to end (what they raise is theirs)."""
    await asyncio.gather(*tasks, return_exceptions=True)
