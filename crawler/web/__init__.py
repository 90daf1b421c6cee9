"""The crawl console: a REST API over ``crawler.control`` (the functions the CLI calls), a live
web page served from ``static/``, and ``/metrics`` for Prometheus. ``create_app`` builds the
ASGI app; ``crawler web`` serves it with uvicorn."""

from crawler.web.app import create_app as create_app
