"""One settings object: documented defaults < environment ``CRAWLER_<NAME>`` < CLI flags.

Every field has a default and a one-line doc (the ``doc`` metadata); the README's settings table
is generated from this module (``crawler settings``) and a test checks they agree.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


def _s(default: Any, doc: str, *, job: bool = False) -> Any:
    # ``job`` marks settings that travel with a submitted job, so every worker applies the
    # submitter's values rather than its own environment.
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc, "job": job})
    return field(default=default, metadata={"doc": doc, "job": job})


@dataclass
class Settings:
    redis_url: str = _s("", "Redis for broker, frontier and counters; empty: `crawler crawl` starts a private one, workers use redis://127.0.0.1:6379/0")
    shards: int = _s(4, "Number of shards (queues shard-0 .. shard-N-1)", job=True)
    max_pages: int = _s(0, "Stop admitting URLs after this many (0: no limit)", job=True)
    max_depth: int = _s(0, "Follow links at most this many hops from a seed (0: no limit)", job=True)
    delay: float = _s(0.0, "Seconds between the end of one request to a host and the start of the next", job=True)
    per_host: int = _s(1, "Requests in flight per host at most", job=True)
    per_ip: int = _s(0, "Requests in flight per IP address at most, over all its host names (0: same as per_host)", job=True)
    autothrottle: bool = _s(True, "Adapt each host's delay: grow it with response time and on 429/503, shrink it back while healthy", job=True)
    max_delay: float = _s(60.0, "Adaptive delays and Retry-After never exceed this many seconds", job=True)
    obey_robots: bool = _s(True, "Fetch and obey robots.txt (RFC 9309)", job=True)
    robots_user_agent: str = _s("crawler", "User-agent token matched against robots.txt groups", job=True)
    robots_ttl: float = _s(86400.0, "Seconds a fetched robots.txt is cached (shared by all workers)", job=True)
    robots_retry: float = _s(300.0, "Seconds a host whose robots.txt failed (5xx, unreachable) stays disallowed before retrying", job=True)
    sitemaps: bool = _s(False, "Seed the job with the URLs of the Sitemap: files robots.txt lists", job=True)
    max_attempts: int = _s(3, "Fetch attempts for retryable failures (dns, connect, timeout, 5xx, 429)", job=True)
    retry_base: float = _s(2.0, "Seconds before the first retry; doubles each attempt, with jitter", job=True)
    dedup: str = _s("auto", "Seen-set: bloom (Redis Bloom filter), set (exact, keeps shortest depths), auto (bloom unless --max-depth)", job=True)
    bloom_capacity: int = _s(1_000_000, "URLs the Bloom filter is sized for before it grows a layer", job=True)
    bloom_error_rate: float = _s(1e-6, "False-positive rate of the Bloom filter's first layer", job=True)
    near_duplicates: bool = _s(True, "Compute each page's simhash and mark near-duplicates of earlier pages", job=True)
    near_duplicate_distance: int = _s(3, "Pages whose simhashes differ in at most this many bits are near-duplicates", job=True)
    follow_near_duplicates: bool = _s(True, "Follow the links of near-duplicate pages", job=True)
    local_cache_size: int = _s(100_000, "URLs each worker process remembers as seen, to skip Redis (0: off)")
    max_pages_per_host: int = _s(0, "Pages admitted per host at most: stops session-id and calendar traps (0: no limit)", job=True)
    max_repeated_segments: int = _s(3, "URLs repeating one path segment more often are dropped as traps (0: no limit)", job=True)
    allow_networks: list = _s([], "Networks (CIDR) fetched although not public; by default loopback, private, link-local, CGNAT, multicast and reserved addresses are never contacted", job=True)
    resolve: list = _s([], "Fixed DNS answers HOST=IP (like curl --resolve)", job=True)
    dns_ttl: float = _s(300.0, "Seconds a DNS answer is cached per worker process", job=True)
    concurrency: int = _s(64, "Requests in flight per job at most, over all hosts and shards", job=True)
    allow_domains: list = _s([], "Registered domains in scope (empty: the seeds' own)", job=True)
    user_agent: str = _s("crawler/0.1 (+https://example.invalid/bot)", "User-Agent header sent with every request", job=True)
    fetch_batch: int = _s(32, "URLs per fetch task at most", job=True)
    connect_timeout: float = _s(5.0, "Seconds to open a connection", job=True)
    read_timeout: float = _s(10.0, "Seconds to wait for each read", job=True)
    request_deadline: float = _s(30.0, "Seconds for a whole request including redirects and body", job=True)
    max_redirects: int = _s(5, "Redirect hops followed at most", job=True)
    max_body: int = _s(5_000_000, "Bytes of body kept at most; longer bodies are cut and recorded `too_large`", job=True)
    max_url_length: int = _s(2048, "Longer URLs are dropped as `bad_url`", job=True)
    lease_timeout: float = _s(60.0, "Seconds a dispatched URL may stay unstored before it returns to its host queue")
    visibility_timeout: int = _s(600, "Seconds before Redis redelivers an unacknowledged task (longer than any task)")
    task_time_limit: int = _s(300, "Hard time limit of one task, seconds (shorter than the visibility timeout)")
    max_redeliveries: int = _s(3, "Deliveries of one task message before it is dropped and counted `poison`")
    warc_max_size: int = _s(1_000_000_000, "Bytes per WARC file before a new one is started")
    store: str = _s("", "Store URL, e.g. sqlite:///out/crawl.db (default for `crawl`: DIR/crawl.db)", job=True)
    warc_dir: str = _s("", "Directory for WARC files (default: next to an SQLite store, in warc/)", job=True)
    warc: bool = _s(True, "Keep every response in WARC files (0: store rows only)", job=True)
    every: float = _s(0.0, "Run the job in cycles this many seconds apart (`--every 6h`); 0: once", job=True)
    cron: str = _s("", "Run the job in cycles on this cron schedule, UTC (`--cron '0 */6 * * *'`)", job=True)
    revisit_min: float = _s(3600.0, "A page is revisited at most this often, seconds (adaptive revisits)", job=True)
    revisit_max: float = _s(30 * 86400.0, "A page is revisited at least this often, seconds; gone pages are checked again after this", job=True)
    revisit_grow: float = _s(1.5, "An unchanged page's revisit interval is multiplied by this", job=True)
    revisit_shrink: float = _s(0.5, "A changed page's revisit interval is multiplied by this", job=True)
    cycle_check: float = _s(5.0, "Seconds between the beat's checks for periodic jobs whose next cycle is due")
    beat_lock_ttl: float = _s(30.0, "Seconds the acting beat's Redis lock lasts unless renewed; a second beat waits it out")
    task_events: bool = _s(True, "Workers send task events (Flower needs them; `crawler crawl` turns them off)")
    workers: int = _s(2, "Worker processes `crawler crawl` starts")
    progress_interval: float = _s(2.0, "Seconds between progress log lines when not on a terminal")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``CRAWLER_<NAME>`` variables, then non-None ``overrides``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"CRAWLER_{f.name.upper()}")
            if raw is not None:
                values[f.name] = _parse(f, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values).validated()

    def validated(self) -> Settings:
        for name in ("shards", "per_host", "concurrency", "fetch_batch", "max_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"setting {name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_pages", "max_depth", "delay", "max_redirects", "max_body"):
            if getattr(self, name) < 0:
                raise ValueError(f"setting {name} must be >= 0, got {getattr(self, name)}")
        from crawler.fetch.netguard import parse_networks

        if self.dedup not in ("auto", "bloom", "set"):
            raise ValueError(f"setting dedup must be auto, bloom or set, got {self.dedup!r}")

        parse_networks(self.allow_networks)
        if self.every < 0:
            raise ValueError(f"setting every must be >= 0, got {self.every}")
        if self.cron:
            from crawler.schedule import parse_cron

            parse_cron(self.cron)
            if self.every:
                raise ValueError("give either every or cron, not both")
        if not 0 < self.revisit_min <= self.revisit_max:
            raise ValueError(f"need 0 < revisit_min <= revisit_max, got {self.revisit_min}, {self.revisit_max}")
        if self.revisit_grow < 1 or not 0 < self.revisit_shrink <= 1:
            raise ValueError("need revisit_grow >= 1 and 0 < revisit_shrink <= 1")
        for item in self.resolve:
            if "=" not in item:
                raise ValueError(f"resolve entry {item!r} is not HOST=IP")
        if self.task_time_limit >= self.visibility_timeout:
            raise ValueError("task_time_limit must be shorter than visibility_timeout, or Redis redelivers running tasks")
        return self

    @property
    def periodic(self) -> bool:
        return bool(self.every or self.cron)

    @property
    def uses_bloom(self) -> bool:
        # Depth limits need each URL's shortest depth, which only the exact set can hold.
        return self.dedup == "bloom" or (self.dedup == "auto" and not self.max_depth)

    def job_settings(self) -> dict[str, Any]:
        """The settings that travel with a job to every worker."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["job"]}

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes).validated()


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    kind = type(f.default) if f.default is not dataclasses.MISSING else list
    try:
        if kind is bool:
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if kind is list:
            return [p.strip() for p in raw.split(",") if p.strip()]
        return kind(raw)
    except ValueError as exc:
        raise ValueError(f"CRAWLER_{f.name.upper()}={raw!r}: expected {kind.__name__}") from exc


def settings_table() -> str:
    """The README's settings table, generated so the two cannot drift apart."""
    rows = ["| setting | env | default | meaning |", "|---|---|---|---|"]
    for f in fields(Settings):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append(f"| `{f.name}` | `CRAWLER_{f.name.upper()}` | `{default!r}` | {f.metadata['doc']} |")
    return "\n".join(rows)
