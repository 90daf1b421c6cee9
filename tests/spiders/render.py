"""A spider choosing which pages a browser renders: the scripted host's, waiting for their
script-built links; never the plain host's."""

from __future__ import annotations

from crawler.spiders import Spider


class RenderSpider(Spider):
    version = "render-1"
    plain = "127.0.4.11"

    def render(self, url: str) -> bool | str | None:
        return False if f"//{self.plain}:" in url else "#main a, #main p"
