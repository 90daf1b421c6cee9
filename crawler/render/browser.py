"""One headless Chromium per render worker process, driven over Playwright (Debian's ``chromium``
package: no browser is ever downloaded), rendering several pages at once.

Nothing the browser asks for reaches the network by itself: every request of a page goes to a
``Guard`` (``crawler.render.guard``), which answers the page's own document from the body the
fetch stage already has and fetches everything else through the crawler's guarded client, or
refuses it. The browser's own traffic (updates, safe browsing, DNS prefetch) is switched off and
sent to a dead proxy besides. No downloads, popups, dialogs or permission prompts.

A browser is restarted after ``render_recycle_pages`` pages or once its processes' memory passes
``render_max_rss``, and after a crash: browsers grow with the pages they have seen.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psutil

from crawler.errors import ConfigError

if TYPE_CHECKING:
    from playwright.async_api import Browser as PwBrowser
    from playwright.async_api import Playwright, Request, Route

    from crawler.render.guard import Guard

log = logging.getLogger(__name__)

# The browser keeps to what it is told: no background traffic of its own, and anything not
# routed through the page's handler dies at a proxy that is not there.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--mute-audio",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--disable-extensions", "--disable-features=Translate,MediaRouter,DnsOverHttps",
        "--dns-prefetch-disable", "--deny-permission-prompts", "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=<-loopback>"]


class RenderUnavailable(ConfigError):
    """No Chromium here: rendering cannot run. Says what to install."""


def chromium_path(configured: str = "") -> str:
    """The Chromium binary to drive; RenderUnavailable naming the package when there is none."""
    for candidate in ([configured] if configured else ["/usr/bin/chromium", "chromium", "chromium-browser"]):
        found = shutil.which(candidate) or (candidate if os.access(candidate, os.X_OK) else None)
        if found:
            return found
    where = f"{configured!r} is not an executable" if configured else "no chromium found"
    raise RenderUnavailable(f"rendering needs Chromium ({where}): install Debian's package "
                            "(apt-get install chromium) on the render workers, or set CRAWLER_CHROMIUM")


@dataclass
class Rendered:
    html: str = ""  # the DOM as the browser left it ("" if the page could not be rendered)
    error: str = ""  # why not: render_timeout, render_crashed, render_failed


class Browser:
    """A Chromium of this process, started on first use on the event loop that calls it."""

    def __init__(self, executable: str, max_pages: int, recycle_after: int, max_rss_mb: int) -> None:
        self.executable = executable
        self.recycle_after = recycle_after
        self.max_rss = max_rss_mb * 2**20
        self.slots = asyncio.Semaphore(max_pages)
        self._pw: Playwright | None = None
        self._browser: PwBrowser | None = None
        self.rendered = 0  # pages by the current browser
        self.started = 0  # browsers started, restarts included
        self.peak_rss = 0

    async def _ensure(self) -> PwBrowser:
        if self._browser is not None and self._browser.is_connected():
            return self._browser
        await self._close_browser()
        if self._pw is None:
            from playwright.async_api import async_playwright

            self._pw = await async_playwright().start()
        self._browser = await self._pw.chromium.launch(executable_path=self.executable, headless=True, args=ARGS)
        self.rendered = 0
        self.started += 1
        return self._browser

    def rss(self) -> int:
        """Bytes of memory the browser's processes hold now."""
        total = 0
        for p in psutil.Process().children(recursive=True):
            try:
                if "chrom" in p.name():
                    total += p.memory_info().rss
            except psutil.Error:
                pass
        self.peak_rss = max(self.peak_rss, total)
        return total

    async def recycle_if_due(self) -> None:
        """Restart the browser past its page count or memory limit (between batches, with no page open)."""
        if self._browser is None:
            return
        if self.rendered >= self.recycle_after or self.rss() > self.max_rss:
            log.info("render: restarting the browser after %d pages (%d MB)", self.rendered, self.rss() >> 20)
            await self._close_browser()

    async def render(self, url: str, guard: Guard, timeout: float, settle: float, wait_for: str = "") -> Rendered:
        """Load ``url`` (its document answered by ``guard``), wait for it to settle (and for the
        selector ``wait_for``, if given), and return its DOM. Never raises for a page."""
        async with self.slots:
            try:
                browser = await self._ensure()
            except Exception as exc:
                log.error("render: cannot start %s: %s", self.executable, exc)
                return Rendered(error="render_failed")
            context = None
            try:
                context = await browser.new_context(accept_downloads=False, java_script_enabled=True,
                                                    service_workers="block", permissions=[])
                page = await context.new_page()
                page.on("dialog", lambda d: asyncio.ensure_future(d.dismiss()))
                page.on("popup", lambda p: asyncio.ensure_future(p.close()))

                async def route(r: Route, request: Request) -> None:
                    await guard.handle(r, request)

                await context.route("**/*", route)
                return await asyncio.wait_for(self._load(page, url, guard, settle, wait_for), timeout)
            except TimeoutError:
                return Rendered(error="render_timeout")
            except Exception as exc:
                crashed = self._browser is None or not self._browser.is_connected()
                log.warning("render: %s: %s", url, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                return Rendered(error="render_crashed" if crashed else "render_failed")
            finally:
                self.rendered += 1
                if context is not None:
                    await self._close_context(context)

    @staticmethod
    async def _load(page: Any, url: str, guard: Guard, settle: float, wait_for: str) -> Rendered:
        await page.goto(url, wait_until="load")
        if wait_for:
            await page.wait_for_selector(wait_for, state="attached")
        # Scripts often add content after load (timers, fetches): read the page once none of its
        # requests has been open for ``settle`` seconds (the caller's deadline bounds the wait).
        while True:
            quiet = guard.quiet_for()
            if quiet >= settle:
                break
            await asyncio.sleep(settle - quiet if quiet >= 0 else 0.05)
        return Rendered(html=await page.content())

    async def _close_context(self, context: Any) -> None:
        # A page whose script never yields can hold its context's close: give up on it after a
        # while and restart the whole browser instead.
        try:
            await asyncio.wait_for(context.close(), 5.0)
        except Exception:
            log.warning("render: a page would not close; restarting the browser")
            await self._close_browser()

    async def _close_browser(self) -> None:
        browser, self._browser = self._browser, None
        if browser is None:
            return
        try:
            await asyncio.wait_for(browser.close(), 10.0)
        except Exception:
            pass  # it is gone or hung: its processes are killed below
        for p in psutil.Process().children(recursive=True):
            try:
                if "chrom" in p.name():
                    p.kill()
            except psutil.Error:
                pass

    async def close(self) -> None:
        await self._close_browser()
        if self._pw is not None:
            pw, self._pw = self._pw, None
            try:
                await pw.stop()
            except Exception:
                pass
