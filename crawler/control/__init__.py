"""Steering jobs: the one code path behind the ``crawler`` command, the REST API and the console.

Plain functions over Redis (and a job's store, for pages, items and dead links); errors are the
crawler's own, with the one-line messages the CLI prints: ``JobNotFound`` (a KeyError) for an
unknown job, ``ConfigError`` (a ValueError; ``SettingError`` for a setting) for a value that
cannot be used. ``by`` names who asked (a user, ``api:<address>``), for the job's log.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from redis import Redis
from redis.exceptions import WatchError

from crawler import jobs
from crawler.config.redact import has_password, redact, redact_settings
from crawler.config.settings import SettingError, Settings, parse_text
from crawler.dedup.bloom import BloomSeen
from crawler.dedup.variants import QueryVariants
from crawler.errors import ConfigError, JobNotFound
from crawler.frontier import Frontier, HostOverride, HostStats, liveshards, takeover
from crawler.lru import LRU
from crawler.render.browser import RenderUnavailable, chromium_path
from crawler.render.decide import decisions as render_decisions
from crawler.render.decide import evidence as render_evidence
from crawler.spiders.loader import prepare
from crawler.state import joblog, keys, nodes

# What the command line's polls use to wait out a failover.
from crawler.state.conn import OUTAGE_GRACE as OUTAGE_GRACE
from crawler.state.conn import check_version, connect, is_cluster_client
from crawler.state.conn import through_outage as through_outage
from crawler.store import PageStore, open_store
from crawler.store.base import StoreRefused
from crawler.store.place import default_warc_dir, sqlite_path

# Settings an operator may change while the job runs. Every worker reads a job's settings again
# at most ``jobs.load``'s max_age (5 s) after they change, so that is how soon they apply.
RUNTIME = ("delay", "per_host", "per_ip", "concurrency", "max_pages", "max_depth", "max_pages_per_host",
           "obey_robots", "user_agent", "robots_user_agent", "autothrottle", "max_delay", "max_attempts",
           "fetch_batch", "host_run")
HOST_SORTS = ("host", "queued", "inflight", "delay", "fetched", "errors", "admitted")
_HOST_RE = re.compile(r"[a-z0-9.\-\[\]:_]{1,300}")
HOSTS_SNAPSHOT_AGE = 2.0  # seconds one computed host table serves every page and sort of it
_host_tables: LRU[str, tuple[float, list[HostStats]]] = LRU(32)


# A job's states, as its status reports them.
RUNNING, PAUSED, WAITING, FINISHED = jobs.RUNNING, jobs.PAUSED, jobs.WAITING, jobs.FINISHED


def client(url: str) -> Redis:
    """A client for the crawler's Redis at ``url`` (timeouts as every client's), its server's
    version checked; ConfigError for a URL redis-py cannot read."""
    try:
        got = connect(url)
    except ValueError as exc:  # redis-py's verdict on the URL's form
        raise ConfigError(str(exc)) from exc
    check_version(got)
    return got


def _exists(r: Redis, job_id: str) -> None:
    if not jobs.exists(r, job_id):
        raise JobNotFound(f"no such job: {job_id}")


# -- jobs ------------------------------------------------------------------------------------

def list_jobs(r: Redis, limit: int = 200) -> list[dict[str, Any]]:
    """The newest ``limit`` jobs Redis knows, newest first: id, status, created_at, seeds and the
    counters an overview shows."""
    out = []
    for job_id in jobs.known(r)[:limit]:
        try:
            st = jobs.status(r, job_id)
        except JobNotFound:
            continue  # purged meanwhile
        c = st["counters"]
        out.append({"id": job_id, "status": st["status"], "created_at": float(st.get("created_at") or 0),
                    "finished_at": float(st["finished_at"]) if st.get("finished_at") else None,
                    "seeds": json.loads(st.get("seeds") or "[]")[:5], "stored": c.get("stored", 0),
                    "open": c.get("open", 0), "errors": sum(v for k, v in c.items() if k.startswith("error:")),
                    "error": st.get("error", "")})
    return out


def typed_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """Settings given as text (a form, a flag) read as their types, as the CLI reads them; typed
    values (JSON) pass as they are and are checked by ``Settings``."""
    known = set(Settings.__dataclass_fields__)
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in known:
            raise SettingError(f"no setting named {name!r}")
        if value is None:
            # Read as "not given", a null took each worker's own environment's value instead.
            raise SettingError(f"setting {name}: null is not a value (leave the setting out for its default)")
        out[name] = parse_text(name, value, "the value") if isinstance(value, str) else value
    return out


def submit(r: Redis, values: Mapping[str, Any], seeds: list[str], by: str = "") -> tuple[str, list[str]]:
    """Submit a job (settings by name, as text or typed); returns its id and warnings for the
    submitter. Its store must be given and usable from here, as workers will need it."""
    given = typed_settings(values)
    if "frontier_split" not in given and "CRAWLER_FRONTIER_SPLIT" not in os.environ:
        # The default follows the Redis the job goes to (``crawler web --redis-url``), not
        # whichever URL this process's environment names.
        given["frontier_split"] = is_cluster_client(r)
    settings = Settings.from_env(**{k: v for k, v in given.items() if k != "spider_paths"})
    # Where spider code may come from is this process's own setting, never a submitter's.
    if "spider_paths" in given and given["spider_paths"] != settings.spider_paths:
        raise SettingError("setting spider_paths: set by the operator (CRAWLER_SPIDER_PATHS), not per job")
    if not settings.store:
        raise ConfigError("a store URL is required (e.g. sqlite:///data/crawl.db)")
    settings, seeds = prepare(settings, seeds)  # reads the spider's file, never runs it
    if seeds or not settings.spider_start_requests:  # a spider's start_requests may be all it starts from
        jobs.canonical_seeds(seeds, settings.max_url_length)  # before the store file is created
    _opened(settings.store).close()  # fail here, not in every worker, if the URL is wrong
    warnings = []
    if settings.warc and not settings.warc_dir:
        settings = dataclasses.replace(settings, warc_dir=default_warc_dir(settings.store))
        if not settings.warc_dir:
            warnings.append("no WARC files are kept: a PostgreSQL store has no directory beside it for them; "
                            "give --warc-dir DIR (a directory every worker can write), or warc=0")
    if has_password(settings.store):
        warnings.append("the store password is not passed on to workers (the job's settings are readable by "
                        "anyone with access to Redis); give workers PGPASSWORD or a ~/.pgpass entry")
    if settings.render != "never":
        try:
            chromium_path(settings.chromium)
        except RenderUnavailable as exc:
            # The render workers may well be other machines: this one only submits.
            warnings.append(f"{exc}; pages wait for a worker started with -Q render")
    warnings += _relative_store(settings.store)
    job_id = jobs.submit(r, settings, seeds, by=by)
    # A shard no worker serves holds its hosts' URLs for ever: say so now, not after a silent wait.
    warnings += shard_lines(r, takeover.shard_states(r, settings.shards))
    warnings += render_lines(r, settings.render)
    return job_id, warnings


def _relative_store(store_url: str) -> list[str]:
    """A warning for an SQLite store given by a relative path: this process writes the job's
    record against its own directory, each worker its pages against its own (or its
    CRAWLER_STORE_ROOT), so unless they share one the job is split over two files."""
    path = sqlite_path(store_url)
    if not path or os.path.isabs(path):
        return []
    return [f"the store's path {path!r} is relative: this command wrote the job's record to "
            f"{os.path.abspath(path)!r}, and each worker resolves it against its own directory (or its "
            f"CRAWLER_STORE_ROOT); give sqlite:////absolute/path.db for one file"]


def status(r: Redis, job_id: str, with_hosts: bool = False) -> dict[str, Any]:
    """A job's state and counters (``jobs.status``), its shards (live, down and taken over,
    ``shards``) and, with ``with_hosts``, every host's delay, requests in flight and queue."""
    st = jobs.status(r, job_id)
    st["shards"] = takeover.shard_states(r, json.loads(st["settings"])["shards"])
    if with_hosts:
        st["hosts"] = jobs.hosts(r, job_id)
    return st


