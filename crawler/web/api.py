"""The REST API: one table of endpoints, each a plain function of a ``Call`` over
``crawler.control``. The same table makes the Starlette routes (``routes``) and the OpenAPI
document (``crawler.web.openapi``), so the two cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from crawler import control
from crawler.config.settings import parse_text
from crawler.errors import ConfigError, JobStateConflict


@dataclass
class Call:
    """What a handler gets: Redis, the path's and query's parameters, the JSON body, and who
    asked (for the job's log)."""

    r: Redis
    path: Mapping[str, str]
    query: Mapping[str, str]
    body: dict[str, Any]
    by: str

    def text(self, name: str, default: str = "", limit: int = 300) -> str:
        value = self.query.get(name, default)
        if len(value) > limit:
            raise ConfigError(f"parameter {name}: at most {limit} characters")
        return value

    def integer(self, name: str, default: int) -> int:
        raw = self.query.get(name)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"parameter {name}: must be an integer, got {raw[:40]!r}") from None

    def flag(self, name: str, default: bool) -> bool:
        raw = self.query.get(name)
        if raw is None or raw == "":
            return default
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"parameter {name}: must be true or false, got {raw[:40]!r}")


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # an OpenAPI type: string, integer, boolean
    doc: str
    where: str = "query"


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    handler: Callable[[Call], Any]
    summary: str
    params: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None  # the JSON schema of the request body, if it takes one
    status: int = 200
    result: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    # The operation, as the CLI names it (``crawler <operation>``): every operation is served by
    # both faces (tests/unit/test_one_door.py).
    operation: str = ""


def _job(call: Call) -> str:
    return call.path["job"]


def _paging(call: Call, limit: int = 100) -> tuple[int, int]:
    return call.integer("offset", 0), call.integer("limit", limit)


def _list_jobs(call: Call) -> Any:
    return {"jobs": control.list_jobs(call.r, limit=call.integer("limit", 200))}


def _submit(call: Call) -> Any:
    seeds = call.body.get("seeds", [])
    values = call.body.get("settings", {})
    if not isinstance(seeds, list) or not all(isinstance(s, str) for s in seeds):
        raise ConfigError("seeds: must be a list of URLs")
    if not isinstance(values, dict):
        raise ConfigError("settings: must be an object of setting names and values")
    job_id, warnings = control.submit(call.r, values, seeds, by=call.by)
    return {"id": job_id, "warnings": warnings}


def _action(name: str) -> Callable[[Call], Any]:
    act: Callable[..., str] = getattr(control, name)

    def run(call: Call) -> Any:
        job = _job(call)
        if name not in ("pause", "resume"):
            return {"id": job, "status": act(call.r, job, by=call.by)}
        # As the CLI: a pause of a stopped job is refused with the reason, not answered 200.
        was = control.status(call.r, job)["status"]
        now = act(call.r, job, by=call.by)
        why = control.not_applied(name, was, now)
        if why:
            raise JobStateConflict(f"job {job}: {why}")
        return {"id": job, "status": now}

    run.__name__ = f"_{name}"
    return run


def _recover(call: Call) -> Any:
    store = call.body.get("store")
    shards = call.body.get("shards")
    if not isinstance(store, str) or not store:
        raise ConfigError("store: the job's store URL is required (Redis may no longer know it)")
    if shards is not None and (not isinstance(shards, int) or isinstance(shards, bool)):
        raise ConfigError("shards: must be an integer")
    return control.recover(call.r, _job(call), store, by=call.by, shards=shards)


def _set_settings(call: Call) -> Any:
    return control.set_settings(call.r, _job(call), call.body, by=call.by)


def _hosts(call: Call) -> Any:
    return control.hosts(call.r, _job(call), sort=call.text("sort", "queued"), desc=call.flag("desc", True),
                         prefix=call.text("prefix"), offset=call.integer("offset", 0),
                         limit=call.integer("limit", 50))


