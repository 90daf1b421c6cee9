"""Spiders: site-specific code a job runs (``--spider``). Import what a spider needs from here:
``from crawler.spiders import Spider, Page, Request, Session``."""

from crawler.spiders.base import Follow, Spider
from crawler.spiders.forms import form_request
from crawler.spiders.page import Headers, Page
from crawler.spiders.pipelines import DropItem
from crawler.spiders.request import Request
from crawler.spiders.session import LoginFailed, Session

__all__ = ["DropItem", "Follow", "Headers", "LoginFailed", "Page", "Request", "Session", "Spider", "form_request"]