def render_lines(r: Redis, render: str) -> list[str]:
    """A line for a job that renders while no live worker consumes the render queue (its pages
    would wait there unseen), once some worker has been heard from."""
    if render == "never":
        return []
    live = [n for n in nodes.nodes(r) if n["state"] == "alive"]
    if not live or any(n.get("render") for n in live):
        return []
    return [f"render={render}: no live worker consumes the render queue; pages to render wait there "
            f"(start `celery -A crawler worker -Q render`)"]


def worker_lines(r: Redis, st: dict[str, Any]) -> list[str]:
    """What a job lacks of workers: shards nobody serves, a render queue nobody reads."""
    return shard_lines(r, st["shards"]) + render_lines(r, json.loads(st["settings"]).get("render", "never"))


def shard_lines(r: Redis, states: list[dict[str, Any]], heard_any: bool | None = None) -> list[str]:
    """What an operator reads of ``states`` (shards down, taken over, not yet heard from);
    ``heard_any`` (default: whether any worker has sent a heartbeat) words the unheard ones."""
    heard = bool(nodes.nodes(r)) if heard_any is None else heard_any
    return takeover.describe(states, heard_any=heard)


def pause(r: Redis, job_id: str, by: str = "") -> str:
    """The job's status after asking it to pause (``paused`` unless it was not running or waiting)."""
    _exists(r, job_id)
    jobs.pause(r, job_id, by=by)
    return str(jobs.status(r, job_id)["status"])


