"""Jobs: submission, settings every worker applies, status and counters, all in Redis; the
job's definition is also recorded in its store, so ``crawler recover`` can rebuild it."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from redis import Redis
from redis.typing import EncodableT, FieldT

from crawler.config.redact import redact_settings_json, strip_password
from crawler.config.schedule import next_cycle
from crawler.config.settings import Settings
from crawler.dedup import admit_links
from crawler.errors import BadURL, ConfigError, JobNotFound, shown
from crawler.frontier import Entry, Frontier, liveshards
from crawler.frontier.core import place_parts
from crawler.frontier.rebalance import Moved, drain_queues, migrate
from crawler.render.decide import decisions as render_decisions
from crawler.render.decide import evidence as render_evidence
from crawler.spiders import loader as spider_loader
from crawler.spiders import pipelines as item_pipelines
from crawler.spiders import starts as spider_starts
from crawler.state import jobconf as jobcache
from crawler.state import joblog, keys, store_errors
from crawler.state.conn import all_or_nothing, is_cluster_client, is_pipeline, replicated_write, text, unlink_all
from crawler.state.jobconf import Job
from crawler.state.placement import spread
from crawler.store import JobDefinition, open_store
from crawler.urls import canonicalize, domain_of

RUNNING, DONE, STOPPED, PAUSED = "running", "done", "stopped", "paused"
WAITING, STARTING = "waiting", "starting"  # a periodic job between cycles, and starting one
FINISHED = (DONE, STOPPED)


def new_job_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def canonical_seeds(seeds: list[str], max_url_length: int, drop: frozenset[str] = frozenset()) -> list[str]:
    """The seeds' canonical forms; BadURL naming the first that is not a fetchable URL. Pure:
    callers run it before they start or create anything."""
    canon = []
    for seed in seeds:
        try:
            canon.append(canonicalize(seed, max_url_length, drop))
        except BadURL as exc:
            raise BadURL(f"seed {shown(seed)}: {exc}") from exc
    if not canon:
        raise BadURL("no seeds given")
    return canon


def submit(redis: Redis, settings: Settings, seeds: list[str], job_id: str | None = None, by: str = "") -> str:
    """Create a job and admit its seeds. Raises SettingError for a setting out of range and
    BadURL naming the first seed that is not a fetchable URL, before anything is written."""
    settings = settings.validated()  # callers may have built or changed it by hand
    settings, seeds = spider_loader.prepare(settings, seeds)
    item_pipelines.check(settings.item_pipelines, settings.spider_paths, settings.spider)  # never imported here
    # A spider with start_requests may start from them alone (``crawler.stages.starter``).
    starts = settings.spider_start_requests
    canon = canonical_seeds(seeds, settings.max_url_length, settings.dropped_params) if seeds or not starts else []
    job_id = job_id or new_job_id()
    job_settings = settings.job_settings()
    job_settings["allow_domains"] = sorted(settings.allow_domains or {domain_of(u) for u in canon})
    # Everyone who can read Redis (or the store) can read a job's settings: its store password
    # stays with the submitter, and workers take theirs from their own environment.
    job_settings["store"] = strip_password(settings.store)
    now = time.time()
    if settings.store:
        record(settings.store, JobDefinition(job_id, canon, job_settings, now, settings.every, settings.cron))
    meta: dict[FieldT, EncodableT] = {"id": job_id, "status": RUNNING, "created_at": now,
                                      "settings": json.dumps(job_settings), "seeds": json.dumps(canon),
                                      keys.LAYOUT_FIELD: keys.LAYOUT}
    pipe = all_or_nothing(redis)
    if settings.periodic:  # before the parts are written: they copy the cycle
        meta.update(cycle=1, cycle_started_at=now, cycle_due_at=now,
                    next_cycle_at=next_cycle(settings.every, settings.cron, now, now))
    # A split frontier's parts (``keys.frontier_part``) each keep a copy of the job's status,
    # written before the job's record that names them: starting, so none is found idle (and the
    # job done) before the seeds are admitted.
    parts = split_parts(redis, pipe, job_id, settings, meta, STARTING)
    place_bands(redis, job_id, settings, meta, len(parts))
    if settings.periodic:
        pipe.hset(keys.cycle(job_id, 1), "started_at", now)
        pipe.sadd(keys.PERIODIC, job_id)
    pipe.hset(keys.meta(job_id), mapping=meta)
    if starts:
        # Held open until the spider's start requests are all read: the job is not done before.
        spider_starts.hold(pipe, job_id, parts)
    pipe.sadd(keys.JOBS, job_id)
    pipe.zadd(keys.ALL_JOBS, {job_id: now})
    spider = f", spider {settings.spider} version {settings.spider_version}" if settings.spider else ""
    joblog.log_event(pipe, job_id, "submitted", f"{len(canon)} seeds, {settings.shards} shards{spider}", by=by)
    pipe.execute()
    frontier = Frontier(redis)
    if canon:
        admit_links(redis, frontier, job_id, settings, [Entry(u) for u in dict.fromkeys(canon)])
    if parts:
        frontier.start_parts(job_id, settings.shards)
    if is_cluster_client(redis):
        # A write waited on until a replica has it: the replica, which takes the master's writes
        # in order, then has the job's record and seeds too, so a failover right after the
        # submitter is told the job's id does not lose the job.
        replicated_write(redis, keys.meta(job_id), lambda p: p.hset(keys.meta(job_id), "id", job_id))
    return job_id


def record(store_url: str, definition: JobDefinition) -> None:
    """Keep the job's definition in its store before anything is in Redis: a job Redis knows
    of can always be rebuilt (idempotent)."""
    store = open_store(store_url)
    try:
        store.save_job(definition)
    finally:
        store.close()


# The same cache the dispatcher reads through ``jobcache`` (tests may swap it).
_cache: jobcache.Cache = jobcache._cache


def load(redis: Redis, job_id: str, *, max_age: float = 5.0) -> Job:
    """The job's settings as its submitter set them, cached briefly in each process."""
    return jobcache.load(redis, job_id, max_age=max_age, cache=_cache)


