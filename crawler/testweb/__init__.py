"""A deterministic synthetic multi-host web served on loopback, for tests, the demo and
benchmarks: the crawler never needs the internet to show what it does."""

from crawler.testweb.model import Link, Page, WebModel
from crawler.testweb.server import Hit, TestWeb

__all__ = ["Hit", "Link", "Page", "TestWeb", "WebModel"]
