"""The render worker's browser driven directly (Debian's chromium over Playwright, in this
process): one browser however many pages start at once, a page that will not close, pages that
build content late or never stop, WebRTC, the hosts' politeness, and how long pages bound for
the browser are held."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections import Counter
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
import redis
from playwright.async_api import BrowserContext, async_playwright

from crawler import jobs
from crawler.config.settings import Settings
from crawler.fetch.client import FetchConfig, runtime
from crawler.frontier import Entry, Frontier
from crawler.frontier.core import HostOverride
from crawler.render import browser as browser_module
from crawler.render.browser import ARGS, Browser
from crawler.render.guard import Guard, HostTurns
from crawler.stages.context import Context
from crawler.stages.fetch import RENDER_WAIT, _mark_for_render
from crawler.stages.messages import FetchedPage
from crawler.stages.render import host_limits
from crawler.state import keys
from crawler.testweb.scripted import ScriptedWeb
from tests.conftest import TEST_NETWORKS
from tests.integration.test_render import require_chromium

T = TypeVar("T")
CONFIG = FetchConfig(user_agent="crawler-test", allow_networks=tuple(TEST_NETWORKS.split(",")))


def run(coro: Coroutine[Any, Any, T]) -> T:
    return runtime().run(coro)


@pytest.fixture
def browser() -> Iterator[Browser]:
    b = Browser(require_chromium(), max_pages=4, recycle_after=200, max_rss_mb=1024)
    runtime().fetcher(CONFIG)  # made now, outside the loop: guard() is called on it
    yield b
    run(b.close())


@pytest.fixture
def web() -> Iterator[ScriptedWeb]:
    w = ScriptedWeb().start()
    yield w
    w.stop()


def guard(url: str, body: bytes, turns: HostTurns | None = None) -> Guard:
    return Guard(url, body, "text/html; charset=utf-8", runtime().fetcher(CONFIG), CONFIG, None,
                 turns or HostTurns(1, 0.0), Counter())


def scripted(web: ScriptedWeb, path: str) -> Guard:
    body = web.body(web.ips[0], path)
    assert body is not None
    return guard(web.origin(web.ips[0]) + path, body)


def drivers() -> int:
    """Playwright driver processes of this process."""
    n = 0
    for p in psutil.Process().children(recursive=True):
        try:
            n += "run-driver" in " ".join(p.cmdline())
        except psutil.Error:
            pass
    return n


def test_pages_starting_at_once_share_one_browser_and_one_driver(browser: Browser, web: ScriptedWeb) -> None:
    before = drivers()

    async def four() -> list[str]:
        guards = [scripted(web, p) for p in ("/a1", "/a2", "/a3", "/a4")]
        done = await asyncio.gather(*(browser.render(g.url, g, 10.0, 0.3) for g in guards))
        return [d.error or "ok" for d in done]

    assert run(four()) == ["ok"] * 4
    assert browser.started == 1 and drivers() - before == 1
    run(browser.close())
    assert drivers() == before


def test_late_and_busy_pages(browser: Browser, web: ScriptedWeb) -> None:
    async def pages() -> list[tuple[str, str]]:
        guards = [scripted(web, p) for p in ("/slow", "/busy", "/loop")]
        done = await asyncio.gather(*(browser.render(g.url, g, 4.0, 0.5) for g in guards))
        return [(d.error, d.html) for d in done]

    (slow_error, slow), (busy_error, busy), (loop_error, loop) = run(pages())
    # Links a timer adds 1.2 s after load, with nothing else happening before them, are read.
    assert slow_error == "" and 'href="/slow-leaf"' in slow
    # A page still changing at its deadline is kept as it stood; one whose script never yields
    # (its load never came) is not, and neither holds the caller past its deadline for long.
    assert busy_error == "render_timeout" and 'href="/after-busy"' in busy
    assert loop_error == "render_timeout" and loop == ""


def test_a_page_that_will_not_close_lets_the_others_finish(browser: Browser, web: ScriptedWeb,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Chromium closes even a hung page at once here: a context whose close hangs is made so.
    real_close = BrowserContext.close

    async def close(self: BrowserContext, **kw: Any) -> None:
        if any(p.url.endswith("/stuck") for p in self.pages):
            await asyncio.sleep(60)
        await real_close(self, **kw)

    monkeypatch.setattr(BrowserContext, "close", close)
    monkeypatch.setattr(browser_module, "CLOSE_WAIT", 0.3)
    origin = web.origin(web.ips[0])
    quick = guard(origin + "/stuck", b"<title>stuck</title><p>done at once</p>")
    late = "document.body.appendChild(document.createElement('a')).href='/late-link';"
    slow = guard(origin + "/slow-page", f"<title>slow</title><script>setTimeout(function(){{{late}}}, 2500)"
                                        f"</script>".encode())

    async def both() -> list[tuple[str, str]]:
        done = await asyncio.gather(browser.render(quick.url, quick, 10.0, 0.3),
                                    browser.render(slow.url, slow, 10.0, 0.3))
        return [(d.error, d.html) for d in done]

    (quick_error, _), (slow_error, slow_html) = run(both())
    assert quick_error == "" and slow_error == "" and 'href="/late-link"' in slow_html
    # Restarted once the last page was done, not while the slow one was still rendering.
    assert browser.started == 1 and not browser.restart
    again = scripted(web, "/a1")
    assert run(browser.render(again.url, again, 10.0, 0.3)).error == ""
    assert browser.started == 2


def _udp_listener() -> socket.socket:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.4.30", 0))
    u.settimeout(0.1)
    return u


def _received(u: socket.socket, seconds: float) -> int:
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            u.recvfrom(2048)
            n += 1
        except TimeoutError:
            pass
    return n


def _webrtc_page(port: int) -> bytes:
    return (f"<title>rtc</title><p id=r></p><script>document.getElementById('r').textContent='rtc:'+typeof "
            f"RTCPeerConnection;var pc=new RTCPeerConnection({{iceServers:[{{urls:'stun:127.0.4.30:{port}'}}]}});"
            "pc.createDataChannel('d');pc.createOffer().then(function(o){return pc.setLocalDescription(o);});"
            "</script>").encode()


def test_webrtc_sends_no_udp(browser: Browser) -> None:
    u = _udp_listener()
    try:
        page = _webrtc_page(u.getsockname()[1])
        g = guard("http://127.0.4.31:9/", page)
        got = run(browser.render(g.url, g, 10.0, 0.5))
        assert "rtc:undefined" in got.html, got
        assert _received(u, 1.0) == 0

        async def without_init_script() -> None:
            # The switches alone, for a frame the init script might miss.
            pw = await async_playwright().start()
            try:
                b = await pw.chromium.launch(executable_path=browser.executable, args=ARGS)
                p = await b.new_page()
                await p.route("**/*", lambda r: r.fulfill(status=200, body=page, content_type="text/html"))
                await p.goto("http://127.0.4.31:9/", wait_until="load")
                assert await p.inner_text("#r") == "rtc:function"
                await asyncio.sleep(1.0)
                await b.close()
            finally:
                await pw.stop()

        run(without_init_script())
        assert _received(u, 0.5) == 0
    finally:
        u.close()


class _Timed(ThreadingHTTPServer):
    def __init__(self, ip: str) -> None:
        self.times: list[float] = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.times.append(time.monotonic())
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Access-Control-Allow-Origin", "*")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        server = self
        super().__init__((ip, 0), Handler)
        self.daemon_threads = True
        threading.Thread(target=self.serve_forever, daemon=True).start()


def test_the_browser_keeps_each_hosts_own_delay(browser: Browser, r: redis.Redis, tmp_path: Path) -> None:
    timed = _Timed("127.0.4.40")
    host = f"127.0.4.40:{timed.server_address[1]}"
    try:
        job_id = jobs.submit(r, Settings.from_env(delay=0.0, per_host=1, shards=1,
                                                  store=f"sqlite:///{tmp_path / 'c.db'}"), [f"http://{host}/"])
        job = jobs.load(r, job_id)
        ctx = Context.default(r)
        ctx.frontier.set_host_override(job_id, host, HostOverride(delay=0.4), shards=1)
        ctx.frontier.set_host_delays(job_id, {"127.0.4.41:80": 0.7, "127.0.4.42:80": 0.1})
        ctx.frontier.set_host_override(job_id, "127.0.4.42:80", HostOverride(delay=0.3, per_host=2), shards=1)
        limits = host_limits(ctx, job, [host])
        # The largest of the job's delay, the host's current one and an operator's, whose
        # in-flight limit stands.
        assert limits("127.0.4.41:80") == (1, 0.7)
        assert limits("127.0.4.42:80") == (2, 0.3)
        assert limits("127.0.4.43:80") == (1, 0.0)
        fetches = "".join(f"fetch('/r{i}');" for i in range(3))
        g = guard(f"http://{host}/", f"<title>t</title><script>{fetches}</script>".encode(),
                  HostTurns(job.settings.per_host, job.settings.delay, limits))
        assert run(browser.render(g.url, g, 10.0, 0.3)).error == ""
        gaps = [b - a for a, b in zip(timed.times, timed.times[1:], strict=False)]
        assert len(timed.times) == 3 and min(gaps) >= 0.35, gaps
    finally:
        timed.shutdown()
        timed.server_close()


class _LateRoute(Guard):
    """Chromium hands the page's own requests to the route handler late, as on a loaded machine."""

    async def handle(self, route: Any, request: Any) -> None:
        if request.url != self.url:
            await asyncio.sleep(1.0)
        await super().handle(route, request)


