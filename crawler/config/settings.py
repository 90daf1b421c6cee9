"""One settings object: documented defaults < environment ``CRAWLER_<NAME>`` < CLI flags.

Every field has a default and a one-line doc (the ``doc`` metadata); the settings table of
``docs/settings.md`` is generated from this module (``crawler settings``) and a test checks they agree.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from crawler.config.brokers import parse_brokers, redis_database_problem
from crawler.config.credentials import parse_auth, parse_header
from crawler.config.scope import url_patterns
from crawler.errors import ConfigError, shown

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(specs: Iterable[str]) -> list[IPNetwork]:
    """CIDRs (``127.0.1.0/24``) or single addresses; a clear error names a bad one (the
    ``allow_networks`` setting, and the fetcher's network guard)."""
    out = []
    for spec in specs:
        try:
            out.append(ipaddress.ip_network(spec.strip(), strict=False))
        except ValueError as exc:
            raise ConfigError(f"not a network: {spec!r} ({exc})") from exc
    return out


def _s(default: Any, doc: str, *, job: bool = False) -> Any:
    # ``job`` marks settings that travel with a submitted job, so every worker applies the
    # submitter's values rather than its own environment.
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc, "job": job})
    return field(default=default, metadata={"doc": doc, "job": job})


@dataclass
class Settings:
    redis_url: str = _s("", "Redis for frontier and counters, and the broker unless broker_url names one; empty: `crawler crawl` starts a private one, workers use redis://127.0.0.1:6379/0; `redis+cluster://host:port,host:port` puts the state on a Redis Cluster (broker_url then names the broker)")
    sentinel_master: str = _s("mymaster", "With redis_url `sentinel://host:port;sentinel://host:port/0` (a Redis under Sentinel, for broker and state alike): the name of the master the sentinels watch; a sentinel broker_url may name its own (`#name`)")
    broker_url: str = _s("", "Celery broker of the task queues, if not redis_url: a redis:// or sentinel:// URL (`#name` after a sentinel one: its master's name), or several separated by commas, shard N's queue on the (N mod count)-th")
    shards: int = _s(4, "Number of shards (queues shard-0 .. shard-N-1)", job=True)
    frontier_split: bool = _s(False, "Split the job's frontier (host queues, leases, host records, the exact seen set, counters) into one part per shard, each under a Redis hash tag of its own, so on a Redis Cluster one job's frontier spreads over the masters; job-wide figures are the parts' summed, the job's max_pages is allotted to the parts as they admit, and concurrency is shared out among them. A split job's shard count may go down, and back up to its part count (nothing moves between parts; each part is served by a shard left), and while a shard is down its part stays where it is, dispatched to the shard standing in for it. Default: on when redis_url is a Redis Cluster (redis+cluster://), off on one Redis", job=True)
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
    robots_retry: float = _s(300.0, "Seconds a host whose robots.txt failed (5xx, timeout) stays disallowed before retrying; one that reached no server (dns, connect) is asked again after retry_base, its URLs failing as connect errors do", job=True)
    sitemaps: bool = _s(False, "Seed the job with the URLs of the Sitemap: files robots.txt lists", job=True)
    sitemap_max_urls: int = _s(50_000, "Page URLs taken from one origin's sitemaps at most (read one file at a time); more are counted `dropped_sitemap_cap`", job=True)
    max_attempts: int = _s(3, "Fetch attempts for retryable failures (dns, connect, timeout, 5xx, 429)", job=True)
    retry_base: float = _s(2.0, "Seconds before the first retry; doubles each attempt, with jitter", job=True)
    dedup: str = _s("auto", "Seen-set: bloom (Redis Bloom filter), set (exact, keeps shortest depths), auto (bloom unless --max-depth)", job=True)
    bloom_capacity: int = _s(1_000_000, "URLs the Bloom filter is sized for before it grows a layer", job=True)
    bloom_error_rate: float = _s(1e-6, "False-positive rate of the Bloom filter's first layer", job=True)
    near_duplicates: bool = _s(True, "Compute each page's simhash and mark near-duplicates of earlier pages", job=True)
    near_duplicate_distance: int = _s(3, "Pages whose simhashes differ in at most this many bits are near-duplicates", job=True)
    near_duplicate_budget: int = _s(1_000_000, "Pages the near-duplicate index of a job keeps at most (0: every page): the oldest are forgotten a generation at a time, so a page is compared with the last third to two thirds of this many pages indexed; about 100 bytes of Redis each", job=True)
    follow_near_duplicates: bool = _s(True, "Follow the links of near-duplicate pages", job=True)
    extract: str = _s("", "Store each HTML page's main text (trafilatura) in the content table as `text` or `markdown` (empty: off)", job=True)
    local_cache_size: int = _s(100_000, "URLs each worker process remembers as seen, to skip Redis (0: off)")
    max_pages_per_host: int = _s(100_000, "Pages admitted per host at most: stops session-id and calendar traps that other rules miss; generous, so a real site is rarely cut (0: no limit)", job=True)
    host_queue_cap: int = _s(2_000, "URLs one host's queue holds in Redis at most; the rest wait in the store's frontier table and come back as the queue runs low, so Redis memory grows with hosts, not URLs (0: no cap; a job without a store has none)", job=True)
    max_links_per_page: int = _s(5_000, "Links taken from one page at most (in document order); a page with more is counted `links_capped`, the rest `links_dropped` (0: no limit)", job=True)
    max_repeated_segments: int = _s(3, "URLs repeating one path segment more often are dropped as traps (0: no limit)", job=True)
    session_params: list[str] = _s([], "Query parameters stripped from every URL (seeds, links, the noise filter), besides the built-in session ids (jsessionid, phpsessid, aspsessionid, cfid, cftoken, oscsid, zenid; sid, sessionid, session_id, sessid when the value looks like a session id) and click trackers (utm_*, gclid, fbclid, ...)", job=True)
    max_query_variants: int = _s(100, "Links with an opaque token in their query (a session id, a nonce) found on a token-bearing page of the same host, or on a variant of the same path: at most this many per host, path and parameter names are admitted, the rest counted `dropped_trap:query_variants`; and at most this many near-duplicate pages of one host, path and parameter names expanded as pagination or for a spider's requests (0: no limit)", job=True)
    canonical_cache_size: int = _s(200_000, "Canonical URLs each worker process remembers, so repeated links skip recomputing (least recently used dropped first)")
    canonical_cache_bytes: int = _s(64_000_000, "Bytes of URLs that cache holds at most")
    robots_cache_size: int = _s(10_000, "Parsed robots.txt files each worker process keeps in front of Redis")
    robots_cache_bytes: int = _s(64_000_000, "Bytes of robots.txt (as parsed) that cache holds at most")
    http_clients: int = _s(8, "HTTP clients each worker process keeps open, one per network policy (allowed networks, resolve map); the least recently used is closed")
    job_cache_size: int = _s(256, "Jobs each worker process keeps settings and a Bloom filter handle for")
    open_stores: int = _s(16, "Stores and WARC writers each worker process keeps open; the least recently used is closed")
    allow_networks: list[str] = _s([], "Networks (CIDR) fetched although not public; by default loopback, private, link-local, CGNAT, multicast and reserved addresses are never contacted", job=True)
    resolve: list[str] = _s([], "Fixed DNS answers HOST=IP (like curl --resolve)", job=True)
    dns_ttl: float = _s(300.0, "Seconds a DNS answer is cached per worker process", job=True)
    concurrency: int = _s(64, "Requests in flight per job at most, over all hosts and shards", job=True)
    allow_domains: list[str] = _s([], "Registered domains in scope (empty: the seeds' own); when given they replace the seeds' domains, so list those too to keep them", job=True)
    allow_urls: list[str] = _s([], "Regular expressions (Python `re.search`); when any is given, a link is followed only if it matches one. Seeds are exempt. At most 1000 characters each; `re` has no timeout, so keep them simple. In the environment comma-separated (use the flag for a pattern with a comma)", job=True)
    deny_urls: list[str] = _s([], "Regular expressions (Python `re.search`); a link matching any is not followed, counted `links_denied_pattern`. Seeds are exempt; same limits as allow_urls", job=True)
    follow_nofollow: bool = _s(False, "Follow links marked rel=nofollow (Scrapy, wget and Heritrix follow them for discovery); off: they are dropped, counted `links_nofollow`. Meta robots nofollow is obeyed either way", job=True)
    spider: str = _s("", "The job's spider: package.module:Class, path/to/file.py:Class, or the name of an installed one (entry-point group crawler.spiders); empty: none", job=True)
    spider_version: str = _s("", "Set by submit: the spider's version; a worker with another version refuses the job", job=True)
    spider_start_requests: bool = _s(False, "Set by submit: the spider defines start_requests, read by one worker at a time while the job's backlog has room (start_requests_backlog); the job is not done before it is exhausted", job=True)
    spider_args: list[str] = _s([], "key=value arguments for the spider's constructor (Scrapy's -a); they travel in Redis, so never a secret", job=True)
    spider_paths: list[str] = _s([], "Submitter and worker: the directories spider files and modules may be loaded from (besides installed entry points), separated by the OS path separator or commas; a job naming a spider elsewhere is refused, never imported (`crawler crawl` adds its own spider's directory for its own workers)")
    auth: list[str] = _s([], "Credentials per host, by secret name, never value: HOST=basic:NAME (the secret holds user:password) or HOST=bearer:NAME; each worker reads NAME from CRAWLER_SECRET_<NAME> or its secrets_file, and sends it to that host only", job=True)
    session_headers: list[str] = _s([], "Default request headers of the job's session, 'Name: value' (not secret: they travel with the job; Authorization and Cookie are refused). In the environment comma-separated (use the flag for a value with a comma)", job=True)
    cookies: bool = _s(False, "Keep the job's cookies (a bounded jar in Redis shared by its workers, never by other jobs); on by itself for a spider that logs in", job=True)
    max_logins: int = _s(10, "Login attempts per job at most (the first and every re-login after the session ended); past it pages are stored as fetched, counted `session_ended_stored`", job=True)
    login_wait: float = _s(60.0, "Seconds one worker may spend logging in (its lock lapses then); the others wait for it that long at most, and never past half of lease_timeout", job=True)
    secrets_file: str = _s("", "Worker: a file of NAME=value lines (mode 600) holding the secrets jobs name, after CRAWLER_SECRET_<NAME> variables")
    secret_key_file: str = _s("", "Worker: a file (mode 600) of Fernet keys, one a line, sealing session cookies in Redis (the first seals, all open: rotation), read when CRAWLER_SECRET_KEY (the same, comma-separated) is unset; a worker with neither refuses jobs that keep a session, `crawler crawl` makes one per run")
    max_items_per_page: int = _s(1000, "Items stored from one page at most; more are counted `items_capped`", job=True)
    max_item_bytes: int = _s(1_000_000, "Bytes of one page's items (as JSON) at most; the items past it are counted `items_capped`", job=True)
    item_pipelines: list[str] = _s([], "Item pipelines every item of the job passes through where it is stored, in order, after the spider's own `pipelines`: package.module:Class or path/to/file.py:Class, found like spiders (installed, or under spider_paths; never imported by the submitter)", job=True)
    start_requests_backlog: int = _s(10_000, "URLs a job may have queued in Redis before its spider's start_requests is asked for more (consumed lazily by one worker at a time)", job=True)
    render: str = _s("never", "Pages rendered in headless Chromium before parsing (workers started with -Q render): `never`; `always` (every HTML page); `auto` (per host: a sample rendered, and the host kept rendering only where that yields materially more links or text; rechecked now and then)", job=True)
    render_sample: int = _s(3, "With render=auto: pages of a new host rendered before deciding", job=True)
    render_more_links: int = _s(3, "With render=auto: a rendered page gains when it has at least this many more links than its HTML; a host is rendered while at least half of its compared pages gain", job=True)
    render_more_text: int = _s(400, "With render=auto: ... or at least this many more characters of visible text", job=True)
    render_recheck: int = _s(50, "With render=auto: one page in this many of a decided host is rendered again to check the decision", job=True)
    render_timeout: float = _s(15.0, "Seconds a page may take to load and settle in the browser; past it the page is stored from its HTML with the reason", job=True)
    render_settle: float = _s(0.5, "Seconds with none of the page's requests under way, no change to its document and no short timer pending, after load, before the rendered page is read", job=True)
    render_block_types: list[str] = _s(["image", "media", "font"], "Resource types of a page the browser does not load (Chromium's names: image, media, font, stylesheet, script, xhr, fetch, ...); counted `render_blocked:type_<type>`", job=True)
    render_cdn_hosts: list[str] = _s([], "Hosts besides the page's own site (its registered domain) and the job's domains the browser may load a page's scripts, data and styles from (CDNs); others are counted `render_blocked:third_party`", job=True)
    render_max_requests: int = _s(100, "Requests one rendered page may make at most (its document aside); more are counted `render_blocked:too_many`", job=True)
    render_max_bytes: int = _s(20_000_000, "Bytes one rendered page may load at most (its document aside); past it requests are counted `render_blocked:too_large`", job=True)
    render_pages: int = _s(4, "Worker: pages one render worker process renders at once (one browser)")
    # From bench.render (docs/benchmarks.md): memory stayed flat at 650-750 MB whether restarted every
    # 5, 25 or 200 pages, with no measurable cost in pages/s; the count only bounds a leaking site's growth.
    render_recycle_pages: int = _s(100, "Worker: a browser is restarted after rendering this many pages")
    render_max_rss: int = _s(1024, "Worker: a browser whose processes use more memory than this (MB; PSS summed over the browser's processes) is restarted")
    chromium: str = _s("", "Worker: the Chromium binary for rendering (empty: /usr/bin/chromium or chromium on PATH)")
    noise_links: str = _s("follow", "`skip`: links in blocks mostly made of link text (navigation, footers, tag clouds) or whose URL clusters with such links on the same site are not followed, counted `links_noise_block` and `links_noise_pattern`; the page's stored outlinks keep them. `follow`: off", job=True)
    user_agent: str = _s("crawler/0.1 (+https://example.invalid/bot)", "User-Agent header sent with every request", job=True)
    fetch_batch: int = _s(32, "Requests per fetch task at most (a host's run counts as one)", job=True)
    host_run: int = _s(8, "With per_host 1: URLs one host may give a fetch task at once when the job's concurrency has room, fetched one after another its delay apart (at most half a second of its delay in all), so a crawl of few hosts pays a task's overhead per run rather than per page; a retryable failure hands the rest back untried (1: a URL at a time)", job=True)
    connect_timeout: float = _s(5.0, "Seconds to open a connection", job=True)
    read_timeout: float = _s(10.0, "Seconds to wait for each read", job=True)
    request_deadline: float = _s(30.0, "Seconds for a whole request including redirects and body", job=True)
    max_redirects: int = _s(5, "Redirect hops followed at most", job=True)
    max_body: int = _s(5_000_000, "Bytes of body kept at most; longer bodies are cut and recorded `too_large`", job=True)
    max_url_length: int = _s(2048, "Longer URLs are dropped as `bad_url`", job=True)
    refuse_types: list[str] = _s([], "Content-type prefixes the job refuses (e.g. `image/,application/pdf`): such a response is stored with its status and type as `refused_type`, its body never read. Without a spider only HTML bodies are read anyway (others are `not_html`); with one, every other type reaches its callbacks", job=True)
    max_request_bytes: int = _s(65536, "Bytes a spider's request may carry at most (its callback, cb_kwargs, meta, headers and body as JSON); a bigger one is dropped, counted `spider_error:request_too_large`", job=True)
    lease_timeout: float = _s(60.0, "Seconds a dispatched URL may stay unstored before it returns to its host queue")
    visibility_timeout: int = _s(600, "Seconds before Redis redelivers an unacknowledged task (longer than any task)")
    task_time_limit: int = _s(300, "Hard time limit of one task, seconds (shorter than the visibility timeout)")
    max_redeliveries: int = _s(3, "Deliveries of one task message before it is dropped and counted `poison`")
    store_retry_for: float = _s(900.0, "Seconds a store task retries, with backoff, a store that is down (PostgreSQL restart, outage, failed WARC write) before it gives up")
    warc_max_size: int = _s(1_000_000_000, "Bytes per WARC file before a new one is started")
    store: str = _s("", "Store URL, e.g. sqlite:///out/crawl.db (default for `crawl`: DIR/crawl.db)", job=True)
    warc_dir: str = _s("", "Directory for WARC files (default: next to an SQLite store, in warc/)", job=True)
    store_root: str = _s("", "Worker: the SQLite stores and WARC directories a job names must lie under this directory, relative ones resolve against it (empty: anywhere; `make up` sets it)")
    store_hosts: list[str] = _s([], "Worker: the database hosts a job's postgresql store may name (empty: any; `make up` sets it)")
    warc: bool = _s(True, "Keep every response in WARC files (0: store rows only)", job=True)
    every: float = _s(0.0, "Run the job in cycles this many seconds apart (`--every 6h`); 0: once", job=True)
    cron: str = _s("", "Run the job in cycles on this cron schedule, UTC (`--cron '0 */6 * * *'`)", job=True)
    revisit_min: float = _s(0.0, "A page is revisited at most this often, seconds (adaptive revisits); 0: the job's period (`--every`, or a cron job's gap between runs), capped at revisit_max", job=True)
    revisit_max: float = _s(30 * 86400.0, "A page is revisited at least this often, seconds; gone pages are checked again after this", job=True)
    revisit_grow: float = _s(1.5, "An unchanged page's revisit interval is multiplied by this", job=True)
    revisit_shrink: float = _s(0.5, "A changed page's revisit interval is multiplied by this", job=True)
    cycle_check: float = _s(5.0, "Seconds between the beat's checks for periodic jobs whose next cycle is due")
    beat_lock_ttl: float = _s(30.0, "Seconds the acting beat's Redis lock lasts unless renewed; a second beat waits it out")
    takeover_after: int = _s(10, "Heartbeats every worker of a shard may miss before its hosts are served by their runner-up shards (0: never)")
    task_events: bool = _s(True, "Workers send task events (Flower needs them; `crawler crawl` turns them off)")
    workers: int = _s(2, "Worker processes `crawler crawl` starts")
    progress_interval: float = _s(2.0, "Seconds between progress log lines when not on a terminal")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``CRAWLER_<NAME>`` variables, then non-None ``overrides``. Raises
        SettingError (one line naming the setting) for any value that is not usable."""
        env = os.environ if env is None else env
        given = {k: v for k, v in overrides.items() if v is not None}
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"CRAWLER_{f.name.upper()}")
            # An explicit value replaces the variable, so a bad variable it replaces is moot.
            if raw is not None and f.name not in given:
                values[f.name] = _parse(f, raw)
        values.update(given)
        if "frontier_split" not in values and str(values.get("redis_url") or "").startswith("redis+cluster://"):
            # On a Redis Cluster a job's frontier spreads over the masters unless told not to:
            # under one tag one master carries all of it, whatever the cluster's size.
            values["frontier_split"] = True
        return cls(**values).validated()

    def validated(self) -> Settings:
        """Self, if every field has its type and lies in its range; else SettingError."""
        for f in fields(self):
            _check_field(f, getattr(self, f.name))
        try:
            parse_networks(self.allow_networks)
        except ValueError as exc:
            raise SettingError(f"setting allow_networks: {exc}") from None
        for item in self.resolve:
            _check_resolve(item)
        try:
            for item in self.auth:
                parse_auth(item)
            for item in self.session_headers:
                parse_header(item)
        except ConfigError as exc:
            raise SettingError(f"setting {'auth' if item in self.auth else 'session_headers'}: {exc}") from None
        try:
            url_patterns(self.allow_urls, self.deny_urls)
        except ConfigError as exc:
            raise SettingError(str(exc)) from None
        if self.cron:
            from crawler.config.schedule import parse_cron

            try:
                parse_cron(self.cron)
            except ValueError as exc:
                raise SettingError(f"setting cron: {exc}") from None
            if self.every:
                raise SettingError("give either every or cron, not both")
        if self.revisit_min > self.revisit_max:
            raise SettingError(f"revisit_min ({self.revisit_min:g} s) is longer than revisit_max ({self.revisit_max:g} s)")
        if self.takeover_after and self.takeover_after < 2:
            raise _bad("takeover_after", "must be 0 (off) or >= 2 heartbeats", self.takeover_after)
        if self.redis_url.startswith("redis+cluster://") and not self.broker_url:
            raise SettingError("redis_url is a Redis Cluster, which holds crawl state but not Celery's queues: "
                               "set broker_url (CRAWLER_BROKER_URL) to a redis:// or sentinel:// broker")
        if self.broker_url:
            try:
                parse_brokers(self.broker_url, self.redis_url, self.sentinel_master)
            except ConfigError as exc:
                raise SettingError(f"setting broker_url: {exc}") from None
        if self.task_time_limit >= self.visibility_timeout:
            raise SettingError("task_time_limit must be shorter than visibility_timeout, or Redis redelivers running tasks")
        return self

    @property
    def periodic(self) -> bool:
        return bool(self.every or self.cron)

    @property
    def uses_bloom(self) -> bool:
        # Depth limits need each URL's shortest depth, which only the exact set can hold.
        return self.dedup == "bloom" or (self.dedup == "auto" and not self.max_depth)

    @property
    def dropped_params(self) -> frozenset[str]:
        """``session_params`` as ``urls.canonicalize`` takes them (lower-case names)."""
        return frozenset(p.lower() for p in self.session_params)

    def job_settings(self) -> dict[str, Any]:
        """The settings that travel with a job to every worker."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["job"]}

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes).validated()