def not_applied(operation: str, was: str, now: str) -> str:
    """Why ``pause`` or ``resume`` left a job that ``was`` so as it is ``now``; "" if it applied.
    The CLI prints it beside the status; the API answers 409 with it."""
    if operation == "pause" and now != PAUSED:
        return f"was {was}: only a running or waiting job pauses"
    if operation == "resume" and was != PAUSED:
        return f"was {was}: only a paused job resumes"
    return ""


def resume(r: Redis, job_id: str, by: str = "") -> str:
    _exists(r, job_id)
    jobs.resume(r, job_id, by=by)
    return str(jobs.status(r, job_id)["status"])


def stop(r: Redis, job_id: str, by: str = "") -> str:
    _exists(r, job_id)
    jobs.stop(r, job_id, by=by)
    return jobs.STOPPED


def recover(r: Redis, job_id: str, store_url: str, by: str = "", shards: int | None = None) -> dict[str, Any]:
    """Rebuild a job Redis lost from its store (``crawler recover``)."""
    from crawler.control.rebuild import recover as rebuild  # the whole pipeline: only for this rare call

    store = _opened(store_url, create=False)
    try:
        done = rebuild(r, store, job_id, shards=shards)
    finally:
        store.close()
    joblog.log_event(r, job_id, "recovered", f"rebuilt from its store: {done.stored} stored pages, "
                     f"{done.queued} URLs queued", by=by)
    return asdict(done)


# -- settings --------------------------------------------------------------------------------

def get_settings(r: Redis, job_id: str) -> dict[str, Any]:
    """The job's settings as workers apply them (credentials redacted), and which may change."""
    raw = r.hget(keys.meta(job_id), "settings")
    if raw is None:
        raise JobNotFound(f"no such job: {job_id}")
    return {"settings": redact_settings(json.loads(raw)), "runtime": list(RUNTIME)}


def set_settings(r: Redis, job_id: str, changes: Mapping[str, Any], by: str = "") -> dict[str, Any]:
    """Change runtime settings of a job (values as text or typed), validated as at submission;
    every worker applies them within 5 s. Returns ``{"changed": {name: [old, new]}}``."""
    if not changes:
        raise ConfigError("no settings given (KEY=VALUE)")
    for name in changes:
        if name not in Settings.__dataclass_fields__:
            raise SettingError(f"no setting named {name!r}")
        if name not in RUNTIME:
            raise SettingError(f"setting {name} cannot change while a job runs (these can: {', '.join(RUNTIME)})")
    typed = typed_settings(changes)
    changed: dict[str, list[Any]] = {}
    # A transaction on the job's slot: on a Redis Cluster too (its default pipeline is not one).
    with r.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(keys.meta(job_id))  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                raw = pipe.hget(keys.meta(job_id), "settings")
                if raw is None:
                    raise JobNotFound(f"no such job: {job_id}")
                values = json.loads(raw)
                old = Settings.from_env(**values)
                merged = {**values, **typed}
                # The seen-set's kind was chosen at submission: a depth limit must not switch it.
                if values.get("dedup", "auto") == "auto":
                    merged["dedup"] = "bloom" if old.uses_bloom else "set"
                if old.uses_bloom and typed.get("max_depth", old.max_depth) != old.max_depth:
                    raise SettingError("setting max_depth cannot change for this job: its seen-set is a Bloom "
                                       "filter, which keeps no depths (submit with --max-depth, or dedup set, "
                                       "to change it while it runs)")
                Settings.from_env(**merged)  # the whole, checked as at submission
                changed = {k: [values.get(k), v] for k, v in typed.items() if values.get(k) != v}
                pipe.multi()
                pipe.hset(keys.meta(job_id), "settings", json.dumps(merged))
                if changed:
                    line = "; ".join(f"{k} {_shown(o)} -> {_shown(n)}" for k, (o, n) in changed.items())
                    joblog.log_event(pipe, job_id, "settings_changed", line, by=by)
                pipe.execute()
                break
            except WatchError:
                continue  # changed meanwhile: read it again
    jobs.forget(job_id)
    new = jobs.load(r, job_id, max_age=0).settings
    frontier = Frontier(r)
    if "delay" in changed:
        old_delay = float(changed["delay"][0] or 0.0)
        frontier.rebase_delays(job_id, old_delay, new.delay)
        if new.delay < old_delay:
            # Hosts waiting out the old, longer delay (those without one of their own) go sooner.
            waiting = frontier.waiting_hosts(job_id)
            own = frontier.host_delays(job_id, waiting)
            frontier.retime(job_id, {h: new.delay for h, d in zip(waiting, own, strict=True) if d is None},
                            new.shards)
    frontier.wake(new.shards)
    return {"changed": changed}


