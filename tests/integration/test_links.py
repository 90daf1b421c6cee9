"""Pages with very many links: capped per page, their URL sent once per batch, admitted in
bounded script calls; and session-id traps that a default crawl stays out of."""

from __future__ import annotations

import json
import random
import secrets
import sqlite3
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import redis

from crawler import jobs, stages
from crawler.config.settings import Settings
from crawler.dedup import ADMIT_CHUNK, admit_links
from crawler.dedup.variants import trap_candidates
from crawler.embedded import Outcome, crawl
from crawler.frontier import Entry, Frontier
from crawler.stages.messages import LinkGroup, groups_from_json, groups_to_json
from crawler.state import keys
from crawler.testweb import TestWeb
from crawler.testweb.server import QuietHandler
from tests.unit.dedup.test_simhash import ARTICLE
from tests.web import handlers as hw

ANCHORS = 50_000
CAP = Settings().max_links_per_page


@contextmanager
def admit_calls(frontier: Frontier) -> Iterator[list[int]]:
    """The URLs of each call of the admit script, as they leave for Redis: after the script's 11
    fixed arguments (the 2 every script has, then its own) come the counters (how many, then a
    name and an amount each), then 4 arguments per URL."""
    calls: list[int] = []
    real = frontier._call

    def spy(script: object, job: str, *args: object) -> object:
        if script is frontier._admit:
            n = int(args[9])  # type: ignore[call-overload]
            calls.append((len(args) - 10 - 2 * n) // 4)
        return real(script, job, *args)  # type: ignore[arg-type]

    frontier._call = spy  # type: ignore[method-assign,assignment]
    try:
        yield calls
    finally:
        frontier._call = real  # type: ignore[method-assign]


def test_a_page_of_50000_anchors_is_capped_sent_compactly_and_admitted_in_chunks(
        r: redis.Redis, make_web: Callable[..., TestWeb], tmp_path: Path) -> None:
    web = make_web(1, 1)
    # A long page URL: it rides along with its links, so a copy per link would show.
    path = "/" + "a" * 1500
    web.route(0, path, hw.body(b"<html><body>" + b"".join(b'<a href="/l/%d">x</a>' % i for i in range(ANCHORS))))
    page_url = web.url(0, path)
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, obey_robots=False)
    job_id = jobs.submit(r, settings, [page_url])
    ctx = stages.Context.default(r)
    job = jobs.load(r, job_id)
    d = ctx.frontier.dispatch(job_id, 0, max_urls=1, per_host=1, delay=0, lease_timeout=60, concurrency=1)
    [(token, entries)] = d.batches()
    pages, batches = stages.parse_stage(ctx, job, token, stages.fetch_stage(ctx, job, token,
                                                                                [e.encode() for e in entries]))
    [(shard, batch)] = batches.items()
    message = json.dumps(groups_to_json(batch))
    pending = r.hget(keys.prefix(job_id) + "pendb", stages.link_token(token, shard)) or b""
    # Before: 50,000 links, each with the page's URL: 78 MB here.
    assert len(message) < len(page_url) + 40 * CAP and len(pending) == len(message)
    print(f"link batch of {CAP} links from a page of {ANCHORS}: {len(message)} bytes of JSON")
    assert stages.store_stage(ctx, job, token, pages) == 1
    [(outlinks,)] = sqlite3.connect(tmp_path / "c.db").execute("SELECT outlinks FROM pages").fetchall()
    assert len(json.loads(outlinks)) == CAP
    with admit_calls(ctx.frontier) as calls:
        admitted = stages.dedup_stage(ctx, job, stages.link_token(token, shard), batch)
    assert len(admitted) == CAP == len(set(admitted))
    assert calls and max(calls) <= ADMIT_CHUNK and sum(calls) == CAP, calls
    q = r.lrange(keys.host_queue(job_id, urlsplit(page_url).netloc), 0, -1)
    assert {Entry.decode(e).referrer for e in q} == {page_url}  # each entry keeps its referrer
    assert not r.exists(keys.prefix(job_id) + "pendb", keys.prefix(job_id) + "pend")
    c = jobs.status(r, job_id)["counters"]
    assert c["links_capped"] == 1 and c["links_dropped"] == ANCHORS - CAP
    ctx.close()


