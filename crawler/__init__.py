"""A distributed web crawler on Celery and Redis. ``celery -A crawler worker -Q shard-0``."""

from crawler.app import app

__all__ = ["app"]