def _shown(value: Any) -> str:
    return redact(json.dumps(value)) if not isinstance(value, str) else redact(repr(value))


# -- hosts -----------------------------------------------------------------------------------

def _host_table(r: Redis, job_id: str) -> list[HostStats]:
    hit = _host_tables.get(job_id)
    if hit is not None and time.monotonic() - hit[0] < HOSTS_SNAPSHOT_AGE:
        return hit[1]
    job = jobs.load(r, job_id)
    # With the per-host budget on, every admitted host is named without a keyspace SCAN.
    table = Frontier(r).host_stats(job_id, scan_queues=not job.settings.max_pages_per_host)
    _host_tables.put(job_id, (time.monotonic(), table))
    return table


def hosts(r: Redis, job_id: str, sort: str = "queued", desc: bool = True, offset: int = 0, limit: int = 50,
          prefix: str = "") -> dict[str, Any]:
    """One page of the job's hosts, sorted on the server: ``{"total", "hosts": [{host, queued,
    queued_in_store, inflight, delay, fetched, errors, admitted, override, render}]}``. ``delay`` is
    the one that applies (the job's where the host has none of its own). The table is computed at
    most every 2 s."""
    if sort not in HOST_SORTS:
        raise ConfigError(f"cannot sort hosts by {sort!r} (one of {', '.join(HOST_SORTS)})")
    if offset < 0 or not 1 <= limit <= 1000:
        raise ConfigError("offset must be >= 0 and limit between 1 and 1000")
    _exists(r, job_id)
    default = jobs.load(r, job_id).settings.delay
    rows = [h for h in _host_table(r, job_id) if h.host.startswith(prefix)] if prefix else _host_table(r, job_id)

    def key(h: HostStats) -> Any:
        if sort == "host":
            return h.host
        if sort == "delay":
            return default if h.delay is None else h.delay
        return getattr(h, sort)

    ordered = sorted(rows, key=key, reverse=desc)
    page = ordered[offset:offset + limit]
    # render=auto's decision per host: yes, no, or "" while its sample is rendered.
    rendering = render_decisions(r, job_id, [h.host for h in page])
    evidence = render_evidence(r, job_id, [h.host for h in page])
    return {"total": len(rows), "offset": offset, "sort": sort, "desc": desc,
            "hosts": [_host_row(h, default, rendering.get(h.host, ""), evidence.get(h.host)) for h in page]}


def _host_row(h: HostStats, default: float, render: str = "", evidence: dict[str, int] | None = None) -> dict[str, Any]:
    o = h.override
    return {"host": h.host, "queued": h.queued, "queued_in_store": h.in_store, "inflight": h.inflight,
            "render": render, "render_evidence": evidence or {},
            "delay": default if h.delay is None else h.delay, "fetched": h.fetched, "errors": h.errors,
            "admitted": h.admitted,
            "override": None if o is None else {k: v for k, v in asdict(o).items() if v is not None}}


def _check_host(host: str) -> str:
    host = host.strip().lower()
    if not _HOST_RE.fullmatch(host):
        raise ConfigError(f"not a host name: {host[:80]!r} (give it as in the hosts table, e.g. example.com "
                          "or 127.0.1.3:8080)")
    return host


