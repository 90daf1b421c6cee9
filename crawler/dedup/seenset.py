"""The seen-set of a job: what decides whether a URL is new. Two kinds, chosen once per job
from its settings (``seen_set``): the exact set, a Redis hash the frontier's admit script
consults atomically with queueing (it keeps each URL's shortest depth, which depth limits
need), and the Bloom filter (``BloomSeen``: bounded memory, a false-positive rate)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from redis import Redis

from crawler.config.settings import Settings
from crawler.dedup.bloom import BloomSeen
from crawler.frontier import Entry, Frontier
from crawler.frontier.core import Admitted
from crawler.state import keys
from crawler.state.conn import text
from crawler.urls import host_key


def plus_counts(counts: Mapping[str, int] | None, **more: int) -> dict[str, int]:
    """``counts`` with ``more`` added to it (a counter in both is summed)."""
    out = dict(counts or {})
    for name, n in more.items():
        out[name] = out.get(name, 0) + n
    return out


def queue_cap(settings: Settings) -> int:
    """URLs a host's queue holds in Redis at most (0: no cap): the overflow needs a store."""
    return settings.host_queue_cap if settings.store else 0


@dataclass(frozen=True)
class Claim:
    """A page (``page``, at ``depth``) whose fetch ended at another URL (``target``)."""

    page: str
    target: str
    depth: int


# KEYS: the seen hash, the claims hash. ARGV: the job's max_depth, then per claim its target,
# "<target> <page>" and the claiming page's depth. A claim answered before keeps its answer. A
# new one is answered by the seen hash as a link's admission would be (``admit.lua``): a target
# not there, or only dropped by a page budget ('b': never fetched), is the claimer's, marked
# stored at its depth; one stored too deep for its links while this path is short enough is the
# claimer's too; one queued deeper takes the claimer's depth (dispatch applies it) and stays the
# queue's; anything else was seen.
_CLAIM = """
local maxd = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 3 do
  local target, field, d = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local got = redis.call('HGET', KEYS[2], field)
  if not got then
    local cur = redis.call('HGET', KEYS[1], target)
    got = '0'
    if not cur or cur == 'b' then
      got = '1'
    elseif string.sub(cur, 1, 1) == 'x' then
      local cd = tonumber(string.sub(cur, 2))
      if maxd > 0 and d < cd and cd >= maxd and d < maxd then got = '1' end
    elseif cur ~= 's' and d < tonumber(cur) then
      redis.call('HSET', KEYS[1], target, d)
    end
    if got == '1' then redis.call('HSET', KEYS[1], target, 'x' .. d) end
    redis.call('HSET', KEYS[2], field, got)
  end
  out[#out + 1] = got
end
redis.call('EXPIRE', KEYS[2], 3600)
return out
"""


def _claim_field(c: Claim) -> str:
    return f"{c.target} {c.page}"


@dataclass(frozen=True)
class Admission:
    queued: Admitted  # the URLs queued (and how many of them went to the store)
    duplicates: int  # entries found seen that the admit script did not count
    ignored: bool = False  # the batch is not pending: nothing was queued or marked seen