def seeds(redis: Redis, job_id: str) -> list[str]:
    raw = redis.hget(keys.meta(job_id), "seeds")
    if raw is None:
        raise JobNotFound(f"no such job: {job_id}")
    return list(json.loads(raw))


def forget(job_id: str) -> None:
    """Drop this process's cached copy of the job's settings (they were just changed)."""
    jobcache.forget(job_id, _cache)


def status(redis: Redis, job_id: str) -> dict[str, Any]:
    """Meta fields and counters of a job, and ``store_error`` while its store is down (see
    ``crawler.state.store_errors.current``), credentials redacted; JobNotFound if there is no such job."""
    pipe = redis.pipeline(transaction=False)
    pipe.hgetall(keys.meta(job_id))
    pipe.hgetall(keys.counters(job_id))
    pipe.exists(keys.store_error(job_id))
    now = time.time()
    pipe.zcount(keys.robots_wait(job_id), now, "+inf")
    pipe.zrangebyscore(keys.robots_wait(job_id), now, "+inf", start=0, num=ROBOTS_WAIT_SHOWN, withscores=True)
    meta, cnt, store_down, robots_waiting, robots_wait = pipe.execute()
    if not meta:
        raise JobNotFound(f"no such job: {job_id}")
    out: dict[str, Any] = {k.decode(): v.decode() for k, v in meta.items()}
    out.pop(keys.LAYOUT_FIELD, None)  # how its keys are laid out: nothing an operator acts on
    out.pop(keys.BAND_TAGS_FIELD, None)  # where its index's bands are placed: likewise
    if out.pop(keys.PARTS_FIELD, None):
        cnt = Frontier(redis).counters(job_id)  # the job's own and its frontier's parts', summed
    if "settings" in out:  # a job submitted before passwords were stripped may still hold one
        out["settings"] = redact_settings_json(out["settings"])
    out["counters"] = {text(k): int(v) for k, v in sorted(cnt.items())}
    c = out["counters"]
    # Where the job's waiting URLs are: host queues in Redis hold at most host_queue_cap each,
    # the rest wait in the store's frontier table (crawler.frontier.spill).
    out["queued_in_redis"] = c.get("queued", 0)
    out["queued_in_store"] = c.get("spilled", 0) - c.get("refilled", 0)
    if store_down:
        out["store_error"] = store_errors.current(redis, job_id)
    # The origins waiting longest are named, and how many wait in all: a crawl of many dead
    # hosts keeps the answer small.
    out["robots_waiting"] = robots_waiting
    out["robots_wait"] = waiting_on_robots(robots_wait)
    return out


