"""Spiders: site-specific code a job runs (``--spider``). Import what a spider needs from here:
``from crawler.spiders import Spider, Page, Follow, Session``."""

from crawler.spiders.base import Follow, Spider
from crawler.spiders.page import Headers, Page
from crawler.spiders.session import LoginFailed, Session

__all__ = ["Follow", "Headers", "LoginFailed", "Page", "Session", "Spider"]