@contextmanager
def _served_late(ip: str, page: bytes) -> Iterator[tuple[_LateRoute, _Timed]]:
    """``page`` as a document on ``ip``, whose requests reach a server of their own there
    (answering "ok"), each handed to the route 1 s late."""
    data = _Timed(ip)
    try:
        yield _LateRoute(f"http://{ip}:{data.server_address[1]}/", page, "text/html; charset=utf-8",
                         runtime().fetcher(CONFIG), CONFIG, None, HostTurns(4, 0.0), Counter()), data
    finally:
        data.shutdown()
        data.server_close()


def test_a_request_the_browser_hands_over_late_still_holds_the_reading(browser: Browser) -> None:
    page = (b"<title>t</title><p id=a></p><p id=b></p><script>"
            b"fetch('/a.json').then(r => r.text())"
            b".then(t => { document.getElementById('a').textContent = 'f' + t; });"
            b"const x = new XMLHttpRequest(); x.open('GET', '/b.json');"
            b"x.onload = () => { document.getElementById('b').textContent = 'x' + x.responseText; }; x.send();"
            b"</script>")
    with _served_late("127.0.4.44", page) as (late, data):
        rendered = run(browser.render(late.url, late, 10.0, 0.3))
        assert rendered.error == ""
        assert '<p id="a">fok</p>' in rendered.html and '<p id="b">xok</p>' in rendered.html, rendered.html
        assert len(data.times) == 2