def test_a_batch_redelivered_after_some_of_its_parts_admits_the_rest_once(r: redis.Redis, tmp_path: Path) -> None:
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, dedup="set")
    job_id = jobs.submit(r, settings, ["http://seed.example/"])
    job = jobs.load(r, job_id)
    ctx = stages.Context.default(r)
    urls = [f"http://seed.example/{i}" for i in range(2 * ADMIT_CHUNK + 10)]
    batch = [LinkGroup("http://seed.example/", 1, tuple(urls))]
    ctx.frontier.expect(job_id, {"t:0": groups_to_json(batch)})
    # The first delivery admitted part 0, then its worker died.
    first = ctx.frontier.admit(job_id, [Entry(u, 1, "http://seed.example/") for u in urls[:ADMIT_CHUNK]], 1,
                               token="t:0", part=0, last=False)
    assert len(first) == ADMIT_CHUNK
    assert r.zscore(keys.prefix(job_id) + "pend", "t:0") is not None  # the batch is not over
    assert stages.dedup_stage(ctx, job, "t:0", batch) == urls[ADMIT_CHUNK:]
    assert stages.dedup_stage(ctx, job, "t:0", batch) == []  # and once more: nothing
    assert not [k for k in r.scan_iter(keys.prefix(job_id) + "pend*")]
    c = jobs.status(r, job_id)["counters"]
    assert c["admitted"] == len(urls) + 1
    # A single link as messages from before groups carried it is still admitted.
    ctx.frontier.expect(job_id, ["t:1"])
    assert stages.dedup_stage(ctx, job, "t:1",
                              groups_from_json([["http://seed.example/old", 2, "http://seed.example/"]])) == [
        "http://seed.example/old"]
    ctx.close()


def test_the_host_budget_is_on_by_default(r: redis.Redis, tmp_path: Path) -> None:
    # The exact seen-set, to keep the test short: the budget is the same for both.
    settings = Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", shards=1, dedup="set")
    budget = settings.max_pages_per_host
    assert 10_000 <= budget <= 1_000_000
    job_id = jobs.submit(r, settings, ["http://trap.example/"])
    entries = [Entry(f"http://trap.example/?d={i}", 1) for i in range(budget)]
    queued, _ = admit_links(r, Frontier(r), job_id, settings, entries)
    assert len(queued) == budget - 1  # with the seed, the host's budget exactly
    assert jobs.status(r, job_id)["counters"]["dropped_host_budget"] == 1


class _SessionTrap(QuietHandler):
    """``/`` links to a session page; every session page is the same article under its id and
    links to three pages with new ids. The id's name is on no list of session parameters (those
    are stripped from URLs): the near-duplicate rule has to find this trap."""

    served: list[str] = []

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/":
            body = hw.html("trap", [f"/session?visit={random.getrandbits(48)}"])
        elif parts.path == "/session":
            sid = parse_qs(parts.query).get("visit", ["?"])[0]
            body = hw.html("Your session", [f"/session?visit={random.getrandbits(48)}" for _ in range(3)],
                           f"<p>session {sid}</p><p>{ARTICLE}</p>")
        else:
            hw.body(b"not here", 404)(self)
            return
        self.served.append(self.path)
        hw.body(body)(self)