CACHE_LIMITS = ("canonical_cache_size", "canonical_cache_bytes", "robots_cache_size", "robots_cache_bytes",
                "http_clients", "job_cache_size", "open_stores")


def process_limit(name: str, env: Mapping[str, str] | None = None) -> int:
    """One of ``CACHE_LIMITS`` for a cache built at import, before any settings are read: a
    value that is not a positive integer falls back to the default here, and
    ``Settings.from_env`` (which every entry point calls) reports it as the error it is."""
    f = next(f for f in fields(Settings) if f.name == name)
    raw = (os.environ if env is None else env).get(f"CRAWLER_{name.upper()}")
    default: Any = f.default  # every cache limit has a plain int default, not a factory
    try:
        value = int(raw) if raw is not None else int(default)
    except ValueError:
        value = int(default)
    return value if value >= 1 else int(default)


class SettingError(ConfigError):
    """A setting's value cannot be used; the message is one line naming the setting."""


def _bad(name: str, rule: str, value: Any) -> SettingError:
    return SettingError(f"setting {name}: {rule}, got {shown(value)}")


_BOOLEANS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}
# Ranges of the numeric settings, as (lowest, lowest allowed itself, highest or None); any number
# not named here must be >= 0. Numbers must also be finite: a NaN compares false with every
# bound, so it would pass any range check and fail later, half-way through a Lua script.
_RANGES: dict[str, tuple[float, bool, float | None]] = {
    # Beyond this a job's start wakes (and a dispatcher polls) more shards than any deployment has.
    "shards": (1, True, 1024),
    **dict.fromkeys(("per_host", "concurrency", "fetch_batch", "max_attempts", "bloom_capacity", "max_url_length",
                     "visibility_timeout", "task_time_limit", "warc_max_size", "workers", "sitemap_max_urls",
                     "max_body", "max_redeliveries", "max_items_per_page", "max_item_bytes", "max_logins", "max_request_bytes", "start_requests_backlog",
                     "render_sample", "render_recheck", "render_pages", "render_max_requests", "render_max_bytes", "render_recycle_pages", "render_max_rss",
                     *CACHE_LIMITS),
                    (1, True, None)),
    **dict.fromkeys(("connect_timeout", "read_timeout", "request_deadline", "lease_timeout", "revisit_max",
                     "cycle_check", "beat_lock_ttl", "progress_interval", "store_retry_for", "login_wait",
                     "render_timeout"),
                    (0, False, None)),
    "bloom_error_rate": (0, False, 0.5),
    "near_duplicate_distance": (0, True, 64),
    "host_run": (1, True, 64),
    "revisit_grow": (1, True, None),
    "revisit_shrink": (0, False, 1),
}
# The main-text formats ``extract`` may name ("" is off); the extractor's own ``Format``.
EXTRACT_FORMATS = ("", "text", "markdown")
_HINTS = {"revisit_min": " (0: the job's period)"}
# Sent as HTTP header values: printable ASCII only, or one line could carry a second header.
_HEADER_VALUES = frozenset({"user_agent", "robots_user_agent"})
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ITEM_UNSAFE = re.compile(r"[\x00-\x20\x7f-\x9f]|\s")  # list items: one token each
_SCHEMES = {"redis_url": ("redis", "rediss", "unix", "sentinel", "redis+cluster"), "store": ("sqlite", "postgresql", "postgres")}
_EXAMPLES = {"redis_url": "redis://host:6379/0", "store": "sqlite:///path/crawl.db"}


