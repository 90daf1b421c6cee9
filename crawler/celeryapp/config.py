"""What the entry points read first: the settings from the environment, and where the broker is.

Kept apart from ``app`` so that the signal handlers, the beat lock and the ``crawler`` command
can use them without importing Celery or creating the app.
"""

from __future__ import annotations

import sys

from crawler.config.settings import SettingError, Settings

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_url(settings: Settings | None = None) -> str:
    """``CRAWLER_REDIS_URL`` (or the given settings' URL), else the local default."""
    return (settings or Settings.from_env()).redis_url or DEFAULT_REDIS_URL


def environment() -> Settings:
    """The settings from the environment; on a wrong variable, exit with status 2 and one line
    naming it (not a traceback, not a silent default). ``celery -A crawler`` reads them when the
    app is made, the ``crawler`` command before it parses its arguments."""
    try:
        return Settings.from_env()
    except SettingError as exc:
        print(f"crawler: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