def note_robots_wait(pipe: Any, job_id: str, origin: str, until: float, why: str, now: float) -> None:
    """Record on ``pipe`` that ``origin``'s URLs wait until ``until`` to ask for its robots.txt
    again, because of ``why`` (a reason code or status), dropping the waits that are over."""
    key = keys.robots_wait(job_id)
    pipe.zremrangebyscore(key, "-inf", now)
    pipe.zadd(key, {f"{origin} {why}": until})


ROBOTS_WAIT_SHOWN = 20


def waiting_on_robots(raw: list[tuple[bytes, float]]) -> list[dict[str, Any]]:
    """The origins still waiting, soonest first (one entry each: its latest reason)."""
    out: dict[str, dict[str, Any]] = {}
    for member, until in raw:
        origin, _, why = member.decode().partition(" ")
        out[origin] = {"origin": origin, "until": until, "reason": why}
    return sorted(out.values(), key=lambda w: (w["until"], w["origin"]))


def hosts(redis: Redis, job_id: str) -> list[dict[str, Any]]:
    """Per host: current delay, requests in flight, URLs queued in Redis and in the store."""
    default = load(redis, job_id).settings.delay
    rendering = render_decisions(redis, job_id)
    table = Frontier(redis).host_stats(job_id)
    # What the render decision rests on, and the renders it did not learn from.
    evidence = render_evidence(redis, job_id, [h.host for h in table])
    return [{"host": h.host, "delay": default if h.delay is None else h.delay, "inflight": h.inflight,
             "queued": h.queued, "queued_in_store": h.in_store, "render": rendering.get(h.host, ""),
             "render_evidence": evidence[h.host]}
            for h in table]


def stop(redis: Redis, job_id: str, error: str = "", by: str = "") -> None:
    """Dispatch nothing more for the job and start no more cycles; what is in flight still
    finishes and is stored (without a session: its keys go now, and no worker writes them again).
    ``error``: why a worker stopped it (``status`` shows it); ``by``: who asked (for the job's
    log)."""
    now = time.time()
    cycle = redis.hget(keys.meta(job_id), "cycle")
    pipe = all_or_nothing(redis)
    pipe.hset(keys.meta(job_id), mapping={"status": STOPPED, "finished_at": now, **({"error": error} if error else {})})
    for space in Frontier(redis).spaces(job_id):
        if space != job_id:  # a split frontier's parts stop dispatching and admitting too
            pipe.hset(keys.meta(space), mapping={"status": STOPPED, "finished_at": now})
    pipe.srem(keys.JOBS, job_id)
    pipe.srem(keys.PERIODIC, job_id)
    unlink_all(pipe, keys.session_all(job_id))
    if cycle is not None:
        pipe.hsetnx(keys.cycle(job_id, text(cycle)), "finished_at", now)
    joblog.log_event(pipe, job_id, "stopped", error or "stopped", level="ERROR" if error else "INFO", by=by)
    pipe.execute()