def _kind(f: dataclasses.Field[Any]) -> type:
    return type(f.default) if f.default is not dataclasses.MISSING else list


def _parse(f: dataclasses.Field[Any], raw: str) -> Any:
    return parse_text(f.name, raw, f"CRAWLER_{f.name.upper()}")


def parse_text(name: str, raw: str, source: str) -> Any:
    """A setting given as text (an environment variable, a command-line flag: ``source``) as
    the field's type: strict booleans, finite numbers in range. SettingError otherwise."""
    kind = _kind(_FIELDS[name])
    if kind is bool:
        value = _BOOLEANS.get(raw.strip().lower())
        if value is None:
            raise _bad(name, f"{source} must be one of 1/0, true/false, yes/no, on/off", raw)
        return value
    if kind is list:
        # Directories, like PATH: the OS path separator separates them too.
        separators = f"[,{re.escape(os.pathsep)}]" if name == "spider_paths" else ","
        return [p.strip() for p in re.split(separators, raw) if p.strip()]
    if kind is str:
        return raw
    try:
        number = kind(raw)
    except ValueError:
        raise _bad(name, f"{source} must be {'an integer' if kind is int else 'a number'}", raw) from None
    _check_number(name, kind, number, shown_as=raw)
    return number


def _check_field(f: dataclasses.Field[Any], value: Any) -> None:
    """The field's type, range and characters, whichever way the value came in (environment,
    flag, a submitted job's JSON, a caller's keyword)."""
    name, kind = f.name, _kind(f)
    if kind is bool:
        if not isinstance(value, bool):
            raise _bad(name, "must be true or false", value)
    elif kind in (int, float):
        _check_number(name, kind, value)
    elif kind is str:
        if not isinstance(value, str):
            raise _bad(name, "must be a string", value)
        if name in _HEADER_VALUES and not _PRINTABLE_ASCII.fullmatch(value):
            raise _bad(name, "must be printable ASCII (no control characters or line breaks)", value)
        if _CONTROL.search(value):
            raise _bad(name, "must not hold control characters", value)
        schemes = _SCHEMES.get(name)
        if schemes and value:
            scheme, sep, _ = value.partition("://")
            if not sep:
                raise _bad(name, f"has no scheme (try {_EXAMPLES[name]})", value)
            if scheme not in schemes:
                raise _bad(name, f"must be a {' or '.join(s + '://' for s in schemes)} URL", value)
            if name == "redis_url" and (problem := redis_database_problem(value)):
                raise SettingError(f"setting {name}: {problem}")
        if name == "dedup" and value not in ("auto", "bloom", "set"):
            raise _bad(name, "must be auto, bloom or set", value)
        if name == "extract" and value not in EXTRACT_FORMATS:
            raise _bad(name, "must be text or markdown (empty: off)", value)
        if name == "render" and value not in ("never", "always", "auto"):
            raise _bad(name, "must be never, always or auto", value)
        if name == "noise_links" and value not in ("follow", "skip"):
            raise _bad(name, "must be follow or skip", value)
    elif kind is list:
        if not isinstance(value, (list, tuple)):
            raise _bad(name, "must be a list", value)
        for item in value:
            # Spider arguments are values a user types, spaces and all; other lists hold tokens.
            unsafe = _CONTROL if name in ("spider_args", "session_headers", "spider_paths", "item_pipelines") else _ITEM_UNSAFE
            if not isinstance(item, str) or not item or unsafe.search(item):
                raise _bad(name, "items must be non-empty strings without spaces or control characters", item)