def _set_host(call: Call) -> Any:
    for name, value in call.body.items():
        if name not in ("delay", "per_host"):
            raise ConfigError(f"a host override has delay and per_host, not {name[:40]!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}: must be a finite number")
    return control.set_host_override(call.r, _job(call), call.path["host"], delay=call.body.get("delay"),
                                     per_host=call.body.get("per_host"), by=call.by)


def _clear_host(call: Call) -> Any:
    return {"host": call.path["host"],
            "cleared": control.clear_host_override(call.r, _job(call), call.path["host"], by=call.by)}


def _logs(call: Call) -> Any:
    return {"entries": control.logs(call.r, _job(call), after=call.text("after", "", 40),
                                    level=call.text("level", "INFO", 20), limit=call.integer("limit", 100))}


def _all_shards(call: Call) -> Any:
    # Every shard any node serves or any job was given: what ``crawler nodes`` shows below its table.
    return {"shards": control.all_shards(call.r)}


def _reset_seen(call: Call) -> Any:
    return {"id": _job(call), "deleted": control.reset_seen(call.r, _job(call), by=call.by)}


def _reshard(call: Call) -> Any:
    count, job_ids = call.body.get("count"), call.body.get("jobs")
    if not isinstance(count, int) or isinstance(count, bool):
        raise ConfigError("count: the number of shards, an integer")
    if job_ids is not None and (not isinstance(job_ids, list) or not all(isinstance(j, str) for j in job_ids)):
        raise ConfigError("jobs: a list of job ids (default: every running job)")
    count = int(parse_text("shards", str(count), "count"))
    return {"jobs": control.set_shards(call.r, count, job_ids, by=call.by)}


