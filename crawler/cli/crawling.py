"""Crawls: ``crawl`` on this machine, ``demo`` on a synthetic web, ``submit`` to running workers."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawler import control
from crawler.cli.common import LOCAL, Subparsers, command, job_flags, job_settings, redis_client, requester, summary
from crawler.config.redact import redact
from crawler.config.schedule import parse_duration
from crawler.config.settings import Settings
from crawler.embedded import crawl
from crawler.errors import ConfigError, Reason
from crawler.local.signals import exit_status
from crawler.spiders.run import CAP_BYTES, CAP_COUNT
from crawler.testweb import TestWeb, WebModel
from crawler.testweb.catalogue import Catalogue
from crawler.testweb.quotes import QuotesSite

log = logging.getLogger("crawler")


class ProgressLine:
    """A live line on a terminal; plain log lines every ``interval`` seconds otherwise."""

    def __init__(self, interval: float) -> None:
        self.tty = sys.stderr.isatty()
        self.interval = interval
        self.last_line = 0.0
        self.last = (0.0, 0)

    def __call__(self, st: dict[str, Any], elapsed: float) -> None:
        c = st["counters"]
        done = c.get("stored", 0)
        t0, d0 = self.last
        rate = (done - d0) / (elapsed - t0) if elapsed > t0 else 0.0
        errors = sum(v for k, v in c.items() if k.startswith("error:"))
        busy = c.get("inflight", 0) + c.get("held", 0)  # fetching, or fetched and not yet stored
        text = f"{done} pages  {rate:6.1f} pages/s  {c.get('open', 0) - busy} queued  " \
               f"{busy} in flight  {errors} errors"
        if st.get("robots_waiting"):
            text += f"  {st['robots_waiting']} hosts waiting on robots.txt"
        if self.tty:
            sys.stderr.write("\r\033[K" + text)
            sys.stderr.flush()
            if elapsed - t0 >= 2:
                self.last = (elapsed, done)
        elif elapsed - self.last_line >= self.interval:
            log.info("%s  (%.0fs)", text, elapsed)
            self.last_line = elapsed
            self.last = (elapsed, done)

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


# One machine needs no shards to spread work: every worker of an embedded crawl consumes every
# queue, and each shard more only multiplies the dedup tasks each parse sends (one per shard).
EMBEDDED_SHARDS = "1"


def cmd_crawl(args: argparse.Namespace) -> int:
    if not args.out.strip():
        raise ConfigError("--out names no directory (it would write into this one)")
    # ``demo`` has none of the job flags: what it does not set, the settings' defaults decide.
    if getattr(args, "shards", None) is None and "CRAWLER_SHARDS" not in os.environ:
        args.shards = EMBEDDED_SHARDS
    settings = job_settings(args, workers=args.workers, store=None)
    progress = ProgressLine(settings.progress_interval) if not args.quiet else None
    outcome = crawl(settings, args.seeds, args.out, progress)
    # SIGINT (Ctrl-C) 130, SIGHUP 129, SIGTERM 143: the shell's "ended by signal N".
    code = exit_status(outcome.signum) if outcome.interrupted else 0
    out = Path(args.out).resolve()
    try:
        if progress:
            progress.end()
        print(f"job {outcome.job_id}: {summary(outcome.status)} in {outcome.elapsed:.1f}s")
        if outcome.status.get("error"):
            print(f"crawler crawl: {redact(outcome.status['error'])}", file=sys.stderr)
            code = code or 1
        print(f"output: {out / 'crawl.db'} (SQLite), {out / 'warc'} (WARC)")
        blocked = int(outcome.status.get("counters", {}).get(f"error:{Reason.BLOCKED_NETWORK}", 0))
        if blocked:
            # Loopback and private addresses are refused unless allowed: a crawl of one's own
            # test site would otherwise end with "1 errors" and nothing to say why.
            print(f"crawler crawl: {blocked} fetches refused as private or loopback addresses; "
                  "--allow-net CIDR allows a network", file=sys.stderr)
        failed = every_page_failed(outcome.status)
        if failed and not outcome.interrupted:
            print(f"crawler crawl: {failed}", file=sys.stderr)
            code = code or 1
        if outcome.spider:
            print(f"items: {outcome.items} in {out / 'items.jsonl'}{capped(outcome.status, settings)}")
        if outcome.interrupted:
            print(f"interrupted ({signal.Signals(outcome.signum).name}): what was stored is complete and readable",
                  file=sys.stderr)
    except OSError:
        pass  # after SIGHUP the terminal may be gone; the status still says what happened
    return code


# Reasons a page is stored with although its server answered it (a PDF where HTML was wanted,
# a body past max_body): fetched, not failed.
ANSWERED = frozenset({Reason.NOT_HTML, Reason.REFUSED_TYPE, Reason.TOO_LARGE})


def every_page_failed(status: dict[str, Any]) -> str:
    """What the crawl's end must say when it stored pages and every one was a failure (a dead
    seed, a refused network, a 404): the reasons and how many of each; "" otherwise. Such a crawl
    exits non-zero, as wget's does."""
    c = status.get("counters", {})
    stored = int(c.get("stored", 0))
    reasons = sorted(((int(v), why) for k, v in c.items() if k.startswith("error:") and int(v)
                      and (why := k.removeprefix("error:")) not in ANSWERED), reverse=True)
    if not stored or sum(n for n, _ in reasons) < stored:
        return ""
    return "no page was fetched: " + ", ".join(f"{n} {why}" for n, why in reasons) + \
        " (the error column of the pages table says which)"