def _check_number(name: str, kind: type, value: Any, shown_as: Any = None) -> None:
    lo, lo_ok, hi = _RANGES.get(name, (0, True, None))
    what = "an integer" if kind is int else "a finite number"
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise _bad(name, f"must be {what}", value)
    bound = f">= {lo:g}" if lo_ok else f"> {lo:g}"
    if hi is not None:
        bound += f" and <= {hi:g}"
    bound += _HINTS.get(name, "")
    if not math.isfinite(value) or value < lo or (value == lo and not lo_ok) or (hi is not None and value > hi):
        raise _bad(name, f"must be {what} {bound}", value if shown_as is None else shown_as)


def _check_resolve(item: str) -> None:
    host, sep, ip = item.partition("=")
    if not sep or not host:
        raise _bad("resolve", "entries must be HOST=IP", item)
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise _bad("resolve", f"{host[:60]}=... must name an IP address", ip) from None


_FIELDS = {f.name: f for f in fields(Settings)}


def settings_table() -> str:
    """The settings table of docs/settings.md, generated so the two cannot drift apart."""
    rows = ["| setting | env | default | meaning |", "|---|---|---|---|"]
    for f in fields(Settings):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]  # a field without a default has a factory (see _s); the checker cannot tie the two
        rows.append(f"| `{f.name}` | `CRAWLER_{f.name.upper()}` | `{default!r}` | {f.metadata['doc']} |")
    return "\n".join(rows)