JOB = Param("job", "string", "the job's id", "path")
HOST = Param("host", "string", "a host as the hosts table names it (host or host:port)", "path")
OFFSET = Param("offset", "integer", "rows to skip (default 0)")
LIMIT = Param("limit", "integer", "rows at most (1..1000)")
PAGED = (JOB, OFFSET, LIMIT)
_STATUS = {"type": "object", "properties": {"id": {"type": "string"}, "status": {"type": "string"}}}
_LIST = {"type": "array", "items": {"type": "object"}}

ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GET", "/api/jobs", _list_jobs, "Jobs Redis knows, newest first, with their main counters",
             (LIMIT,), operation="jobs"),
    Endpoint("POST", "/api/jobs", _submit, "Submit a job (settings by name, as text or typed, as the CLI takes them)",
             body={"type": "object", "required": ["settings"], "properties": {
                 "seeds": {"type": "array", "items": {"type": "string"}},
                 "settings": {"type": "object", "description": "setting name -> value; store is required"}}},
             status=201, operation="submit"),
    Endpoint("GET", "/api/jobs/{job}", lambda c: control.status(c.r, _job(c)),
             "A job's status, counters and settings (credentials redacted)", (JOB,), operation="status"),
    Endpoint("POST", "/api/jobs/{job}/pause", _action("pause"), "Pause a job: dispatch nothing until resumed",
             (JOB,), result=_STATUS, operation="pause"),
    Endpoint("POST", "/api/jobs/{job}/resume", _action("resume"), "Resume a paused job", (JOB,), result=_STATUS,
             operation="resume"),
    Endpoint("POST", "/api/jobs/{job}/stop", _action("stop"), "Stop a job (what is in flight is still stored)",
             (JOB,), result=_STATUS, operation="stop"),
    Endpoint("POST", "/api/jobs/{job}/recover", _recover, "Rebuild a job Redis lost from its store", (JOB,),
             body={"type": "object", "required": ["store"], "properties": {
                 "store": {"type": "string"}, "shards": {"type": "integer"}}}, operation="recover"),
    Endpoint("GET", "/api/jobs/{job}/settings", lambda c: control.get_settings(c.r, _job(c)),
             "A job's settings and the names of those that may change while it runs", (JOB,), operation="status"),
    Endpoint("PATCH", "/api/jobs/{job}/settings", _set_settings,
             "Change runtime settings (every worker applies them within 5 s)", (JOB,),
             body={"type": "object", "description": "setting name -> new value (text or typed)",
                   "additionalProperties": True}, operation="set"),
    Endpoint("GET", "/api/jobs/{job}/hosts", _hosts, "One page of the job's hosts, sorted on the server",
             (JOB, Param("sort", "string", f"one of {', '.join(control.HOST_SORTS)} (default queued)"),
              Param("desc", "boolean", "largest first (default true)"), OFFSET, LIMIT,
              Param("prefix", "string", "only hosts whose name starts so")), operation="status"),
    Endpoint("PUT", "/api/jobs/{job}/hosts/{host}", _set_host, "Give one host its own delay and/or in-flight limit",
             (JOB, HOST), body={"type": "object", "properties": {
                 "delay": {"type": ["number", "string", "null"]},
                 "per_host": {"type": ["integer", "string", "null"]}}}, operation="set"),
    Endpoint("DELETE", "/api/jobs/{job}/hosts/{host}", _clear_host, "Drop a host's override", (JOB, HOST),
             operation="set"),
    Endpoint("GET", "/api/jobs/{job}/cycles", lambda c: {"cycles": control.cycles(c.r, _job(c))},
             "Per cycle of a periodic job: start, end and counts", (JOB,), operation="cycles"),
    Endpoint("GET", "/api/jobs/{job}/shards", lambda c: {"shards": control.shards(c.r, _job(c))},
             "Per shard of the job: live, down (taken over) or unseen, with its nodes", (JOB,), operation="status"),
    Endpoint("GET", "/api/jobs/{job}/dead-links",
             lambda c: {"dead_links": control.dead_links(c.r, _job(c), *_paging(c))},
             "404/410 pages and the pages linking to them (from the job's store)", PAGED, operation="deadlinks"),
    Endpoint("GET", "/api/jobs/{job}/pages", lambda c: {"pages": control.pages(c.r, _job(c), *_paging(c))},
             "Stored pages (from the job's store)", PAGED, operation="export"),
    Endpoint("GET", "/api/jobs/{job}/items", lambda c: {"items": control.items(c.r, _job(c), *_paging(c))},
             "Items the job's spider extracted (from the job's store)", PAGED, operation="export"),
    Endpoint("GET", "/api/jobs/{job}/logs", _logs, "The job's central log, newest last",
             (JOB, Param("after", "string", "only entries after this id (incremental polling)"),
              Param("level", "string", "DEBUG, INFO, WARNING or ERROR and above (default INFO)"), LIMIT),
             operation="logs"),
    Endpoint("GET", "/api/nodes", lambda c: {"nodes": control.nodes_status(c.r)},
             "Every worker node: shards, last heartbeat, pages fetched, pages/s, state", operation="nodes"),
    Endpoint("GET", "/api/shards", _all_shards, "Every known shard: live, down (taken over) or unseen",
             operation="nodes"),
    Endpoint("POST", "/api/jobs/{job}/reset-seen", _reset_seen,
             "Forget which URLs the job has seen (its Bloom filter or exact set)", (JOB,),
             operation="reset-seen"),
    Endpoint("POST", "/api/shards", _reshard,
             "Give running jobs (or those named) N shards; only the hosts whose shard changed move",
             body={"type": "object", "required": ["count"], "properties": {
                 "count": {"type": "integer"}, "jobs": {"type": "array", "items": {"type": "string"}}}},
             operation="shards set"),
    Endpoint("GET", "/api/jobs/{job}/content", lambda c: {"content": control.content(c.r, _job(c), *_paging(c))},
             "Stored main texts (--extract; from the job's store)", PAGED, operation="export"),
)