class SeenSet(Protocol):
    """One job's seen-set. ``admit`` is the only way URLs enter the frontier through it."""

    name: str

    def admit(self, entries: Sequence[Entry], *, token: str = "", part: int | None = None,
              last: bool = True, counts: Mapping[str, int] | None = None) -> Admission:
        """Queue the entries not seen before and mark them seen. A batch ``token`` is
        admitted once: delivered again, it queues nothing and marks nothing (and counts
        nothing). ``counts``: to add to the job's counters with the admission's own (the
        batch's URLs a local cache found seen, as ``duplicates``)."""
        ...

    def answered(self, token: str) -> bool:
        """Has an earlier run of the batch ``token`` been told what is new, without its URLs
        being queued yet? Then a process's local cache must not filter the batch: the cache
        may hold those URLs as seen only because that run's answer marked them."""
        ...

    def mark_skipped(self, urls: Sequence[str]) -> None:
        """Mark pages not due this cycle as seen, so links to them are not followed."""
        ...

    def mark_stored(self, pages: Sequence[tuple[str, int]]) -> None:
        """Mark stored pages (url, depth) as seen (rebuilding a job's frontier)."""
        ...

    def reset(self) -> None:
        """Forget every URL (a new cycle)."""
        ...

    def claim_targets(self, claims: Sequence[Claim]) -> list[bool]:
        """Mark redirect targets seen, each on behalf of the page that redirected to it: True
        where the target was new (the page goes on as the target's one fetch), False where it
        was seen (another page, or a link, has it). The same page asking again gets the same
        answer until ``forget_claims``."""
        ...

    def forget_claims(self, claims: Sequence[Claim]) -> None:
        """The claimers' pages are stored: their answers need not be kept."""
        ...


