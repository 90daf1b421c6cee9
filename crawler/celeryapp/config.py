"""What the entry points read first: the settings from the environment, and where the brokers are.

Kept apart from ``app`` so that the signal handlers, the beat lock and the ``crawler`` command
can use them without importing Celery or creating the app.
"""

from __future__ import annotations

import sys
from typing import Any

from crawler.config.brokers import Broker, parse_brokers
from crawler.config.settings import SettingError, Settings

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_url(settings: Settings | None = None) -> str:
    """``CRAWLER_REDIS_URL`` (or the given settings' URL), else the local default."""
    return (settings or Settings.from_env()).redis_url or DEFAULT_REDIS_URL


def brokers(settings: Settings | None = None) -> tuple[Broker, ...]:
    """The brokers of the task queues: ``CRAWLER_BROKER_URL``'s (one, or several with shard N's
    queue on the (N mod count)-th: ``crawler.config.brokers``), else the crawler's Redis."""
    s = settings or Settings.from_env()
    return parse_brokers(s.broker_url, redis_url(s), s.sentinel_master)


def sentinel_options(broker: Broker) -> dict[str, Any]:
    """Broker transport options for a Redis under Sentinel (``sentinel://...;sentinel://...``):
    the master's name, which kombu needs besides the URL; none for a plain Redis."""
    return {"master_name": broker.master} if broker.sentinel else {}


def environment() -> Settings:
    """The settings from the environment; on a wrong variable, exit with status 2 and one line
    naming it (not a traceback, not a silent default). ``celery -A crawler`` reads them when the
    app is made, the ``crawler`` command before it parses its arguments."""
    try:
        return Settings.from_env()
    except SettingError as exc:
        print(f"crawler: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
