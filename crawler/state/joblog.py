"""A job's central log: the warnings, errors and events of every worker in one capped Redis
stream per job, read by ``crawler logs`` and the console.

Events (``event``) name what happened: ``submitted``, ``paused``, ``resumed``, ``stopped``,
``settings_changed``, ``host_override``, ``cycle_started``, ``cycle_ended``, ``shard_down``,
``shard_up``; ``log`` is a worker's log record (a warning, an error, a spider's failing hook).
Worker processes' own log files stay as they are; this stream holds what concerns one job,
from every machine, capped at ``MAX_ENTRIES`` (oldest dropped first).
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from redis import Redis

from crawler.config.redact import redact
from crawler.errors import ConfigError
from crawler.state import keys
from crawler.state.conn import text

MAX_ENTRIES = 10_000
MAX_MESSAGE = 2_000  # characters of one entry's message
LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40, "CRITICAL": 50}

# The job the running task works for: set by the task glue, read by ``JobLogHandler``.
current_job: contextvars.ContextVar[str | None] = contextvars.ContextVar("current_job", default=None)


def level_number(level: str) -> int:
    try:
        return LEVELS[level.upper()]
    except KeyError:
        raise ConfigError(f"unknown log level {level!r} (one of {', '.join(LEVELS)})") from None


def _node() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def log_event(redis: Redis | Any, job_id: str, event: str, message: str, *, level: str = "INFO",
              node: str = "", by: str = "", ts: float | None = None) -> None:
    """Add one entry to the job's log (``redis`` may be a pipeline). Messages are redacted and
    cut to one bounded line."""
    line = redact(message.replace("\r", " ").replace("\n", " | "))[:MAX_MESSAGE]
    redis.xadd(keys.job_log(job_id), {"ts": f"{time.time() if ts is None else ts:.3f}", "level": level.upper(),
                                      "event": event, "message": line, "node": node or _node(), "by": by},
               maxlen=MAX_ENTRIES, approximate=True)


def _entry(entry_id: Any, fields: Any) -> dict[str, Any]:
    f = {text(k): text(v) for k, v in (fields or {}).items()}
    return {"id": text(entry_id), "ts": float(f.get("ts", 0)), "level": f.get("level", "INFO"),
            "event": f.get("event", "log"), "message": f.get("message", ""), "node": f.get("node", ""),
            "by": f.get("by", "")}


def _collect(batches: Callable[[str], Any], start: str, level: str, limit: int) -> list[dict[str, Any]]:
    """Entries at ``level`` or above from ``batches(bound)`` (one XRANGE or XREVRANGE page from
    ``bound`` on, each next page from just past the last id), until ``limit`` or the end."""
    floor = level_number(level)
    out: list[dict[str, Any]] = []
    while len(out) < limit:
        batch = batches(start)
        if not batch:
            break
        for entry_id, fields in batch:
            e = _entry(entry_id, fields)
            if LEVELS.get(e["level"], 20) >= floor:
                out.append(e)
                if len(out) >= limit:
                    break
        start = f"({text(batch[-1][0])}"
    return out


def read(redis: Redis, job_id: str, *, after: str = "0", level: str = "INFO", limit: int = 100) -> list[dict[str, Any]]:
    """Up to ``limit`` entries after the stream id ``after`` ("0": from the oldest kept), at
    ``level`` or above, oldest first. Pass the last entry's ``id`` back as ``after`` to page on."""
    key, count = keys.job_log(job_id), max(limit, 100)
    start = f"({after}" if after not in ("0", "-", "") else "-"
    return _collect(lambda lo: redis.xrange(key, min=lo, max="+", count=count), start, level, limit)


def tail(redis: Redis, job_id: str, *, level: str = "INFO", limit: int = 100) -> list[dict[str, Any]]:
    """The newest ``limit`` entries at ``level`` or above, oldest first."""
    key, count = keys.job_log(job_id), max(limit, 100)
    return _collect(lambda hi: redis.xrevrange(key, max=hi, min="-", count=count), "+", level, limit)[::-1]


def follow(redis: Redis, job_id: str, *, after: str = "$", level: str = "INFO", block: float = 1.0,
           stop: Callable[[], bool] = lambda: False) -> Iterator[dict[str, Any]]:
    """Entries as they arrive (after ``after``; "$": from now), until ``stop()`` says so."""
    floor = level_number(level)
    last = after
    while not stop():
        got: Any = redis.xread({keys.job_log(job_id): last}, block=int(block * 1000), count=500)
        for _stream, entries in got or ():
            for entry_id, fields in entries:
                last = text(entry_id)
                e = _entry(entry_id, fields)
                if LEVELS.get(e["level"], 20) >= floor:
                    yield e


def format_entry(e: dict[str, Any]) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["ts"]))
    who = f" by {e['by']}" if e.get("by") else ""
    return f"{stamp} {e['level']:<7} {e['event']:<16} {e['node']}{who}: {e['message']}"


class JobLogHandler(logging.Handler):
    """Sends the records a worker logs while running a job's task (``current_job``) at WARNING
    and above to that job's log; the traceback stays in the worker's own log file, its last
    line goes with the message. A failure to send is dropped, never raised into the task."""

    def __init__(self, client: Callable[[], Redis], node: Callable[[], str] = _node,
                 level: int = logging.WARNING) -> None:
        super().__init__(level)
        self._client = client
        self._node = node
        self._busy = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        job_id = current_job.get() or getattr(record, "job_id", None)
        if not job_id or getattr(self._busy, "on", False):
            return
        self._busy.on = True  # Redis's own logging while we send must not come back here
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                message += f": {type(exc).__name__}: {exc}"
            log_event(self._client(), str(job_id), "log", message, level=record.levelname, node=self._node())
        except Exception:  # the log must never break the task it reports on
            pass
        finally:
            self._busy.on = False


def install(client: Callable[[], Redis], node: Callable[[], str] = _node) -> JobLogHandler:
    """Attach a JobLogHandler to the crawler's loggers (once per process)."""
    root = logging.getLogger("crawler")
    for h in root.handlers:
        if isinstance(h, JobLogHandler):
            return h
    handler = JobLogHandler(client, node)
    root.addHandler(handler)
    return handler
