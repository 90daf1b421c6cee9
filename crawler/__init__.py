"""A distributed web crawler on Celery and Redis. ``celery -A crawler worker -Q shard-0``.

Importing ``crawler`` or any of its domain modules does not import Celery: the Celery app is
made on first access to ``crawler.app`` (which is how ``celery -A crawler`` finds it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crawler.celeryapp.app import app

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    """``crawler.app``: the Celery app, made (and Celery imported) only when first asked for."""
    if name == "app":
        # Lazy on purpose (PEP 562): an import here would load Celery for every domain module.
        from crawler.celeryapp.app import app

        return app
    raise AttributeError(f"module 'crawler' has no attribute {name!r}")