def test_xhrs_sent_again_reopened_or_sent_twice_let_the_page_settle(browser: Browser) -> None:
    # One XHR object sent again from its onload, one re-opened while out (no loadend for the
    # first), one sent twice (the second throws): each once held the reading to its deadline.
    page = (b"<title>t</title><p id=a></p><p id=b></p><p id=c></p><script>"
            b"const a = new XMLHttpRequest(); let n = 0;"
            b"a.onload = () => { n++; if (n < 2) { a.open('GET', '/a2'); a.send(); }"
            b" else { document.getElementById('a').textContent = 'a' + n; } };"
            b"a.open('GET', '/a1'); a.send();"
            b"const b = new XMLHttpRequest(); b.open('GET', '/b1'); b.send();"
            b"setTimeout(() => {"
            b" b.onload = () => { document.getElementById('b').textContent = 'b' + b.responseText; };"
            b" b.open('GET', '/b2'); b.send(); }, 100);"
            b"const c = new XMLHttpRequest();"
            b"c.onload = () => { document.getElementById('c').textContent = 'c' + c.responseText; };"
            b"c.open('GET', '/c'); c.send(); try { c.send(); } catch (e) {}"
            b"</script>")
    with _served_late("127.0.4.45", page) as (late, _):
        rendered = run(browser.render(late.url, late, 8.0, 0.3))
        assert rendered.error == "", rendered.error
        for want in ('<p id="a">a2</p>', '<p id="b">bok</p>', '<p id="c">cok</p>'):
            assert want in rendered.html, rendered.html


def test_pages_bound_for_the_browser_are_held_for_the_rounds_their_batch_takes(r: redis.Redis) -> None:
    s = Settings.from_env(render="always", render_pages=4, render_timeout=10.0, lease_timeout=60.0, shards=1)
    job_id = jobs.submit(r, s, ["http://127.0.4.50/"])
    job = jobs.load(r, job_id)
    ctx = Context.default(r)
    frontier = Frontier(r)
    frontier.admit(job_id, [Entry(f"http://127.0.4.{50 + i}/") for i in range(10)], 1)
    leased = frontier.dispatch(job_id, 0, max_urls=100, per_host=1, delay=0.0, lease_timeout=60.0, concurrency=100)
    assert len(leased.items) == 10
    pages = [FetchedPage(url=e.url, depth=0, referrer="", final_url=e.url, status=200, body_key=f"b{i}",
                         content_type="text/html")
             for i, (e, _) in enumerate(leased.items)]
    start = time.time()
    marked = _mark_for_render(ctx, job, leased.token, None, pages)
    assert all(p.render == "wanted" for p in marked)
    # Ten pages, four at a time: three rounds in the browser.
    expiry = [float(r.zscore(keys.lease_expiry(job_id), p.url) or 0) for p in pages]
    assert len(expiry) == 10
    assert min(expiry) >= start + 60.0 + 3 * RENDER_WAIT * 10.0 - 1


def test_the_browser_is_restarted_past_its_page_count_or_its_memory(web: ScriptedWeb) -> None:
    b = Browser(require_chromium(), max_pages=4, recycle_after=2, max_rss_mb=100_000)
    runtime().fetcher(CONFIG)

    async def batch() -> list[str]:
        await b.recycle_if_due()
        guards = [scripted(web, p) for p in ("/a1", "/a2")]
        return [d.error for d in await asyncio.gather(*(b.render(g.url, g, 10.0, 0.3) for g in guards))]

    try:
        assert run(batch()) == ["", ""] and b.started == 1
        assert run(batch()) == ["", ""] and b.started == 2  # two pages: restarted
        # Memory is the browser's processes' PSS, which counts the pages they share once.
        assert 0 < b.rss() < _summed_rss()
        b.recycle_after, b.max_rss = 100, b.rss() // 2
        assert run(batch()) == ["", ""] and b.started == 3  # past its memory: restarted
    finally:
        run(b.close())


def _summed_rss() -> int:
    # Chromium's helper processes come and go while it runs: one may exit between being listed
    # and being read (as Browser.rss allows for too).
    total = 0
    for p in psutil.Process().children(recursive=True):
        try:
            if "chrom" in p.name():
                total += p.memory_info().rss
        except psutil.Error:
            pass
    return total