def set_host_override(r: Redis, job_id: str, host: str, delay: Any = None, per_host: Any = None,
                      by: str = "") -> dict[str, Any]:
    """Give one host of a running job its own delay (seconds between requests, its floor from now
    on: adaptive politeness and Crawl-delay may still raise it) and/or in-flight limit."""
    host = _check_host(host)
    d = None if delay in (None, "") else _number("delay", delay, float, 0.0)
    n = None if per_host in (None, "") else int(_number("per_host", per_host, int, 1))
    if d is None and n is None:
        raise ConfigError("give a delay and/or a per_host limit for the host")
    _exists(r, job_id)
    shards = jobs.load(r, job_id).settings.shards
    override = HostOverride(d, n)
    frontier = Frontier(r)
    frontier.set_host_override(job_id, host, override, shards)
    _host_tables.pop(job_id)
    parts = [f"delay {d:g}s" if d is not None else "", f"per_host {n}" if n is not None else ""]
    joblog.log_event(r, job_id, "host_override", f"{host}: {', '.join(p for p in parts if p)}", by=by)
    out: dict[str, Any] = {"host": host, "override": {k: v for k, v in asdict(override).items() if v is not None}}
    if not frontier.host_known(job_id, host):
        # A host with a port is named with it: "127.0.3.2" is not "127.0.3.2:8802", and an
        # override of the one left the other's requests as they were, without a word.
        near = frontier.hosts_like(job_id, host)
        out["warning"] = (f"job {job_id} has no URL of host {host} yet: the override waits for one"
                          + (f" (did you mean {', '.join(near)}?)" if near else ""))
    return out


def clear_host_override(r: Redis, job_id: str, host: str, by: str = "") -> bool:
    host = _check_host(host)
    _exists(r, job_id)
    gone = Frontier(r).clear_host_override(job_id, host, jobs.load(r, job_id).settings.shards)
    _host_tables.pop(job_id)
    if gone:
        joblog.log_event(r, job_id, "host_override", f"{host}: cleared, the job's settings apply", by=by)
    return gone


