"""The test web lives in ``crawler.testweb`` so the demo and benchmarks can serve it too."""

from crawler.testweb import Hit, TestWeb, WebModel

__all__ = ["Hit", "TestWeb", "WebModel"]