class ExactSeen:
    """The frontier's seen hash: the admit script decides and queues in one step."""

    name = "exact"

    def __init__(self, redis: Redis, frontier: Frontier, job_id: str, settings: Settings) -> None:
        self.redis, self.frontier, self.job_id, self.settings = redis, frontier, job_id, settings
        self._claim = redis.register_script(_CLAIM)

    def admit(self, entries: Sequence[Entry], *, token: str = "", part: int | None = None,
              last: bool = True, counts: Mapping[str, int] | None = None) -> Admission:
        s = self.settings
        queued = self.frontier.admit(self.job_id, entries, s.shards, token=token, part=part, last=last,
                                     budget=s.max_pages, max_depth=s.max_depth, host_budget=s.max_pages_per_host,
                                     queue_cap=queue_cap(s), counts=counts)
        return Admission(queued, 0)  # the admit script counts the exact set's own duplicates

    def answered(self, token: str) -> bool:
        return False  # the admit script decides and queues in one step: nothing is half done

    def mark_skipped(self, urls: Sequence[str]) -> None:
        # ``s``: skipped as not due this cycle (see the admit script's markers).
        self.frontier.mark_seen(self.job_id, dict.fromkeys(urls, "s"))

    def mark_stored(self, pages: Sequence[tuple[str, int]]) -> None:
        # ``x<depth>``: stored; the admit script re-queues it only for a shorter path under max_depth.
        self.frontier.mark_seen(self.job_id, {url: f"x{depth}" for url, depth in pages})

    def reset(self) -> None:
        self.frontier.clear_seen(self.job_id)

    def claim_targets(self, claims: Sequence[Claim]) -> list[bool]:
        if not claims:
            return []
        out = [False] * len(claims)
        # A split frontier keeps a target's claims beside its seen record, in its host's part.
        for space, at in self._by_space(claims).items():
            args: list[str | int] = [self.settings.max_depth]
            args += [x for c in (claims[i] for i in at) for x in (c.target, _claim_field(c), c.depth)]
            got = self._claim(keys=[keys.seen(space), keys.redirect_claims(space)], args=args)
            for i, g in zip(at, got, strict=True):
                out[i] = text(g) == "1"
        return out

    def forget_claims(self, claims: Sequence[Claim]) -> None:
        for space, at in self._by_space(claims).items():
            self.redis.hdel(keys.redirect_claims(space), *(_claim_field(claims[i]) for i in at))

    def _by_space(self, claims: Sequence[Claim]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, c in enumerate(claims):
            out.setdefault(self.frontier.space_of_host(self.job_id, host_key(c.target)), []).append(i)
        return out


class BloomSeenSet:
    """The Bloom filter decides what is new (memoised by batch token, so a redelivered batch
    gets the same answer); the frontier queues those without consulting the exact set."""

    name = "bloom"

    def __init__(self, redis: Redis, frontier: Frontier, job_id: str, settings: Settings,
                 bloom: BloomSeen | None = None) -> None:
        self.redis, self.frontier, self.job_id, self.settings = redis, frontier, job_id, settings
        self.bloom = bloom or BloomSeen(redis, job_id, capacity=settings.bloom_capacity, p=settings.bloom_error_rate)

    def admit(self, entries: Sequence[Entry], *, token: str = "", part: int | None = None,
              last: bool = True, counts: Mapping[str, int] | None = None) -> Admission:
        if token and not self.frontier.pending(self.job_id, token):
            # Admission would ignore this batch (admitted already, or from before a Redis loss
            # and `recover`); its URLs must not reach the filter either, or they would count as
            # seen with nothing queued.
            return Admission(Admitted(), 0, ignored=True)
        by_url = {e.url: e for e in entries}
        new = set(self.bloom.add_many(list(by_url), token=token)) if by_url else set()
        s = self.settings
        queued = self.frontier.admit(self.job_id, [e for e in entries if e.url in new], s.shards, token=token,
                                     trusted=True, part=part, last=last, budget=s.max_pages, max_depth=s.max_depth,
                                     host_budget=s.max_pages_per_host, queue_cap=queue_cap(s),
                                     counts=plus_counts(counts, duplicates=len(entries) - len(new)))
        if last:
            # The batch is admitted: its token is no longer pending, so its memo has no reader.
            self.bloom.drop_memo(token)
        return Admission(queued, 0)  # counted by the admit script

    def answered(self, token: str) -> bool:
        # Its bits were set (and its answers kept) but the batch is still pending: a worker died
        # between the filter and the frontier, and the same batch is here again.
        return self.bloom.has_memo(token)

    def mark_skipped(self, urls: Sequence[str]) -> None:
        self.bloom.add_many(urls)

    def mark_stored(self, pages: Sequence[tuple[str, int]]) -> None:
        self.bloom.add_many([url for url, _depth in pages])

    def reset(self) -> None:
        self.bloom.reset()

    def claim_targets(self, claims: Sequence[Claim]) -> list[bool]:
        got = self.bloom.claim([c.target for c in claims], [c.page for c in claims], keys.REDIRECTS)
        seen = [c for c, new in zip(claims, got, strict=True) if not new]
        if not seen:
            return got
        # The filter holds what a page budget dropped as well (it is asked first), and such a
        # URL is never fetched: while a budget is spent, a target it may have dropped is the
        # claimer's (the page is parsed; a duplicate at worst, as before redirects were claimed).
        spent = self._budget_spent([c.target for c in seen])
        return [new or c.target in spent for c, new in zip(claims, got, strict=True)]

    def _budget_spent(self, urls: Sequence[str]) -> set[str]:
        """Those of ``urls`` the job's page budgets would drop now."""
        s = self.settings
        if s.max_pages and self.frontier.counters(self.job_id, ("admitted",))["admitted"] >= s.max_pages:
            return set(urls)
        if not s.max_pages_per_host:
            return set()
        counts = self.frontier.host_admitted(self.job_id, [host_key(u) for u in urls])
        return {u for u, n in zip(urls, counts, strict=True) if n >= s.max_pages_per_host}

    def forget_claims(self, claims: Sequence[Claim]) -> None:
        self.bloom.forget_claims([c.target for c in claims], [c.page for c in claims], keys.REDIRECTS)


def seen_kind(settings: Settings) -> str:
    """The name of the seen-set a job with these settings uses."""
    return BloomSeenSet.name if settings.uses_bloom else ExactSeen.name


def seen_set(redis: Redis, frontier: Frontier, job_id: str, settings: Settings) -> SeenSet:
    """The seen-set the job's settings name."""
    if seen_kind(settings) == BloomSeenSet.name:
        return BloomSeenSet(redis, frontier, job_id, settings)
    return ExactSeen(redis, frontier, job_id, settings)