def _number(name: str, value: Any, kind: type, low: float) -> float:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        what = "an integer" if kind is int else "a number"
        raise SettingError(f"setting {name}: must be {what}, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number < low or number > 86400 * 7:
        raise SettingError(f"setting {name}: must be a finite number >= {low:g} (at most a week), got {value!r}")
    return float(number)


# -- the rest of a job's picture -------------------------------------------------------------

def nodes_status(r: Redis) -> list[dict[str, Any]]:
    """Every node that sent a heartbeat, with ``taken_over``: its shards backups serve now."""
    rows = nodes.nodes(r)
    down = liveshards.read(r).shards()
    for n in rows:
        n["taken_over"] = sorted(down & set(n["shards"]))
    return rows


def shards(r: Redis, job_id: str) -> list[dict[str, Any]]:
    return takeover.shard_states(r, jobs.load(r, job_id).settings.shards)


def all_shards(r: Redis, max_jobs: int = 50) -> list[dict[str, Any]]:
    """Every shard any node serves or any of the newest ``max_jobs`` jobs was given: live, down
    (taken over) or not yet heard from."""
    known = {s for n in nodes.nodes(r) for s in n.get("shards", [])} | liveshards.read(r).shards()
    for row in list_jobs(r, limit=max_jobs):
        try:
            known.add(jobs.load(r, row["id"]).settings.shards - 1)
        except JobNotFound:
            continue  # purged meanwhile
    return takeover.shard_states(r, max(known, default=-1) + 1)


def cycles(r: Redis, job_id: str) -> list[dict[str, Any]]:
    _exists(r, job_id)
    return jobs.cycles(r, job_id)


def reset_seen(r: Redis, job_id: str, by: str = "") -> int:
    """Forget which URLs the job has seen (its Bloom filter or exact set). Returns keys deleted."""
    _exists(r, job_id)
    deleted = BloomSeen(r, job_id).reset() + Frontier(r).clear_seen(job_id) + QueryVariants.forget(r, job_id)
    joblog.log_event(r, job_id, "seen_reset", f"seen-set cleared ({deleted} keys)", by=by)
    return deleted


def set_shards(r: Redis, count: int, job_ids: list[str] | None = None, by: str = "") -> list[dict[str, Any]]:
    """Give the jobs (default: every running one) ``count`` shards; only the hosts whose shard
    changed move. Per job: its id and what moved (hosts, of how many, records, messages)."""
    if job_ids is not None and not job_ids:
        raise ConfigError("no job named: give job ids, or none for every running job")
    targets = jobs.active(r) if job_ids is None else job_ids
    for job_id in targets:  # all checked before any is changed
        _exists(r, job_id)
        jobs.check_shards(r, job_id, count)
    out = []
    for job_id in targets:
        moved = jobs.set_shards(r, job_id, count)
        joblog.log_event(r, job_id, "resharded", f"{count} shards: {moved.hosts} of {moved.hosts_total} hosts moved",
                         by=by)
        out.append({"job": job_id, "shards": count, **asdict(moved)})
    return out


def follow_logs(r: Redis, job_id: str, after: str = "$", level: str = "INFO") -> Iterator[dict[str, Any]]:
    """The job's log entries as they arrive, after ``after`` ("$": from now), for ever."""
    _exists(r, job_id)
    return joblog.follow(r, job_id, after=after, level=level)


format_log_entry = joblog.format_entry


def shards_overview(r: Redis, node_rows: list[dict[str, Any]]) -> list[str]:
    """Lines on every shard the nodes serve or that is down, for ``crawler nodes``."""
    known = {s for n in node_rows for s in n["shards"]} | liveshards.read(r).shards()
    # ``crawler nodes`` says itself when no worker was heard from.
    return takeover.describe(takeover.shard_states(r, max(known, default=-1) + 1), heard_any=False, none_heard=False)


@contextmanager
def stored(store_url: str) -> Iterator[PageStore]:
    """The store at ``store_url``, open for reading while the block runs (``crawler export``)."""
    store = _opened(store_url, create=False)
    try:
        yield store
    finally:
        store.close()


def all_dead_links(r: Redis, job_id: str, store_url: str | None = None) -> list[dict[str, Any]]:
    """Every 404/410 page of the job with the pages linking to it (``dead_links`` pages them)."""
    store = _store_of(r, job_id, store_url)
    try:
        return [{"url": u, "status": s, "linked_from": refs} for u, s, refs in store.dead_links(job_id)]
    finally:
        store.close()


def _store_of(r: Redis, job_id: str, store_url: str | None) -> PageStore:
    return _opened(store_url or jobs.load(r, job_id).settings.store, create=False)


def _opened(store_url: str, create: bool = True) -> PageStore:
    """The store for a command or the API: one that cannot be opened from here (a directory
    that cannot be made, a file SQLite cannot open) is one line, not a traceback. Workers open
    stores themselves and wait out such failures as outages."""
    try:
        return open_store(store_url, create=create)
    except (sqlite3.Error, OSError) as exc:
        raise StoreRefused(f"store {redact(store_url)}: cannot open it from here: "
                           f"{type(exc).__name__}: {exc}") from None


def _paged(rows: Iterator[dict[str, Any]], offset: int, limit: int) -> list[dict[str, Any]]:
    if offset < 0 or not 1 <= limit <= 1000:
        raise ConfigError("offset must be >= 0 and limit between 1 and 1000")
    return list(itertools.islice(rows, offset, offset + limit))


def _store_rows(r: Redis, job_id: str, store_url: str | None, rows: Callable[[PageStore], Iterator[dict[str, Any]]],
                offset: int, limit: int) -> list[dict[str, Any]]:
    store = _store_of(r, job_id, store_url)
    try:
        return _paged(rows(store), offset, limit)
    finally:
        store.close()


def dead_links(r: Redis, job_id: str, offset: int = 0, limit: int = 100,
               store_url: str | None = None) -> list[dict[str, Any]]:
    return _store_rows(r, job_id, store_url, lambda store: (
        {"url": u, "status": s, "linked_from": refs} for u, s, refs in store.dead_links(job_id)), offset, limit)


def pages(r: Redis, job_id: str, offset: int = 0, limit: int = 100,
          store_url: str | None = None) -> list[dict[str, Any]]:
    return _store_rows(r, job_id, store_url, lambda store: store.pages(job_id), offset, limit)


def items(r: Redis, job_id: str, offset: int = 0, limit: int = 100,
          store_url: str | None = None) -> list[dict[str, Any]]:
    return _store_rows(r, job_id, store_url, lambda store: store.items(job_id), offset, limit)


def content(r: Redis, job_id: str, offset: int = 0, limit: int = 100,
            store_url: str | None = None) -> list[dict[str, Any]]:
    """Stored main texts (``--extract``) of the job's pages."""
    return _store_rows(r, job_id, store_url, lambda store: store.content(job_id), offset, limit)


def logs(r: Redis, job_id: str, after: str = "", level: str = "INFO", limit: int = 100) -> list[dict[str, Any]]:
    """The job's central log at ``level`` and above: the newest ``limit`` entries, or with
    ``after`` (an entry id) those that came after it."""
    _exists(r, job_id)
    if not 1 <= limit <= 1000:
        raise ConfigError("limit must be between 1 and 1000")
    if after:
        return joblog.read(r, job_id, after=after, level=level, limit=limit)
    return joblog.tail(r, job_id, level=level, limit=limit)


# -- metrics ---------------------------------------------------------------------------------

_JOB_GAUGES = (("crawler_job_queued", "URLs admitted and not yet stored (queued or in flight).", "open"),
               ("crawler_job_inflight", "Requests under way.", "inflight"),
               ("crawler_job_held", "Pages fetched and waiting for parse and store.", "held"))


class _CrawlCollector:
    """The families ``metrics`` exposes, from job statuses and node rows already read: each
    family whole, its samples together, as the exposition format requires."""

    def __init__(self, per_job: list[tuple[str, dict[str, Any]]], node_rows: list[dict[str, Any]]) -> None:
        self.per_job = per_job
        self.node_rows = node_rows

    def collect(self) -> Iterator[Metric]:
        # prometheus_client adds the ``_total`` of a counter's samples itself: the names exposed
        # stay crawler_job_pages_total, crawler_job_errors_total, crawler_node_pages_total.
        pages = CounterMetricFamily("crawler_job_pages", "Pages stored by the job.", labels=["job"])
        errors = CounterMetricFamily("crawler_job_errors", "Fetches that ended in an error, by reason.",
                                     labels=["job", "reason"])
        gauges = [GaugeMetricFamily(name, help_text, labels=["job"]) for name, help_text, _ in _JOB_GAUGES]
        running = GaugeMetricFamily("crawler_job_running", "Whether the job is running (1) or not (0).",
                                    labels=["job", "status"])
        other = GaugeMetricFamily("crawler_job_counter", "Every other counter of the job.", labels=["job", "name"])
        for job_id, st in self.per_job:
            counters = st["counters"]
            pages.add_metric([job_id], counters.get("stored", 0))
            for (_, _, counter), family in zip(_JOB_GAUGES, gauges, strict=True):
                family.add_metric([job_id], counters.get(counter, 0))
            running.add_metric([job_id, st["status"]], int(st["status"] == jobs.RUNNING))
            for k, v in counters.items():
                if k.startswith("error:"):
                    errors.add_metric([job_id, k[6:]], v)
                elif k not in ("stored", "open", "inflight", "held"):
                    other.add_metric([job_id, k], v)
        node_pages = CounterMetricFamily("crawler_node_pages", "Pages a worker node fetched.", labels=["node"])
        node_up = GaugeMetricFamily("crawler_node_up", "Whether the node's heartbeats arrive (1) or not (0).",
                                    labels=["node"])
        for n in self.node_rows:
            node_pages.add_metric([str(n["node"])], int(n.get("fetched") or 0))
            node_up.add_metric([str(n["node"])], int(n.get("state") == "alive"))
        yield from (pages, errors, *gauges, running, other, node_pages, node_up)


def metrics(r: Redis, max_jobs: int = 50) -> str:
    """The Prometheus text exposition of every running job and the newest others (``max_jobs``
    in all), and every node."""
    per_job: list[tuple[str, dict[str, Any]]] = []
    active = set(jobs.active(r))
    for job_id in sorted(active) + [j for j in jobs.known(r) if j not in active][:max(0, max_jobs - len(active))]:
        try:
            per_job.append((job_id, jobs.status(r, job_id)))
        except JobNotFound:
            continue
    # A registry of its own: the process-global one would carry the process's own metrics, and
    # would keep this collector registered between scrapes.
    registry = CollectorRegistry()
    registry.register(_CrawlCollector(per_job, nodes.nodes(r)))
    return generate_latest(registry).decode()
