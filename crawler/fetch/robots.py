"""robots.txt per RFC 9309 (parsed by protego), fetched once per origin and cached in Redis for
every worker, and sitemaps.

Outcomes: 2xx is parsed; 4xx (and a redirect chain past 5 hops) means no rules, allow all; 5xx or
no answer means disallow the whole origin for now, and the fetch is retried after
``robots_retry`` seconds.
"""

from __future__ import annotations

import json
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from lxml import etree
from protego import Protego
from redis import Redis

ROBOTS_MAX_BYTES = 500_000  # RFC 9309 asks crawlers to read at least 500 KiB
SITEMAP_MAX_BYTES = 10_000_000
SITEMAP_MAX_URLS = 50_000


def origin_of(url: str) -> str:
    p = urlsplit(url)
    return f"{p.scheme}://{p.netloc}"


def robots_key(origin: str) -> str:
    return f"c:robots:{origin}"


@dataclass
class RobotsPolicy:
    status: int | None  # None: no answer at all
    body: str
    expires: float
    error: str | None = None  # why there was no answer, when it is the origin's own fault

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

    def block_reason(self, url: str, agent: str) -> str | None:
        """Why the URL may not be fetched now (a reason code), or None."""
        if self.error == "blocked_network":
            return "blocked_network"
        if self.unavailable:
            return "robots_unavailable"
        return None if self.allowed(url, agent) else "robots"

    def crawl_delay(self, agent: str) -> float | None:
        delay = self._rules.crawl_delay(agent) if self._rules is not None else None
        return float(delay) if delay is not None else None

    def sitemaps(self) -> list[str]:
        return list(self._rules.sitemaps) if self._rules is not None else []

    def dumps(self) -> str:
        return json.dumps({"s": self.status, "b": self.body, "e": self.expires, "r": self.error})

    @classmethod
    def loads(cls, raw: str | bytes) -> RobotsPolicy:
        d = json.loads(raw)
        return cls(d["s"], d["b"], d["e"], d.get("r"))


class RobotsCache:
    """Policies by origin: a per-process copy in front of the shared Redis entries."""

    def __init__(self, redis: Redis, size: int = 10_000) -> None:
        self.redis = redis
        self.size = size
        self._local: OrderedDict[str, RobotsPolicy] = OrderedDict()

    def lookup(self, origins: Iterable[str], now: float | None = None) -> dict[str, RobotsPolicy]:
        now = time.time() if now is None else now
        found: dict[str, RobotsPolicy] = {}
        ask = []
        for o in origins:
            p = self._local.get(o)
            if p is not None and p.expires > now:
                found[o] = p
            else:
                ask.append(o)
        if ask:
            for o, raw in zip(ask, self.redis.mget([robots_key(o) for o in ask]), strict=True):
                if raw is not None:
                    p = RobotsPolicy.loads(raw)
                    if p.expires > now:
                        found[o] = p
                        self._remember(o, p)
        return found

    def local(self, origin: str) -> RobotsPolicy | None:
        p = self._local.get(origin)
        return p if p is not None and p.expires > time.time() else None

    def save(self, policies: dict[str, RobotsPolicy]) -> None:
        if not policies:
            return
        pipe = self.redis.pipeline(transaction=False)
        now = time.time()
        for o, p in policies.items():
            pipe.set(robots_key(o), p.dumps(), ex=max(1, int(p.expires - now + 1)))
            self._remember(o, p)
        pipe.execute()

    def _remember(self, origin: str, policy: RobotsPolicy) -> None:
        self._local[origin] = policy
        self._local.move_to_end(origin)
        while len(self._local) > self.size:
            self._local.popitem(last=False)


def policy_from_fetch(status: int | None, body: bytes, error: str | None, *, ttl: float,
                      retry_ttl: float, now: float | None = None) -> RobotsPolicy:
    now = time.time() if now is None else now
    if error in ("too_many_redirects", "redirect_loop"):
        return RobotsPolicy(404, "", now + ttl)  # RFC 9309: may be treated as unavailable (4xx)
    if error == "blocked_network":
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
