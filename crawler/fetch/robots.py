"""robots.txt per RFC 9309 (parsed by protego), fetched once per origin and cached in Redis for
every worker, and sitemaps.

Outcomes: 2xx is parsed; 4xx (and a redirect chain past 5 hops) means no rules, allow all; 5xx or
no answer means disallow the whole origin for now, and the fetch is retried after
``robots_retry`` seconds. When not even a connection could be made (no DNS answer, connection
refused) the origin is still disallowed, but asked again after ``retry_base`` seconds: the page's
own request would have met the same refusal and waited that long, so its URLs use their attempts
as a page's connect errors do instead of sitting out ``robots_retry`` each (a dead seed ended a
crawl after 10 minutes).

Jobs differ in what their fetches may reach (allowed networks, fixed DNS answers), so the answer
for one origin differs too: entries are kept per origin and per such network policy, and a
refusal by our own guard (``blocked_network``) is never kept at all, only used for the batch that
met it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from lxml import etree
from protego import Protego
from redis import Redis

from crawler.config.settings import parse_networks
from crawler.errors import Reason
from crawler.lru import ENTRY_OVERHEAD, LRU
from crawler.state import keys
from crawler.state.conn import mget

ROBOTS_MAX_BYTES = 500_000  # RFC 9309 asks crawlers to read at least 500 KiB
SITEMAP_MAX_BYTES = 10_000_000
SITEMAP_MAX_URLS = 50_000


def origin_of(url: str) -> str:
    p = urlsplit(url)
    return f"{p.scheme}://{p.netloc}"


# Outcomes that are our own verdict on the request, not the origin's answer: another job, or
# this one once its settings change, may be allowed what this one was refused.
NOT_CACHED = frozenset({Reason.BLOCKED_NETWORK, Reason.BAD_URL, Reason.INTERNAL})
# Failures before any server answered: the origin is asked again as soon as a page would be.
UNREACHABLE = frozenset({Reason.DNS, Reason.CONNECT})


@lru_cache(maxsize=256)  # a few policies per worker; the key is the policy itself
def robots_scope(allow_networks: tuple[str, ...], resolve: tuple[tuple[str, str], ...]) -> str:
    """A short digest of what decides which server answers for an origin: the networks the
    guard lets through and the fixed DNS answers (all of them, since a robots.txt may redirect
    to any host). Jobs with the same policy share entries; others never see them."""
    nets = sorted({str(n) for n in parse_networks(allow_networks)})
    fixed = sorted({(host.strip().lower(), ip.strip()) for host, ip in resolve})
    if not nets and not fixed:
        return "public"
    return hashlib.sha256(json.dumps([nets, fixed]).encode()).hexdigest()[:16]


def robots_key(origin: str, scope: str) -> str:
    return keys.robots(origin, scope)


def policy_size(key: str, policy: RobotsPolicy) -> int:
    """Bytes a parsed policy holds, erring high: protego keeps ~200-400 bytes per rule line and
    ~1.5 KB more per wildcard rule (its compiled pattern), measured with tracemalloc."""
    body = policy.body
    return ENTRY_OVERHEAD + len(key) + len(body) + 400 * body.count("\n") + 1500 * body.count("*")


@dataclass
class RobotsPolicy:
    status: int | None  # None: no answer at all
    body: str
    expires: float
    error: str | None = None  # why there was no answer, when it is the origin's own fault
    # No server took the connection to the origin itself (``UNREACHABLE``, not after a redirect).
    unreachable: bool = False

    def __post_init__(self) -> None:
        self._rules: Protego | None = None
        if self.status is not None and 200 <= self.status < 300:
            try:
                self._rules = Protego.parse(self.body)
            except Exception:  # a robots.txt protego cannot read has no rules we can obey
                self._rules = None

    @property
    def unavailable(self) -> bool:
        """A server error or no answer: treated as complete disallow until retried."""
        return self.status is None or self.status >= 500

    def allowed(self, url: str, agent: str) -> bool:
        if self.unavailable:
            return False
        return True if self._rules is None else bool(self._rules.can_fetch(url, agent))

    def block_reason(self, url: str, agent: str) -> Reason | None:
        """Why the URL may not be fetched now, or None."""
        if self.error == Reason.BLOCKED_NETWORK:
            return Reason.BLOCKED_NETWORK
        if self.unavailable:
            # No server took the connection: the page's own request would have met the same
            # failure, so it is counted, retried and reported as that failure.
            return Reason(self.error) if self.unreachable and self.error in UNREACHABLE else Reason.ROBOTS_UNAVAILABLE
        return None if self.allowed(url, agent) else Reason.ROBOTS

    def crawl_delay(self, agent: str) -> float | None:
        delay = self._rules.crawl_delay(agent) if self._rules is not None else None
        return float(delay) if delay is not None else None

    def sitemaps(self) -> list[str]:
        return list(self._rules.sitemaps) if self._rules is not None else []

    def dumps(self) -> str:
        d = {"s": self.status, "b": self.body, "e": self.expires, "r": self.error}
        return json.dumps({**d, "u": 1} if self.unreachable else d)

    @classmethod
    def loads(cls, raw: str | bytes) -> RobotsPolicy:
        # An entry from a worker before ``unreachable`` holds its origin robots_retry, as it was.
        d = json.loads(raw)
        return cls(d["s"], d["b"], d["e"], d.get("r"), bool(d.get("u")))


class RobotsCache:
    """Policies by origin and network policy (``robots_scope``): a per-process copy, bounded by
    count and bytes, in front of the shared Redis entries."""

    def __init__(self, redis: Redis, size: int = 10_000, max_bytes: int = 64_000_000) -> None:
        self.redis = redis
        self._local: LRU[str, RobotsPolicy] = LRU(size, max_bytes, sizeof=policy_size)
        self._pending: dict[str, asyncio.Future[RobotsPolicy]] = {}  # fetches under way, by key

    def lookup(self, origins: Iterable[str], scope: str, now: float | None = None) -> dict[str, RobotsPolicy]:
        now = time.time() if now is None else now
        found: dict[str, RobotsPolicy] = {}
        ask = []
        for o in origins:
            p = self._local.get(robots_key(o, scope))
            if p is not None and p.expires > now:
                found[o] = p
            else:
                ask.append(o)
        if ask:
            for o, raw in zip(ask, mget(self.redis, [robots_key(o, scope) for o in ask]), strict=True):
                if raw is not None:
                    p = RobotsPolicy.loads(raw)
                    if p.expires > now and p.error not in NOT_CACHED:
                        found[o] = p
                        self._local.put(robots_key(o, scope), p)
        return found

    async def once(self, scope: str, origin: str,
                   fetch: Callable[[str], Awaitable[RobotsPolicy]]) -> RobotsPolicy:
        """``fetch(origin)``, shared by every caller on this event loop asking for the same origin
        and scope while it is under way: a rendered page's scripts, styles and data all ask at
        once, and the origin is asked for its robots.txt once."""
        key = robots_key(origin, scope)
        loop = asyncio.get_running_loop()
        pending = self._pending.get(key)
        if pending is None or pending.get_loop() is not loop:
            pending = self._pending[key] = asyncio.ensure_future(fetch(origin))
            pending.add_done_callback(lambda f: self._pending.pop(key, None) if self._pending.get(key) is f else None)
        return await asyncio.shield(pending)

    def local(self, origin: str, scope: str) -> RobotsPolicy | None:
        p = self._local.get(robots_key(origin, scope))
        return p if p is not None and p.expires > time.time() else None

    def save(self, policies: dict[str, RobotsPolicy], scope: str) -> None:
        keep = {o: p for o, p in policies.items() if p.error not in NOT_CACHED}
        if not keep:
            return
        pipe = self.redis.pipeline(transaction=False)
        now = time.time()
        for o, p in keep.items():
            key = robots_key(o, scope)
            pipe.set(key, p.dumps(), ex=max(1, int(p.expires - now + 1)))
            self._local.put(key, p)
        pipe.execute()


def policy_from_fetch(status: int | None, body: bytes, error: str | None, *, ttl: float,
                      retry_ttl: float, unreachable_ttl: float | None = None, redirected: bool = False,
                      now: float | None = None) -> RobotsPolicy:
    """The policy an answer to ``/robots.txt`` gives, kept for ``ttl`` seconds; a failure for
    ``retry_ttl`` (``unreachable_ttl``, when given, for one that reached no server: not a
    ``redirected`` request, whose origin did answer)."""
    now = time.time() if now is None else now
    if status is None and error in UNREACHABLE and unreachable_ttl is not None and not redirected:
        return RobotsPolicy(None, "", now + min(retry_ttl, unreachable_ttl), error, unreachable=True)
    if error in (Reason.TOO_MANY_REDIRECTS, Reason.REDIRECT_LOOP):
        return RobotsPolicy(404, "", now + ttl)  # RFC 9309: may be treated as unavailable (4xx)
    if error == Reason.BLOCKED_NETWORK:
        return RobotsPolicy(None, "", now + ttl, error)  # our rule, not the server's state
    if status is None or status >= 500:
        return RobotsPolicy(status, "", now + retry_ttl, error)
    text = body[:ROBOTS_MAX_BYTES].decode("utf-8", errors="replace") if 200 <= status < 300 else ""
    return RobotsPolicy(status, text, now + ttl)


def _inflate(body: bytes) -> bytes:
    if body[:2] != b"\x1f\x8b":
        return body
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    return d.decompress(body, SITEMAP_MAX_BYTES)


def parse_sitemap(body: bytes) -> tuple[list[str], list[str]]:
    """(page URLs, child sitemap URLs) from a sitemap or sitemap index; bounded, no entities,
    no network. A body that is not XML gives nothing."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, recover=True)
    try:
        root = etree.fromstring(_inflate(body), parser=parser)
    except (etree.XMLSyntaxError, ValueError, zlib.error):
        return [], []
    if root is None:
        return [], []
    locs = [(el.text or "").strip() for el in root.iter("{*}loc")][:SITEMAP_MAX_URLS]
    locs = [loc for loc in locs if loc]
    if etree.QName(root).localname == "sitemapindex":
        return [], locs
    return locs, []
