"""A beat scheduler that acts only while it holds a lock in Redis.

Two ``celery beat`` processes started by mistake would each send every periodic task (a known
Celery trap). This scheduler takes ``c:beat:lock`` with an expiry and renews it on every tick;
a second beat finds the lock taken and sends nothing, and takes over within the lock's TTL if
the first one dies. Cycle starts are also claimed atomically in Redis, so even a beat without
the lock could not start a cycle twice: the lock keeps the tick traffic single, the claim keeps
the outcome exact.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from pathlib import Path
from typing import Any

from celery.beat import PersistentScheduler
from redis import Redis, RedisError

from crawler.celeryapp.config import redis_url
from crawler.config.settings import Settings
from crawler.state import keys
from crawler.state.conn import connect

log = logging.getLogger(__name__)

# What it takes and returns: scripts/beat_acquire.lua.
_ACQUIRE = (Path(__file__).resolve().parent / "scripts" / "beat_acquire.lua").read_text()


class BeatLock:
    def __init__(self, client: Redis, ttl: float, identity: str | None = None) -> None:
        self.client = client
        self.ttl = ttl
        self.identity = identity or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._acquire = client.register_script(_ACQUIRE)
        self.held = False

    def hold(self) -> bool:
        """Take or renew the lock; whether this beat may act."""
        try:
            held = bool(self._acquire(keys=[keys.BEAT_LOCK], args=[self.identity, int(self.ttl * 1000)]))
        except RedisError as exc:
            log.warning("beat lock: redis unavailable (%s)", exc)
            held = False
        if held != self.held:
            log.warning("beat %s %s the beat lock", self.identity, "holds" if held else "lost")
        self.held = held
        return held

    def release(self) -> None:
        try:
            if self.client.get(keys.BEAT_LOCK) == self.identity.encode():
                self.client.delete(keys.BEAT_LOCK)
        except RedisError:
            pass


class LockedScheduler(PersistentScheduler):
    """``celery -A crawler beat`` uses this (``beat_scheduler`` in crawler.celeryapp.app)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        settings = Settings.from_env()
        self.lock = BeatLock(connect(redis_url(settings)), settings.beat_lock_ttl)
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        # Lazy: the top-level module (installed with the package) reads the environment when
        # imported, so it is read when a beat starts, not wherever this module is imported.
        from beat_schedule import beat_schedule

        self.app.conf.beat_schedule = beat_schedule
        super().setup_schedule()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        renew = self.lock.ttl / 3  # renew well before the lock expires
        if not self.lock.hold():
            return renew
        return min(float(super().tick(*args, **kwargs)), renew)

    def close(self) -> None:
        self.lock.release()
        super().close()


def count_tick(client: Redis) -> None:
    """A cycle tick the beat sent reached a worker (``crawler status`` and tests read it)."""
    client.incr(keys.BEAT_TICKS)