def capped(status: dict[str, Any], settings: Settings) -> str:
    """What the items line must add when pages gave more items than were kept: how many, and the
    setting (with its value and variable) that capped them."""
    c = status.get("counters", {})
    total = int(c.get("items_capped", 0))
    if not total:
        return ""
    causes = []
    for name in (CAP_COUNT, CAP_BYTES):
        n = int(c.get(f"items_capped:{name}", 0))
        if n:
            causes.append(f"{n} by {name}={getattr(settings, name)} (CRAWLER_{name.upper()})")
    why = ", ".join(causes) or f"by {CAP_COUNT} or {CAP_BYTES}"
    return f"; {total} more not kept, over a page's cap: {why}"


def cmd_submit(args: argparse.Namespace) -> int:
    every = parse_duration(args.every) if args.every else None
    revisit = {name: parse_duration(getattr(args, name)) if getattr(args, name) else None
               for name in ("revisit_min", "revisit_max")}
    settings = job_settings(args, store=args.store, warc_dir=args.warc_dir, every=every, cron=args.cron, **revisit)
    if not settings.store:
        raise SystemExit("crawler submit: --store URL is required (e.g. sqlite:///data/crawl.db)")
    values = {f: getattr(settings, f) for f in Settings.__dataclass_fields__}
    job_id, warnings = control.submit(redis_client(args.redis_url), values, args.seeds, by=requester())
    for w in warnings:
        print(f"crawler submit: warning: {w}", file=sys.stderr)
    print(job_id)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Serve the synthetic web on loopback and crawl it: the whole system, no network needed."""
    if args.shop and args.quotes:
        raise ConfigError("give --shop or --quotes, not both")
    if args.path != "/" and not args.quotes:
        raise ConfigError("--path is the quotes site's seed path: it needs --quotes")
    if (args.spider or args.spider_args) and not (args.shop or args.quotes):
        raise ConfigError("--spider and --spider-arg go with --shop or --quotes")
    if args.sites * args.pages > DEMO_MAX_WEB:
        raise ConfigError(f"--sites x --pages is {args.sites * args.pages:,} pages; the demo's web is built in "
                          f"memory (about 2 KB a page) and holds at most {DEMO_MAX_WEB:,}")
    if args.shop:
        return _demo_shop(args)
    if args.quotes:
        return _demo_quotes(args)
    web = TestWeb(WebModel(args.sites, args.pages), filler=2000).start()
    try:
        print(f"serving a synthetic web of {args.sites} sites x {args.pages} pages on "
              f"{web.ips[0]}..{web.ips[-1]}; {len(web.reachable_urls())} pages reachable")
        args.seeds = web.seeds()
        # The network guard blocks loopback; open exactly the demo web's addresses.
        args.allow_networks = [f"{ip}/32" for ip in web.ips]
        return cmd_crawl(args)
    finally:
        web.stop()


# The demo's sites are 127.0.1.1 to 127.0.1.254; its web is built in memory before it is served.
DEMO_MAX_SITES = 254
DEMO_MAX_PAGES = 20_000
DEMO_MAX_WEB = 200_000  # pages in all


def _within(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            n = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{raw!r} is not a whole number") from None
        if not low <= n <= high:
            raise argparse.ArgumentTypeError(f"{n} is not between {low} and {high}")
        return n
    return parse


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_SPIDER = EXAMPLES / "catalogue_spider.py"
QUOTES_SPIDER = EXAMPLES / "quotes_spider.py"


def _demo_shop(args: argparse.Namespace) -> int:
    """Serve the test catalogue on loopback and crawl it with the example spider (or ``--spider``)."""
    web = TestWeb(WebModel(1, 1)).start()
    shop = Catalogue()
    shop.mount(web, 0)
    try:
        print(f"serving a shop of {len(shop.products)} products on {web.origin(0)}")
        if not args.spider and not EXAMPLE_SPIDER.is_file():
            raise SystemExit(f"crawler demo: the example spider is not at {EXAMPLE_SPIDER} (a source checkout has it)")
        args.spider = args.spider or f"{EXAMPLE_SPIDER}:CatalogueSpider"
        args.seeds = [web.origin(0) + "/"]
        args.allow_networks = [f"{web.ips[0]}/32"]
        return cmd_crawl(args)
    finally:
        web.stop()


def _demo_quotes(args: argparse.Namespace) -> int:
    """Serve the quotes site (shaped like the sandbox Scrapy's tutorial crawls) on loopback and
    crawl it with ``examples/quotes_spider.py`` or ``--spider``: any of the quotes examples, our
    API's or Scrapy's. The spider gets ``base`` (the site's origin) unless given one."""
    web = TestWeb(WebModel(1, 1)).start()
    site = QuotesSite()
    site.mount(web, 0)
    try:
        origin = web.origin(0)
        print(f"serving a quotes site of {len(site.quotes())} quotes by {len(site.author_records())} authors "
              f"on {origin}")
        if not args.spider and not QUOTES_SPIDER.is_file():
            raise SystemExit(f"crawler demo: the example spider is not at {QUOTES_SPIDER} (a source checkout has it)")
        args.spider = args.spider or f"{QUOTES_SPIDER}:QuotesSpider"
        given = args.spider_args or []
        args.spider_args = given if any(a.startswith("base=") for a in given) else [*given, f"base={origin}"]
        args.seeds = [origin + "/" + args.path.lstrip("/")]
        args.allow_networks = [f"{web.ips[0]}/32"]
        # The site has a form login, and Scrapy keeps cookies by default: so does this demo.
        args.cookies = True
        return cmd_crawl(args)
    finally:
        web.stop()


def register(sub: Subparsers) -> None:
    c = command(sub, "crawl", cmd_crawl, "crawl on this machine, nothing else to set up", redis=False,
                operation=LOCAL)
    job_flags(c)
    c.add_argument("--out", required=True, help="output directory (crawl.db, warc/, logs/)")
    c.add_argument("--workers", metavar="N", help="worker processes (default 2)")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress output")

    d = command(sub, "demo", cmd_demo, "crawl a synthetic web served on loopback (no network needed)", redis=False,
                operation=LOCAL)
    d.add_argument("--out", default="crawl-out", help="output directory (default: crawl-out)")
    d.add_argument("--sites", type=_within(1, DEMO_MAX_SITES), default=5,
                   help=f"sites, each on an address of its own, 127.0.1.1 on (1 to {DEMO_MAX_SITES}; default 5)")
    d.add_argument("--pages", type=_within(1, DEMO_MAX_PAGES), default=100,
                   help=f"pages a site (1 to {DEMO_MAX_PAGES}; default 100)")
    d.add_argument("--workers", metavar="N")
    d.add_argument("-q", "--quiet", action="store_true")
    d.add_argument("--shop", action="store_true",
                   help="serve a shop catalogue instead and extract its products with examples/catalogue_spider.py")
    d.add_argument("--quotes", action="store_true",
                   help="serve a quotes site shaped like Scrapy's tutorial sandbox and crawl it with "
                        "examples/quotes_spider.py")
    d.add_argument("--spider", metavar="SPIDER",
                   help="with --shop or --quotes: your spider (ours or a Scrapy one) instead of the example")
    d.add_argument("--path", default="/", help="with --quotes: the seed's path (/login for the login examples)")
    d.add_argument("--spider-arg", action="append", dest="spider_args", metavar="KEY=VALUE",
                   help="with --spider: an argument for it (--quotes passes base=<the site's origin>)")

    s = command(sub, "submit", cmd_submit, "enqueue a job for running workers; prints its id", redis=False)
    job_flags(s)
    s.add_argument("--store", help="store URL, e.g. sqlite:///data/crawl.db")
    s.add_argument("--warc-dir", help="directory for WARC files (default: beside an SQLite store)")
    s.add_argument("--every", metavar="DURATION", help="run in cycles this far apart (30m, 6h, 1d)")
    s.add_argument("--cron", metavar="EXPR", help="run in cycles on a cron schedule, UTC ('0 */6 * * *')")
    s.add_argument("--revisit-min", metavar="DURATION", help="revisit a page at most this often (default: the period)")
    s.add_argument("--revisit-max", metavar="DURATION", help="revisit a page at least this often (default 30d)")