def test_a_default_crawl_stays_out_of_a_session_id_trap(make_web: Callable[..., TestWeb], tmp_path: Path) -> None:
    normal = make_web(2, 40)
    trap = ThreadingHTTPServer(("127.0.2.7", 0), _SessionTrap)
    threading.Thread(target=trap.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    trap_root = f"http://127.0.2.7:{trap.server_address[1]}/"
    try:
        outcome = crawl(Settings.from_env(max_pages=300), [*normal.seeds(), trap_root], str(tmp_path / "out"))
    finally:
        trap.shutdown()
        trap.server_close()
    stored = {u for (u,) in sqlite3.connect(tmp_path / "out" / "crawl.db").execute("SELECT url FROM pages")}
    assert normal.reachable_urls() <= stored
    trapped = [u for u in stored if u.startswith(trap_root)]
    assert len(trapped) < 20 and len(_SessionTrap.served) < 20, trapped
    c = outcome.status["counters"]
    assert c["dropped_trap:near_duplicate_query"] >= 1
    print(f"trap pages {len(trapped)}, normal pages {len(normal.reachable_urls())}, counters {c}")


class _Shop(QuietHandler):
    """A small shop's listing, ``/list?page=N`` (or ``?cursor=<token>``, opaque), three products a
    page and a next link: the pages share their template and little else, so each is a
    near-duplicate of the first. Found by a probe: page 2's links were dropped as a trap's."""

    PAGES = 6
    CURSORS = [secrets.token_hex(12) for _ in range(PAGES)]
    failed: set[str] = set()  # ``/flaky`` answers 500 once, then 200

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if parts.path == "/list":
            n = int(query.get("page", ["1"])[0]) if "page" in query else self.CURSORS.index(query["cursor"][0]) + 1
            products = "".join(f'<li><a href="/p/{i}">Product {i}</a></li>' for i in range(n * 3 - 2, n * 3 + 1))
            more = "" if n == self.PAGES else (
                f'<a class="next" href="/list?page={n + 1}">Next</a>' if "page" in query
                else f'<a class="next" href="/list?cursor={self.CURSORS[n]}">Next</a>')
            hw.body(f"<html><body><h2>Shop</h2><ul>{products}</ul>{more}</body></html>".encode())(self)
        elif parts.path == "/flaky" and self.path not in self.failed:
            self.failed.add(self.path)
            hw.body(b"try again", 500)(self)
        elif parts.path == "/old":
            hw.body(b"", 301, headers={"Location": "/p/2"})(self)
        elif parts.path.startswith("/p/") or parts.path == "/flaky":
            hw.body(hw.html(f"Product {parts.path[3:]}", [], f"<p>{parts.path}</p><p>{ARTICLE}</p>"))(self)
        else:
            hw.body(b"not here", 404)(self)


@contextmanager
def _serving(handler: type[QuietHandler], ip: str) -> Iterator[str]:
    """``handler`` serving on ``ip``: its origin."""
    server = ThreadingHTTPServer((ip, 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    try:
        yield f"http://{ip}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _shop(ip: str) -> AbstractContextManager[str]:
    return _serving(_Shop, ip)


def _spider_crawl(tmp_path: Path, source: str, cls: str, base: str, **settings: Any) -> tuple[Outcome, list[Any]]:
    """An embedded crawl by the Scrapy spider ``cls`` of ``source`` (given ``base=<origin>``):
    its outcome and the items of its feed."""
    spider = tmp_path / f"{cls.lower()}.py"
    spider.write_text(source)
    outcome = crawl(Settings.from_env(spider=f"{spider}:{cls}", spider_args=[f"base={base}"],
                                      spider_paths=[str(tmp_path)], **settings), [], str(tmp_path / "out"))
    feed = tmp_path / "out" / "items.jsonl"
    return outcome, [json.loads(line) for line in feed.read_text().splitlines()] if feed.exists() else []


def test_a_default_crawl_follows_a_small_shops_pagination(tmp_path: Path) -> None:
    with _shop("127.0.2.8") as origin:
        outcome = crawl(Settings.from_env(max_pages=100), [f"{origin}/list?page=1"], str(tmp_path / "out"))
    stored = {u for (u,) in sqlite3.connect(tmp_path / "out" / "crawl.db").execute("SELECT url FROM pages")}
    want = {f"{origin}/p/{i}" for i in range(1, 3 * _Shop.PAGES + 1)}
    assert want <= stored, sorted(want - stored)
    c = outcome.status["counters"]
    # The listing's pages are near-duplicates of the first, and pagination, not a trap.
    assert int(c.get("near_duplicates", 0)) >= _Shop.PAGES - 2 and not c.get("dropped_trap:near_duplicate_query"), c


_CURSOR_SPIDER = """
import scrapy


class Cursors(scrapy.Spider):
    name = "cursors"
    custom_settings = {"ROBOTSTXT_OBEY": False}

    def __init__(self, base="", **kw):
        super().__init__(**kw)
        self.start_urls = [base + "/list?cursor=" + CURSOR]

    def parse(self, response):
        for href in response.css("li a::attr(href)").getall():
            yield response.follow(href, callback=self.product)
        yield from response.follow_all(css="a.next")

    def product(self, response):
        yield {"product": response.css("title::text").get()}
"""


def test_a_spiders_own_requests_from_near_duplicate_query_variants_are_followed(tmp_path: Path) -> None:
    # Opaque cursors: to the default crawl, the shape of a session-id trap; a spider that yields
    # the next cursor's request has chosen it, as in Scrapy.
    with _shop("127.0.2.9") as origin:
        outcome, items = _spider_crawl(tmp_path, _CURSOR_SPIDER.replace("CURSOR", repr(_Shop.CURSORS[0])), "Cursors",
                                       origin, max_pages=100)
    assert sorted(i["product"] for i in items) == sorted(f"Product {i}" for i in range(1, 3 * _Shop.PAGES + 1)), \
        outcome.status["counters"]


_TWICE_SPIDER = """
import scrapy


class Twice(scrapy.Spider):
    name = "twice"
    custom_settings = {"ROBOTSTXT_OBEY": False}

    def __init__(self, base="", **kw):
        super().__init__(**kw)
        self.base = base

    def start_requests(self):
        for k in ("first", "second"):
            yield scrapy.Request(self.base + "/p/1", callback=self.product, cb_kwargs={"k": k})

    def product(self, response, k):
        yield {"k": k}
"""


_KWARGS_SPIDER = """
import scrapy


class Kwargs(scrapy.Spider):
    name = "kwargs"
    custom_settings = {"ROBOTSTXT_OBEY": False}

    def __init__(self, base="", **kw):
        super().__init__(**kw)
        self.start_urls = [base + "/list?page=1"]

    def parse(self, response):
        yield response.follow("/p/1", callback=self.product, meta={"at": (3, 4)},
                              cb_kwargs={"t": (1, 2), "d": {1: "one"}})

    def product(self, response, t, d):
        yield {"t": repr(t), "d": repr(d), "at": repr(response.meta["at"])}
"""


def test_cb_kwargs_and_meta_reach_the_callback_as_given(tmp_path: Path) -> None:
    # As in Scrapy: a tuple stays a tuple and an int key an int (JSON alone made them a list and
    # a string, and ``d[1]`` raised in the callback).
    with _shop("127.0.2.11") as origin:
        _, items = _spider_crawl(tmp_path, _KWARGS_SPIDER, "Kwargs", origin)
    assert [(i["t"], i["d"], i["at"]) for i in items] == [("(1, 2)", "{1: 'one'}", "(3, 4)")]


_META_SPIDER = """
import scrapy


class Meta(scrapy.Spider):
    name = "meta"
    custom_settings = {"ROBOTSTXT_OBEY": False}

    def __init__(self, base="", **kw):
        super().__init__(**kw)
        self.start_urls = [base + "/flaky", base + "/old"]

    def parse(self, response):
        m = response.meta
        yield {"path": response.url.rsplit("/", 1)[1], "protocol": response.protocol,
               "latency": m["download_latency"] > 0, "retries": m.get("retry_times"),
               "redirects": m.get("redirect_times")}
"""


def test_a_scrapy_response_carries_what_scrapys_downloader_would_have_written(tmp_path: Path) -> None:
    _Shop.failed.clear()
    with _shop("127.0.2.12") as origin:
        _, items = _spider_crawl(tmp_path, _META_SPIDER, "Meta", origin, retry_base=0.2)
    items.sort(key=lambda i: str(i["path"]))
    assert [{k: v for k, v in i.items() if not k.startswith("_")} for i in items] == [
        {"path": "2", "protocol": "HTTP/1.1", "latency": True, "retries": None, "redirects": 1},
        {"path": "flaky", "protocol": "HTTP/1.1", "latency": True, "retries": 1, "redirects": None}]


def test_of_two_start_requests_for_one_url_the_first_wins_as_in_scrapy(tmp_path: Path) -> None:
    with _shop("127.0.2.10") as origin:
        _, items = _spider_crawl(tmp_path, _TWICE_SPIDER, "Twice", origin, allow_domains=["127.0.2.10"])
    assert [i["k"] for i in items] == ["first"]


_DAYS = " ".join(f"appointment slot{i} free at noon" for i in range(40))


class _NumberTraps(QuietHandler):
    """Two traps in the shape of pagination: ``/n?visit=<5 digits>`` (a short numeric session
    id, three new ones a page) and an endless calendar ``/cal?y=..&m=..``."""

    served: list[str] = []

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        q = parse_qs(parts.query)
        if parts.path == "/":
            body = hw.html("traps", [f"/n?visit={random.randrange(10**5)}", "/cal?y=2024&m=1"])
        elif parts.path == "/n":
            body = hw.html("Your visit", [f"/n?visit={random.randrange(10**5)}" for _ in range(3)], f"<p>{ARTICLE}</p>")
        elif parts.path == "/cal":
            y, m = int(q["y"][0]), int(q["m"][0])
            nxt = f"/cal?y={y + m // 12}&m={m % 12 + 1}"
            body = hw.html("Calendar", [nxt], f"<p>{_DAYS}</p>")  # text of its own: no near-duplicate of /n
        else:
            hw.body(b"not here", 404)(self)
            return
        self.served.append(parts.path)
        hw.body(body)(self)


def test_traps_shaped_like_pagination_stop_at_the_variants_cap(tmp_path: Path) -> None:
    _NumberTraps.served.clear()
    with _serving(_NumberTraps, "127.0.2.13") as origin:
        crawl(Settings.from_env(max_pages=300, max_query_variants=10), [f"{origin}/"], str(tmp_path / "out"))
    served = Counter(_NumberTraps.served)
    # Each trap expands at most the cap's 10 pages, each giving its links (3 on /n, 1 on /cal);
    # a page whose random links move its simhash too far is no near-duplicate and adds a few.
    # Uncapped, both run to max_pages.
    assert served["/n"] <= 60 and served["/cal"] <= 10 + 3, served


_FOLLOW_ALL_SPIDER = """
import scrapy


class FollowAll(scrapy.Spider):
    name = "followall"
    custom_settings = {"ROBOTSTXT_OBEY": False}

    def __init__(self, base="", **kw):
        super().__init__(**kw)
        self.start_urls = [base + "/"]

    def parse(self, response):
        yield {"url": response.url}
        yield from response.follow_all(css="a")
"""


def test_a_scrapy_spider_following_every_link_stops_in_a_session_id_trap_at_the_cap(tmp_path: Path) -> None:
    _SessionTrap.served.clear()
    with _serving(_SessionTrap, "127.0.2.14") as origin:
        outcome, _ = _spider_crawl(tmp_path, _FOLLOW_ALL_SPIDER, "FollowAll", origin, max_pages=300,
                                   max_query_variants=10)
    assert len(_SessionTrap.served) <= 60, len(_SessionTrap.served)  # uncapped: max_pages, 300
    assert outcome.status["counters"]["dropped_trap:near_duplicate_query"] >= 1


ITEMS = [str(uuid.UUID(int=random.Random(7).getrandbits(128) + i)) for i in range(150)]


class _SmallTraps(QuietHandler):
    """Tiny pages, too small for the near-duplicate rule: ``/session?sid=<new id>`` twice on every
    session page (a numbered session, as servers that count sessions make), ``/cart?state=<new
    token>`` twice on every cart page (a name no list knows), and a catalogue whose items are
    named by opaque ids and link to each other, which no trap rule may cut."""

    served: list[str] = []

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        related = random.Random(parts.query)
        pages = {
            "/": lambda: [f"/session?sid={random.getrandbits(48)}", "/cart?state=" + secrets.token_urlsafe(16),
                          "/list"],
            "/session": lambda: [f"/session?sid={random.getrandbits(48)}" for _ in range(2)],
            "/cart": lambda: ["/cart?state=" + secrets.token_urlsafe(16) for _ in range(2)],
            "/list": lambda: [f"/item?id={i}" for i in ITEMS],
            "/item": lambda: [f"/item?id={related.choice(ITEMS)}" for _ in range(3)],
        }
        if parts.path not in pages:
            hw.body(b"not here", 404)(self)
            return
        self.served.append(self.path)
        hw.body(hw.html("page", pages[parts.path]()))(self)


def test_session_ids_and_token_variants_on_tiny_pages_are_capped(make_web: Callable[..., TestWeb],
                                                                   tmp_path: Path) -> None:
    site = ThreadingHTTPServer(("127.0.2.8", 0), _SmallTraps)
    threading.Thread(target=site.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    root = f"http://127.0.2.8:{site.server_address[1]}/"
    try:
        outcome = crawl(Settings.from_env(max_pages=3000), [root], str(tmp_path / "out"))
    finally:
        site.shutdown()
        site.server_close()
    found = dict(sqlite3.connect(tmp_path / "out" / "crawl.db").execute("SELECT url, referrer FROM pages"))
    stored = set(found)
    sessions = [u for u in stored if "/session" in u]
    carts = [u for u in stored if "/cart" in u]
    # Counted against the cap: all but the home page's link and, rarely, a link whose value and
    # whose page's both pass for words (``variants._OPAQUE_RE``: one random id in ~40 each).
    counted = [u for u in carts if trap_candidates([(u, found[u])])]
    c = outcome.status["counters"]
    print(f"stored {len(stored)}: sessions {len(sessions)}, carts {len(carts)} ({len(counted)} counted); "
          f"counters {c}")
    assert sessions == [root + "session"]  # every id stripped: one page
    cap = Settings().max_query_variants
    assert len(counted) <= cap and len(carts) - len(counted) <= 6 and len(sessions) + len(carts) <= 200
    assert c["dropped_trap:query_variants"] >= 1
    assert {f"{root}item?id={i}" for i in ITEMS} <= stored  # items by opaque id, all found