def pause(redis: Redis, job_id: str, by: str = "") -> str:
    """Dispatch nothing more (and start no cycle) until ``resume``; in-flight pages finish and
    are stored. Returns the status the job had."""
    was = Frontier(redis).pause(job_id)
    if was in (RUNNING, WAITING):  # a job starting a cycle, or ended, is not paused
        joblog.log_event(redis, job_id, "paused", f"nothing more is dispatched until resumed (it was {was})", by=by)
    return was


def resume(redis: Redis, job_id: str, by: str = "") -> str:
    """Undo ``pause``. Returns the status the job had."""
    shards = load(redis, job_id, max_age=0).settings.shards
    was = Frontier(redis).resume(job_id, shards)
    if was == PAUSED:
        joblog.log_event(redis, job_id, "resumed", "dispatching again", by=by)
    return was


MAX_SHARDS = 1024


def check_shards(redis: Redis, job_id: str, shards: int) -> int:
    """ConfigError if the job may not have ``shards`` shards. Returns how many parts its
    frontier is split into (0: not split)."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ConfigError(f"shard count must be 1..{MAX_SHARDS}, got {shards}")
    parts = Frontier(redis).split(job_id)
    if parts and shards > parts:
        # Its hosts stay in their parts for the job's life: a shard beyond them would have none.
        raise ConfigError(f"job {job_id} has its frontier split into {parts} parts (frontier_split): "
                          f"it may have 1 to {parts} shards, not {shards}")
    return parts


def set_shards(redis: Redis, job_id: str, shards: int) -> Moved:
    """Give a running job ``shards`` shards and move what must move (``crawler.frontier.rebalance``)."""
    parts = check_shards(redis, job_id, shards)
    raw = redis.hget(keys.meta(job_id), "settings")
    if raw is None:
        raise JobNotFound(f"no such job: {job_id}")
    values = json.loads(raw)
    # The highest count the job ever had: queues and ready sets up to it may still hold work.
    known = max(int(values["shards"]), shards, int(redis.hget(keys.meta(job_id), "shards_before") or 0))
    values["shards"] = shards
    redis.hset(keys.meta(job_id), mapping={"settings": json.dumps(values), "shards_changed_at": time.time(),
                                           "shards_before": known})
    forget(job_id)
    down = liveshards.read(redis).shards(shards)
    if parts:  # nothing moves but the messages on the queues of shards gone: parts change hands
        return Moved(0, 0, 0, drain_queues(redis, shards, known, down))
    return migrate(redis, job_id, shards, known, down=down)


def periodic(redis: Redis) -> list[str]:
    """Ids of the periodic jobs, for the beat's cycle check."""
    return sorted(text(m) for m in redis.smembers(keys.PERIODIC))


def drop_periodic(redis: Redis, job_id: str) -> None:
    redis.srem(keys.PERIODIC, job_id)


def cycle_schedule(redis: Redis, job_id: str) -> tuple[str, float | None]:
    """The job's status and when its next cycle is due (None: not set). JobNotFound if none."""
    status, due = redis.hmget(keys.meta(job_id), ["status", "next_cycle_at"])
    if status is None:
        raise JobNotFound(f"no such job: {job_id}")
    return text(status), float(due) if due else None


def start_stage(redis: Redis, job_id: str) -> str:
    """How far the start of the current cycle got ('claimed', 'reset'; '' once running)."""
    raw = redis.hget(keys.meta(job_id), "start_stage")
    return "" if raw is None else text(raw)


def set_start_stage(redis: Redis, job_id: str, stage: str) -> None:
    redis.hset(keys.meta(job_id), "start_stage", stage)



def cycle_of(redis: Redis | Any, job_id: str) -> tuple[int, float]:
    """The job's current cycle and when it was due ((0, 0.0) for a one-off job)."""
    number, due, started = redis.hmget(keys.meta(job_id), ["cycle", "cycle_due_at", "cycle_started_at"])
    return (int(number), float(text(due or started))) if number else (0, 0.0)


