"""Where the broker is: the Redis URL every Celery process and the command line connect to.

Kept apart from ``app`` so that the signal handlers, the beat lock and the ``crawler`` command
can name the broker without importing Celery or creating the app.
"""

from __future__ import annotations

from crawler.settings import Settings

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def redis_url(settings: Settings | None = None) -> str:
    """``CRAWLER_REDIS_URL`` (or the given settings' URL), else the local default."""
    return (settings or Settings.from_env()).redis_url or DEFAULT_REDIS_URL
