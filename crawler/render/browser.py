"""One headless Chromium per render worker process, driven over Playwright (Debian's ``chromium``
package: no browser is ever downloaded), rendering several pages at once.

Nothing the browser asks for reaches the network by itself: every request of a page goes to a
``Guard`` (``crawler.render.guard``), which answers the page's own document from the body the
fetch stage already has and fetches everything else through the crawler's guarded client, or
refuses it. The browser's own traffic (updates, safe browsing, DNS prefetch) is switched off and
sent to a dead proxy besides. No downloads (refused, counted), dialogs (dismissed, counted) or
permission prompts; popups are closed and
a navigation away from the page is answered with an empty response, so the page stays as it was
(``Guard``: both are counted and recorded, neither fails the render).

A page is read once it has settled: none of its requests open, its document unchanged, and no
short timer of its scripts pending, for ``render_settle`` seconds (an init script watches the
document, the timers and the fetches and XHRs of its scripts). A page still busy at its deadline
after its load event is read as it stands.

A browser is restarted after ``render_recycle_pages`` pages or once its processes' memory (PSS)
passes ``render_max_rss``, and after a crash: browsers grow with the pages they have seen. A
browser that needs restarting while other pages are still rendering on it is restarted when the
last of them is done.
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
# routed through the page's handler dies at a proxy that is not there. It resolves no names, and
# WebRTC may send no UDP past the proxy (route handlers never see it): the switch has had two
# names, and Debian's chromium 156 honours only the older one.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--mute-audio",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--disable-extensions", "--disable-features=Translate,MediaRouter,DnsOverHttps",
        "--dns-prefetch-disable", "--deny-permission-prompts", "--proxy-server=http://127.0.0.1:9",
        "--proxy-bypass-list=<-loopback>", "--host-resolver-rules=MAP * ~NOTFOUND",
        "--webrtc-ip-handling-policy=disable_non_proxied_udp",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp"]

TIMER_WAIT = 3.0  # a timer of at most this many seconds, set within as many of navigation, holds the reading
POLL = 0.05  # seconds between looks at a page that is not yet settled
CLOSE_WAIT = 5.0  # seconds a page's context may take to close before its browser is restarted
# Seconds to read the DOM of a page past its deadline (its script may never yield); a busy page's
# renderer on a loaded machine took more than 1 s to answer.
PARTIAL_READ = 2.0

# Runs in every frame before the page's scripts. Records when the document last changed and
# which timers of at most TIMER_WAIT, set within TIMER_WAIT of navigation, are pending, so that
# content a script adds on a timer is waited for, however late a slow load ran the script (a
# timer re-armed forever stops counting TIMER_WAIT after navigation). Counts the fetches and
# XHRs its scripts have asked for and not yet had answered: Chromium hands a request to the route
# handler some time after the script asks, and on a loaded machine the page looked settled in
# between (one of three fetches seen). Removes the
# page's means of opening peer-to-peer or UDP connections, which no route handler sees.
INIT_SCRIPT = """(() => {
  const w = window, now = () => performance.now(), pending = new Set();
  let last = now();
  for (const k of ["RTCPeerConnection", "webkitRTCPeerConnection", "RTCDataChannel", "WebTransport"]) {
    try { delete w[k]; } catch (e) {}
  }
  new MutationObserver(() => { last = now(); })
    .observe(document, {subtree: true, childList: true, characterData: true, attributeFilter: ["href", "src"]});
  const set = w.setTimeout, clearT = w.clearTimeout, clearI = w.clearInterval;
  w.setTimeout = function (fn, ms, ...args) {
    if (typeof fn !== "function" || now() > TIMER_WAIT_MS || (Number(ms) || 0) > TIMER_WAIT_MS) {
      return set.call(w, fn, ms, ...args);
    }
    const id = set.call(w, function () { pending.delete(id); return fn.apply(this, arguments); }, ms, ...args);
    pending.add(id);
    return id;
  };
  w.clearTimeout = function (id) { pending.delete(id); return clearT.call(w, id); };
  w.clearInterval = function (id) { pending.delete(id); return clearI.call(w, id); };
  // Each request its own token, settled once: one XHR object sent again from its onload has two
  // requests out under one listener otherwise. A token counts for TIMER_WAIT after it was asked:
  // by then the route handler has the request (and holds the reading itself), and a request
  // nothing ever answers (an XHR re-opened while out) does not hold the page to its deadline.
  const asked = new Map(), then = Promise.prototype.then, live = new WeakMap();
  let seq = 0;
  const ask = () => {
    const t = ++seq;
    asked.set(t, now());
    return () => { if (asked.delete(t)) last = now(); };
  };
  const waiting = () => {
    for (const [t, at] of asked) { if (now() - at > TIMER_WAIT_MS) asked.delete(t); }
    return asked.size;
  };
  if (typeof w.fetch === "function") {
    const f = w.fetch;
    w.fetch = function () {
      const done = ask();
      let p;
      try { p = f.apply(this, arguments); } catch (e) { done(); throw e; }
      then.call(p, done, done);
      return p;
    };
  }
  if (w.XMLHttpRequest) {
    const x = w.XMLHttpRequest.prototype, open = x.open, send = x.send;
    x.open = function () {
      const done = live.get(this);  // a request still out is dropped without a loadend
      if (done) { live.delete(this); done(); }
      return open.apply(this, arguments);
    };
    x.send = function () {
      const xhr = this, done = ask();
      // A request's own end comes with the object done (4); one re-sent from its onload still
      // gets the first request's loadend, while the second is out (1).
      const end = () => {
        if (xhr.readyState !== 4) return;
        xhr.removeEventListener("loadend", end);
        if (live.get(xhr) === done) live.delete(xhr);
        done();
      };
      try {
        xhr.addEventListener("loadend", end);
        const r = send.apply(xhr, arguments);
        live.set(xhr, done);  // after: a second send() that throws leaves the first request's
        return r;
      } catch (e) {
        try { xhr.removeEventListener("loadend", end); } catch (e2) {}
        done();
        throw e;
      }
    };
  }
  Object.defineProperty(w, "__crawlerQuiet", {value: () => pending.size || waiting() ? -1 : (now() - last) / 1000});
})();""".replace("TIMER_WAIT_MS", str(round(TIMER_WAIT * 1000)))
# Seconds since the document last changed or a request was answered, -1 while a timer it waits
# for or a request its scripts made is pending.
QUIET = "() => typeof window.__crawlerQuiet === 'function' ? window.__crawlerQuiet() : 1e9"


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
    error: str = ""  # why not, or not wholly (with html): render_timeout, render_crashed, render_failed


class Browser:
    """A Chromium of this process, started on first use on the event loop that calls it."""

    def __init__(self, executable: str, max_pages: int, recycle_after: int, max_rss_mb: int) -> None:
        self.executable = executable
        self.recycle_after = recycle_after
        self.max_rss = max_rss_mb * 2**20
        self.slots = asyncio.Semaphore(max_pages)
        # Starting, restarting and closing take turns: each would otherwise start a driver and a
        # browser of its own (and leave all but one running).
        self._lock = asyncio.Lock()
        self._pw: Playwright | None = None
        self._browser: PwBrowser | None = None
        self.active = 0  # pages being rendered on the current browser
        self.restart = False  # the browser is to be restarted once no page is rendering on it
        self.rendered = 0  # pages by the current browser
        self.started = 0  # browsers started, restarts included
        self.peak_rss = 0

    async def _ensure(self) -> PwBrowser:
        """The browser, started if need be, with one more page counted as rendering on it."""
        async with self._lock:
            if self._browser is None or not self._browser.is_connected():
                await self._close_browser()
                if self._pw is None:
                    from playwright.async_api import async_playwright

                    self._pw = await async_playwright().start()
                self._browser = await self._pw.chromium.launch(executable_path=self.executable, headless=True,
                                                               args=ARGS)
                self.rendered = 0
                self.started += 1
            self.active += 1
            return self._browser

    async def _release(self) -> None:
        async with self._lock:
            self.active -= 1
            if self.restart and not self.active:
                await self._close_browser()

    def rss(self) -> int:
        """Bytes of memory the browser's processes hold now: their PSS summed (Chromium's
        processes share most of their pages, which summed RSS would count once per process)."""
        total = 0
        for p in psutil.Process().children(recursive=True):
            try:
                if "chrom" in p.name():
                    total += p.memory_full_info().pss
            except psutil.Error:
                pass
        self.peak_rss = max(self.peak_rss, total)
        return total

    async def recycle_if_due(self) -> None:
        """Restart the browser past its page count or memory limit, or when a page would not
        close (between batches, with no page open)."""
        async with self._lock:
            if self._browser is None or self.active:
                return
            held = self.rss()
            if self.restart or self.rendered >= self.recycle_after or held > self.max_rss:
                log.info("render: restarting the browser after %d pages (%d MB)", self.rendered, held >> 20)
                await self._close_browser()

    async def render(self, url: str, guard: Guard, timeout: float, settle: float, wait_for: str = "") -> Rendered:
        """Load ``url`` (its document answered by ``guard``), wait for it to settle (and for the
        selector ``wait_for``, if given), and return its DOM. Past ``timeout`` after its load
        event, the DOM as it stands, with the error ``render_timeout``. Never raises for a page."""
        async with self.slots:
            try:
                browser = await self._ensure()
            except Exception as exc:
                log.error("render: cannot start %s: %s", self.executable, exc)
                return Rendered(error="render_failed")
            context = None
            loaded = asyncio.Event()
            try:
                context = await browser.new_context(accept_downloads=False, java_script_enabled=True,
                                                    service_workers="block", permissions=[])
                await context.add_init_script(INIT_SCRIPT)
                page = await context.new_page()
                page.on("dialog", guard.dialog)
                page.on("download", guard.download)
                page.on("popup", guard.popup)
                guard.page = page

                async def route(r: Route, request: Request) -> None:
                    await guard.handle(r, request)

                await context.route("**/*", route)
                return await asyncio.wait_for(self._load(page, url, guard, settle, wait_for, loaded), timeout)
            except TimeoutError:
                return Rendered(html=await self._partial(page) if loaded.is_set() else "", error="render_timeout")
            except Exception as exc:
                crashed = self._browser is None or not self._browser.is_connected()
                log.warning("render: %s: %s", url, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                return Rendered(error="render_crashed" if crashed else "render_failed")
            finally:
                self.rendered += 1
                if context is not None:
                    await self._close_context(context)
                await self._release()

    @staticmethod
    async def _load(page: Any, url: str, guard: Guard, settle: float, wait_for: str, loaded: asyncio.Event) -> Rendered:
        await page.goto(url, wait_until="load")
        loaded.set()
        if wait_for:
            await page.wait_for_selector(wait_for, state="attached")
        # Scripts often add content after load (timers, fetches): read the page once none of its
        # requests has been open, its document has not changed and no timer it waits for has
        # been pending for ``settle`` seconds (the caller's deadline bounds the wait).
        while not guard.navigated:  # a page that tried to leave is read as it stood then
            net = guard.quiet_for()
            dom = float(await page.evaluate(QUIET))
            quiet = -1.0 if net < 0 or dom < 0 else min(net, dom)
            if quiet >= settle:
                break
            await asyncio.sleep(settle - quiet if quiet >= 0 else POLL)
        return Rendered(html=await page.content())

    @staticmethod
    async def _partial(page: Any) -> str:
        # A script that never yields holds the page's DOM too: then there is nothing to keep.
        try:
            return str(await asyncio.wait_for(page.content(), PARTIAL_READ))
        except Exception:
            return ""

    async def _close_context(self, context: Any) -> None:
        # A context that will not close takes its browser down with it, but only once no other
        # page is rendering on that browser: killing it now would lose them too.
        try:
            await asyncio.wait_for(context.close(), CLOSE_WAIT)
        except TimeoutError:
            log.warning("render: a page would not close; the browser restarts once its other pages are done")
            self.restart = True
        except Exception:
            pass  # its browser is gone: the next page starts another

    async def _close_browser(self) -> None:
        browser, self._browser = self._browser, None
        self.restart = False
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
        async with self._lock:
            await self._close_browser()
            if self._pw is not None:
                pw, self._pw = self._pw, None
                try:
                    await pw.stop()
                except Exception:
                    pass