def count_cycle(redis: Redis | Any, job_id: str, cycle: int, **deltas: int) -> None:
    """Add to one cycle's counters (``redis`` may be a pipeline); nothing for one-off jobs."""
    if cycle:
        for name, delta in deltas.items():
            if delta:
                redis.hincrby(keys.cycle(job_id, cycle), name, delta)


CYCLE_FIELDS = ("fetched", "new", "changed", "unchanged", "gone", "not_modified", "parsed", "bytes")


def cycles(redis: Redis, job_id: str) -> list[dict[str, Any]]:
    """Per cycle: start, end and counts, oldest first. A cycle whose record went with a Redis
    that was lost (``crawler recover`` rebuilds the job in its current cycle) is left out; the
    current one starts when the job's record says."""
    status(redis, job_id)  # JobNotFound if there is no such job
    last, due = cycle_of(redis, job_id)
    pipe = redis.pipeline(transaction=False)
    for n in range(1, last + 1):
        pipe.hgetall(keys.cycle(job_id, n))
    out = []
    for n, raw in enumerate(pipe.execute(), start=1):
        d = {k.decode(): v.decode() for k, v in raw.items()}
        if "started_at" not in d and n != last:
            continue
        row: dict[str, Any] = {"cycle": n, "started_at": float(d.get("started_at", due)),
                               "finished_at": float(d["finished_at"]) if "finished_at" in d else None}
        row.update({f: int(d.get(f, 0)) for f in CYCLE_FIELDS})
        out.append(row)
    return out


def seen_space(redis: Redis, job_id: str) -> str:
    """The name under which a process may remember URLs of this job as seen: it changes with
    each cycle and each rebuild by ``crawler recover``. JobNotFound if Redis has no such job."""
    status, cycle, epoch = redis.hmget(keys.meta(job_id), ["status", "cycle", "epoch"])
    if status is None:
        raise JobNotFound(f"no such job: {job_id}")
    return f"{job_id}:{int(cycle or 0)}:{text(epoch or b'')}"


def count(redis: Redis | Any, job_id: str, **deltas: int) -> None:
    """Add to a job's counters (``redis`` may be a pipeline). Several go to Redis in one round
    trip (no transaction: each is atomic on its own)."""
    nonzero = [(name, delta) for name, delta in deltas.items() if delta]
    if len(nonzero) > 1 and not is_pipeline(redis):
        pipe = redis.pipeline(transaction=False)
        for name, delta in nonzero:
            pipe.hincrby(keys.counters(job_id), name, delta)
        pipe.execute()
        return
    for name, delta in nonzero:
        redis.hincrby(keys.counters(job_id), name, delta)


def exists(redis: Redis, job_id: str) -> bool:
    return bool(redis.exists(keys.meta(job_id)))


def count_delivery(redis: Redis, message_id: str) -> int:
    """Count one more delivery of a task message; returns how many it has had (kept a day)."""
    key = keys.delivery(message_id)
    pipe = redis.pipeline(transaction=False)
    pipe.incr(key)
    pipe.expire(key, 86400)
    return int(pipe.execute()[0])


def add_periodic(redis: Redis, job_id: str) -> None:
    redis.sadd(keys.PERIODIC, job_id)


def raw_status(redis: Redis, job_id: str) -> str | None:
    """The job's status as Redis holds it; None if Redis has no such job."""
    raw = redis.hget(keys.meta(job_id), "status")
    return None if raw is None else text(raw)


def split_parts(redis: Redis, pipe: Any, job_id: str, settings: Settings, meta: dict[FieldT, EncodableT],
                status: str = "") -> list[str]:
    """For a job whose settings split its frontier (``frontier_split``, more than one shard):
    its parts' status copies written on ``pipe`` (``status``, default the job's in ``meta``),
    before the job's record, which ``meta`` becomes with their names in it. Returns the parts' ids."""
    if not (settings.frontier_split and settings.shards > 1):
        return []
    names = place_parts(redis, job_id, settings.shards)
    parts = [keys.frontier_part(job_id, name) for name in names]
    # A periodic job's parts know its cycle: an end found for one cycle ends no other (``end_if_done``).
    cycle: dict[FieldT, EncodableT] = {"cycle": meta["cycle"]} if "cycle" in meta else {}
    for part in parts:
        pipe.hset(keys.meta(part), mapping={"status": status or meta["status"], keys.PART_FIELD: job_id, **cycle})
    meta[keys.PARTS_FIELD] = ",".join(names)
    return parts


def place_bands(redis: Redis, job_id: str, settings: Settings, meta: dict[FieldT, EncodableT],
                after: int = 0) -> None:
    """On a Redis Cluster, the names of the job's near-duplicate band tags, in ``meta``: on the
    masters in turn, continuing from ``after`` tags placed before them (a split frontier's
    parts), so the index's lookups and keys spread by design (``placement.spread``)."""
    if not (is_cluster_client(redis) and settings.near_duplicates):
        return
    bands = [str(b) for b in range(settings.near_duplicate_distance + 1)]
    names = spread(redis, keys.meta(job_id), lambda tag: keys.neardup_band_mark(job_id, tag), bands, first=1 + after)
    meta[keys.BAND_TAGS_FIELD] = ",".join(names)


def write_meta(redis: Redis, job_id: str, meta: dict[FieldT, EncodableT],
               cycle: tuple[int, Mapping[FieldT, EncodableT]] | None = None, settings: Settings | None = None) -> None:
    """Set a job's record (a rebuild by ``crawler recover``), and one cycle's record with it;
    ``settings``: the job's, which may split its frontier (``split_parts``)."""
    if cycle is not None:
        redis.hset(keys.cycle(job_id, cycle[0]), mapping=cycle[1])
    if settings is not None:
        pipe = redis.pipeline(transaction=False)
        place_bands(redis, job_id, settings, meta, len(split_parts(redis, pipe, job_id, settings, meta)))
        pipe.execute()
    # Rebuilt from nothing: its filter and index are new, in today's layout.
    redis.hset(keys.meta(job_id), mapping={**meta, keys.LAYOUT_FIELD: keys.LAYOUT})


def purge(redis: Redis, job_id: str, chunk: int = 1000) -> int:
    """Delete every key of the job (what workers wrote after Redis came back empty). Returns
    how many."""
    doomed = list(redis.scan_iter(keys.job_pattern(job_id), count=1000))
    redis.zrem(keys.ALL_JOBS, job_id)
    for i in range(0, len(doomed), chunk):
        redis.delete(*doomed[i:i + chunk])
    return len(doomed)


def known(redis: Redis) -> list[str]:
    """Every job Redis has, newest first (jobs from before the registry: found by their meta key)."""
    listed = [text(j) for j in redis.zrevrange(keys.ALL_JOBS, 0, -1)]
    if listed:
        return listed
    head, tail = keys.meta("\0").split("\0")
    found = {text(k)[len(head):-len(tail)] for k in redis.scan_iter(keys.meta("*"), count=1000)}
    return sorted(found, reverse=True)


def active(redis: Redis) -> list[str]:
    return sorted(text(m) for m in redis.smembers(keys.JOBS))


def note_cycle_end(redis: Redis, job_id: str) -> bool:
    """Put the end of the job's current cycle in its log, once (the frontier's scripts end it;
    the beat's next check writes the entry)."""
    cycle = redis.hget(keys.meta(job_id), "cycle")
    if cycle is None:
        return False
    key = keys.cycle(job_id, text(cycle))
    if redis.hget(key, "finished_at") is None or not redis.hsetnx(key, "end_logged", 1):
        return False
    figures = {text(k): text(v) for k, v in redis.hgetall(key).items()}
    summary = ", ".join(f"{k} {figures[k]}" for k in ("fetched", "new", "changed", "unchanged", "gone") if k in figures)
    joblog.log_event(redis, job_id, "cycle_ended", f"cycle {text(cycle)} ended: {summary or 'nothing fetched'}")
    return True
