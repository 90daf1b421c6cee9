"""The ``crawler`` command: crawl (embedded), submit, status, pause, resume, stop, recover, cycles, export."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import redis

from crawler import control, joblog, jobs, nodes
from crawler.celeryapp.config import environment, redis_url
from crawler.dedup.bloom import BloomSeen
from crawler.embedded import crawl
from crawler.errors import BadURL, ConfigError, CrawlerError, JobNotFound
from crawler.export import export_by_depth, item_columns, item_rows, write_rows
from crawler.frontier import Frontier, liveshards, takeover
from crawler.jobs import set_shards
from crawler.redact import redact
from crawler.redisconn import check_version, connect
from crawler.schedule import parse_duration
from crawler.settings import Settings, parse_text, settings_table
from crawler.stopsignals import exit_status
from crawler.store import open_store
from crawler.testweb import TestWeb, WebModel
from crawler.testweb.catalogue import Catalogue

log = logging.getLogger("crawler")


class _Parser(argparse.ArgumentParser):
    """Usage mistakes end in one line, like every other error of the command, not a usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {_one_line(message)} (see {self.prog} --help)\n")


def _one_line(message: str, limit: int = 300) -> str:
    # Messages may quote what the user gave: keep them one readable line whatever it held.
    message = message.replace("\r", "\\r").replace("\n", "\\n")
    return message if len(message) <= limit else message[: limit - 3] + "..."


# Numeric flags stay text until ``_settings`` reads them as the environment's values are read,
# so both give the same one-line error (``setting delay: ..., got 'nan'``).
def _job_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("seeds", nargs="*", metavar="SEED", help="start URLs (default: the spider's start_urls)")
    p.add_argument("--max-pages", metavar="N", help="admit at most N URLs (0: no limit)")
    p.add_argument("--max-depth", metavar="N", help="follow links at most N hops from a seed (0: no limit)")
    p.add_argument("--delay", metavar="SECONDS", help="seconds between requests to one host")
    p.add_argument("--per-host", metavar="N", help="requests in flight per host (default 1)")
    p.add_argument("--concurrency", metavar="N", help="requests in flight in total")
    p.add_argument("--shards", metavar="N", help="number of shards")
    p.add_argument("--host-queue-cap", metavar="N",
                   help="URLs one host's queue holds in Redis at most; the rest wait in the store (0: no cap)")
    p.add_argument("--allow-domain", action="append", dest="allow_domains", metavar="DOMAIN",
                   help="registered domain in scope (repeatable; default: the seeds' domains); given, these "
                        "replace the seeds' own domains rather than add to them, so list those too to keep them")
    p.add_argument("--allow-url", action="append", dest="allow_urls", metavar="RE",
                   help="follow only links matching one such regular expression (repeatable; seeds exempt)")
    p.add_argument("--deny-url", action="append", dest="deny_urls", metavar="RE",
                   help="do not follow links matching this regular expression (repeatable; seeds exempt)")
    p.add_argument("--follow-nofollow", action="store_true", default=None,
                   help="follow links marked rel=nofollow (default: drop them); meta robots nofollow is still obeyed")
    p.add_argument("--render", choices=("never", "always", "auto"),
                   help="render pages in headless Chromium before parsing (Debian's chromium; workers -Q render): "
                        "auto decides per host from a sample (default: never)")
    p.add_argument("--noise-links", choices=("follow", "skip"),
                   help="skip: do not follow links in navigation, footers, tag clouds and URLs clustering with them "
                        "(default: follow)")
    p.add_argument("--user-agent", help="User-Agent header")
    p.add_argument("--allow-net", action="append", dest="allow_networks", metavar="CIDR",
                   help="a network that may be fetched although not public (repeatable)")
    p.add_argument("--resolve", action="append", metavar="HOST=IP", help="fixed DNS answer (repeatable)")
    p.add_argument("--sitemaps", action="store_true", default=None, help="seed from robots.txt Sitemap: lines")
    p.add_argument("--ignore-robots", action="store_false", dest="obey_robots", default=None,
                   help="do not fetch or obey robots.txt")
    p.add_argument("--extract", metavar="text|markdown",
                   help="store each HTML page's main text, as plain text or markdown, in the content table")
    p.add_argument("--spider", metavar="SPIDER",
                   help="site code to run: package.module:Class, path/to/file.py:Class, or an installed spider's name")
    p.add_argument("--spider-arg", action="append", dest="spider_args", metavar="KEY=VALUE",
                   help="an argument for the spider (repeatable); stored with the job, so never a secret")
    p.add_argument("--auth", action="append", metavar="HOST=basic:NAME",
                   help="credentials for HOST from the workers' secret NAME (CRAWLER_SECRET_NAME or the secrets "
                        "file; basic: user:password, or bearer:NAME for a token); the job holds the name only")
    p.add_argument("--header", action="append", dest="session_headers", metavar="'NAME: VALUE'",
                   help="a default request header (repeatable; not for secrets: it travels with the job)")
    p.add_argument("--cookies", action="store_true", default=None,
                   help="keep the job's cookies, shared by its workers (on by itself for a spider that logs in)")
    p.add_argument("--redis-url", help="Redis to use (default: $CRAWLER_REDIS_URL, or a private one for crawl)")


_TEXT_FLAGS = ("max_pages", "max_depth", "delay", "per_host", "concurrency", "shards", "workers", "host_queue_cap")


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    names = ("max_pages", "max_depth", "delay", "per_host", "concurrency", "shards", "allow_domains",
             "user_agent", "redis_url", "allow_networks", "resolve", "sitemaps", "obey_robots", "extract",
             "allow_urls", "deny_urls", "follow_nofollow", "spider", "spider_args", "auth", "session_headers",
             "cookies", "noise_links", "host_queue_cap", "render")
    given = {**{n: getattr(args, n, None) for n in names}, **extra}
    for name in _TEXT_FLAGS:
        if isinstance(given.get(name), str):
            given[name] = parse_text(name, given[name], "--" + name.replace("_", "-"))
    return Settings.from_env(**given)


def _count(name: str, raw: str | None, flag: str) -> int | None:
    """A count flag outside the job flags (``shards set N``, ``recover --shards``), read and
    checked as the setting it names."""
    return None if raw is None else int(parse_text(name, raw, flag))


def _client(url: str | None) -> redis.Redis:
    try:
        client = connect(url or redis_url())
    except ValueError as exc:  # redis-py's verdict on the URL's form
        raise ConfigError(str(exc)) from exc
    check_version(client)
    return client


def _summary(st: dict[str, Any]) -> str:
    c = st.get("counters", {})
    errors = sum(v for k, v in c.items() if k.startswith("error:"))
    return f"{c.get('stored', 0)} pages stored, {errors} errors, {c.get('open', 0)} queued or in flight"


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
        if st.get("robots_wait"):
            text += f"  {len(st['robots_wait'])} hosts waiting on robots.txt"
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
    if args.shards is None and "CRAWLER_SHARDS" not in os.environ:
        args.shards = EMBEDDED_SHARDS
    settings = _settings(args, workers=args.workers, store=None)
    progress = ProgressLine(settings.progress_interval) if not args.quiet else None
    outcome = crawl(settings, args.seeds, args.out, progress)
    # SIGINT (Ctrl-C) 130, SIGHUP 129, SIGTERM 143: the shell's "ended by signal N".
    code = exit_status(outcome.signum) if outcome.interrupted else 0
    out = Path(args.out).resolve()
    try:
        if progress:
            progress.end()
        print(f"job {outcome.job_id}: {_summary(outcome.status)} in {outcome.elapsed:.1f}s")
        if outcome.status.get("error"):
            print(f"crawler crawl: {redact(outcome.status['error'])}", file=sys.stderr)
            code = code or 1
        print(f"output: {out / 'crawl.db'} (SQLite), {out / 'warc'} (WARC)")
        if outcome.spider:
            print(f"items: {outcome.items} in {out / 'items.jsonl'}")
        if outcome.interrupted:
            print(f"interrupted ({signal.Signals(outcome.signum).name}): what was stored is complete and readable",
                  file=sys.stderr)
    except OSError:
        pass  # after SIGHUP the terminal may be gone; the status still says what happened
    return code


def cmd_submit(args: argparse.Namespace) -> int:
    every = parse_duration(args.every) if args.every else None
    revisit = {name: parse_duration(getattr(args, name)) if getattr(args, name) else None
               for name in ("revisit_min", "revisit_max")}
    settings = _settings(args, store=args.store, warc_dir=args.warc_dir, every=every, cron=args.cron, **revisit)
    if not settings.store:
        raise SystemExit("crawler submit: --store URL is required (e.g. sqlite:///data/crawl.db)")
    values = {f: getattr(settings, f) for f in Settings.__dataclass_fields__}
    job_id, warnings = control.submit(_client(args.redis_url), values, args.seeds, by=_by())
    for w in warnings:
        print(f"crawler submit: warning: {w}", file=sys.stderr)
    print(job_id)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    if not 0 <= args.timeout < float("inf"):  # a NaN deadline would never pass
        raise ConfigError(f"--timeout must be a finite number of seconds >= 0, got {args.timeout!r}")
    client = _client(args.redis_url)
    deadline = time.monotonic() + args.timeout if args.timeout else None
    while True:
        st = jobs.status(client, args.job)
        if not args.wait or st["status"] in (*jobs.FINISHED, jobs.WAITING):
            break
        if deadline and time.monotonic() > deadline:
            print(f"crawler status: job {args.job} still {st['status']} after {args.timeout}s", file=sys.stderr)
            return 2
        time.sleep(0.5)
    hosts = jobs.hosts(client, args.job) if args.hosts else None
    shard_states = takeover.shard_states(client, json.loads(st["settings"])["shards"])
    if args.json:
        print(json.dumps({**st, "shards": shard_states, **({"hosts": hosts} if hosts is not None else {})},
                         indent=2))
        return 0
    print(f"job {st['id']}: {st['status']}  ({_summary(st)})")
    if st.get("error"):
        print(f"  error: {redact(st['error'])}")
    print(f"  queued: {st['queued_in_redis']} in Redis, {st['queued_in_store']} in the store")
    for line in takeover.describe(shard_states, heard_any=bool(nodes.nodes(client))):
        print(f"  {line}")
    for w in st.get("robots_wait", []):
        print(f"  waiting on robots.txt: {w['host']} ({w['reason']}) until "
              f"{time.strftime('%H:%M:%S', time.localtime(w['until']))} (in {w['until'] - time.time():.0f}s)")
    if st.get("store_error"):
        e = st["store_error"]
        print(f"  store error, retrying for {time.time() - e['since']:.0f}s ({e['retries']} retries, last by "
              f"{e['node']}): {redact(e['error'])}")
    for k, v in st["counters"].items():
        print(f"  {k:24} {v}")
    c = st["counters"]
    if c.get("cache_lookups"):
        print(f"  {'local cache hit rate':24} {c.get('cache_hits', 0) / c['cache_lookups']:.1%}")
    if hosts is not None:
        print(f"  {'host':40} {'delay s':>8} {'in flight':>9} {'queued':>7} {'in store':>8} {'render':>6}")
        for h in hosts:
            print(f"  {h['host']:40} {h['delay']:8.3f} {h['inflight']:9d} {h['queued']:7d} {h['queued_in_store']:8d} "
                  f"{h['render'] or '-':>6}")
    return 0


def cmd_deadlinks(args: argparse.Namespace) -> int:
    client = _client(args.redis_url)
    store_url = args.store or jobs.load(client, args.job).settings.store
    store = open_store(store_url)
    try:
        for url, status, referrers in store.dead_links(args.job):
            if args.json:
                print(json.dumps({"url": url, "status": status, "linked_from": referrers}))
            else:
                print(f"{status} {url}")
                for ref in referrers:
                    print(f"      <- {ref}")
    finally:
        store.close()
    return 0


def cmd_reset_seen(args: argparse.Namespace) -> int:
    client = _client(args.redis_url)
    jobs.status(client, args.job)
    deleted = BloomSeen(client, args.job).reset() + Frontier(client).clear_seen(args.job)
    print(f"job {args.job}: seen-set cleared ({deleted} keys)")
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    # Lazy: recovery loads the whole pipeline (httpx, the parsers: ~200 modules) for one rare
    # command; every other command stays quick to start.
    from crawler.recover import recover

    shards = _count("shards", args.shards, "--shards")
    client = _client(args.redis_url)
    store = open_store(args.store)
    try:
        done = recover(client, store, args.job, shards=shards)
    finally:
        store.close()
    cycle = f" cycle {done.cycle}," if done.cycle else ""
    print(f"job {args.job}: rebuilt from {redact(args.store)}:{cycle} {done.stored} stored pages, "
          f"{done.seen} marked seen, {done.not_due} not due, {done.queued} URLs queued; status {done.status}")
    return 0


def _by() -> str:
    """Who is asking, for the job's log: the local user on this host."""
    import getpass
    import socket

    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:  # no user name in a bare container: still say where
        return socket.gethostname()


def cmd_stop(args: argparse.Namespace) -> int:
    client = _client(args.redis_url)
    control.stop(client, args.job, by=_by())
    print(f"job {args.job}: stopped")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    client = _client(args.redis_url)
    was = jobs.status(client, args.job)["status"]
    now = control.pause(client, args.job, by=_by())
    note = "" if now == jobs.PAUSED else f" (was {was}: only a running or waiting job pauses)"
    print(f"job {args.job}: {now}{note}")
    return 0 if now == jobs.PAUSED else 1


def cmd_resume(args: argparse.Namespace) -> int:
    client = _client(args.redis_url)
    was = jobs.status(client, args.job)["status"]
    now = control.resume(client, args.job, by=_by())
    print(f"job {args.job}: {now}" + ("" if was == jobs.PAUSED else " (it was not paused)"))
    return 0 if was == jobs.PAUSED else 1


def cmd_set(args: argparse.Namespace) -> int:
    """Change runtime settings of a running job, or one host's override."""
    client = _client(args.redis_url)
    pairs: dict[str, str] = {}
    for item in args.pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"not KEY=VALUE: {item!r}")
        pairs[key.strip().replace("-", "_")] = value
    if args.host:
        if args.clear:
            gone = control.clear_host_override(client, args.job, args.host, by=_by())
            print(f"job {args.job}: {args.host}: " + ("the job's settings apply again" if gone else "had no override"))
            return 0
        unknown = set(pairs) - {"delay", "per_host"}
        if unknown:
            raise ConfigError(f"a host takes delay=SECONDS and/or per_host=N, not {', '.join(sorted(unknown))}")
        got = control.set_host_override(client, args.job, args.host, pairs.get("delay"), pairs.get("per_host"),
                                        by=_by())
        print(f"job {args.job}: {got['host']}: " + ", ".join(f"{k} {v}" for k, v in got["override"].items()))
        return 0
    if args.clear:
        raise ConfigError("--clear needs --host HOST")
    changed = control.set_settings(client, args.job, pairs, by=_by())["changed"]
    if not changed:
        print(f"job {args.job}: nothing changed")
    for name, (old, new) in changed.items():
        print(f"job {args.job}: {name} {old!r} -> {new!r} (workers apply it within 5 s)")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    client = _client(args.redis_url)
    entries = control.logs(client, args.job, level=args.level, limit=args.lines)
    for e in entries:
        print(joblog.format_entry(e), flush=True)
    if args.follow:
        after = entries[-1]["id"] if entries else "$"
        try:
            for e in joblog.follow(client, args.job, after=after, level=args.level):
                print(joblog.format_entry(e), flush=True)
        except KeyboardInterrupt:
            return 0
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    rows = control.list_jobs(_client(args.redis_url))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        made = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row["created_at"]))
        print(f"{row['id']:26} {row['status']:8} {made}  {row['stored']:>8} stored {row['open']:>8} open "
              f"{row['errors']:>6} errors")
    return 0


def cmd_cycles(args: argparse.Namespace) -> int:
    rows = jobs.cycles(_client(args.redis_url), args.job)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = ("fetched", "new", "changed", "unchanged", "gone", "not_modified", "bytes")
    heads = ("fetched", "new", "changed", "unchanged", "gone", "304s", "bytes")
    print(f"{'cycle':>5}  {'started (UTC)':19}  {'ended':>8}  " + "  ".join(f"{h:>9}" for h in heads))
    for row in rows:
        start = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row["started_at"]))
        took = f"+{row['finished_at'] - row['started_at']:.1f}s" if row["finished_at"] else "running"
        print(f"{row['cycle']:>5}  {start:19}  {took:>8}  " + "  ".join(f"{row[c]:>9}" for c in cols))
    return 0


def cmd_shards(args: argparse.Namespace) -> int:
    count = int(parse_text("shards", args.count, "N"))
    client = _client(args.redis_url)
    targets = args.job or jobs.active(client)
    if not targets:
        print("no running job to reshard (give --job JOB)")
        return 1
    for job_id in targets:
        moved = set_shards(client, job_id, count)
        share = moved.hosts / moved.hosts_total if moved.hosts_total else 0.0
        print(f"job {job_id}: {count} shards; {moved.hosts} of {moved.hosts_total} hosts moved ({share:.0%}), "
              f"{moved.records} records rewritten, {moved.messages} messages requeued")
    print(f"start workers for shard-0 .. shard-{count - 1} (celery -A crawler worker -Q shard-N)")
    return 0


def cmd_web(args: argparse.Namespace) -> int:
    # Lazy: the web server's modules load only for this command.
    from crawler.web.server import listen_auth, serve

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port must be 1..65535, got {args.port}")
    auth = listen_auth(args.host)
    print(f"console on http://{args.host}:{args.port}/ ({'auth required' if auth else 'no auth: loopback only'})",
          file=sys.stderr)
    serve(_client(args.redis_url), auth, args.host, args.port)
    return 0


def cmd_nodes(args: argparse.Namespace) -> int:
    client = _client(args.redis_url)
    rows = nodes.nodes(client)
    down = liveshards.read(client).shards()
    for n in rows:
        n["taken_over"] = sorted(down & set(n["shards"]))  # its shards now served by backups
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no worker has sent a heartbeat (workers send them while task events are on)")
    else:
        print(f"{'node':32} {'pid':>7} {'shards':12} {'last heartbeat':>14} {'fetched':>9} {'pages/s':>8}  state")
    for n in rows:
        shards = ",".join(map(str, n["shards"])) or "-"
        note = f" (shard {','.join(map(str, n['taken_over']))} taken over)" if n["taken_over"] else ""
        print(f"{n['node']:32} {n['pid']:>7} {shards:12} {n['age']:>12.1f}s {n['fetched']:>9} "
              f"{n['pages_per_s']:>8.1f}  {n['state']}{note}")
    known = {s for n in rows for s in n["shards"]} | down
    for line in takeover.describe(takeover.shard_states(client, max(known, default=-1) + 1), heard_any=False):
        print(line)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    target = args.source
    url = target if "://" in target else f"sqlite:///{Path(target).resolve() / 'crawl.db'}"
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        raise SystemExit(f"crawler export: no crawl database at {url[len('sqlite:///'):]}")
    if args.content and args.items:
        raise SystemExit("crawler export: give --content or --items, not both")
    if (args.depth is not None or args.by_depth) and (args.content or args.items):
        table = "content" if args.content else "items"
        raise SystemExit(f"crawler export: --depth and --by-depth select pages; the {table} table has no depth")
    if args.by_depth and not args.out:
        raise SystemExit("crawler export: --by-depth needs --out PREFIX (files PREFIX.depth-N.FORMAT)")
    store = open_store(url)
    try:
        columns = None
        if args.items:
            rows = item_rows(store.items(args.job))
            if args.format == "csv":  # items differ in fields: a first pass finds them all
                columns = item_columns(item_rows(store.items(args.job)))
        else:
            rows = store.content(args.job) if args.content else store.pages(args.job)
        if args.depth is not None:
            rows = (row for row in rows if row.get("depth") == args.depth)
        if args.by_depth:
            for path in export_by_depth(rows, args.out, args.format):
                print(path, file=sys.stderr)
        elif args.out:
            with open(args.out, "w", encoding="utf-8", newline="") as out:
                write_rows(rows, out, args.format, columns)
        else:
            write_rows(rows, sys.stdout, args.format, columns)
    finally:
        store.close()
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Serve the synthetic web on loopback and crawl it: the whole system, no network needed."""
    if args.shop:
        return _demo_shop(args)
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


EXAMPLE_SPIDER = Path(__file__).resolve().parents[1] / "examples" / "catalogue_spider.py"


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


def cmd_settings(args: argparse.Namespace) -> int:
    table = settings_table()
    if args.readme:
        path = Path(args.readme)
        text = path.read_text()
        begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
        if begin not in text or end not in text:
            raise ConfigError(f"{path} has no {begin.strip()} ... {end} markers")
        head, rest = text.split(begin, 1)
        path.write_text(head + begin + table + "\n" + end + rest.split(end, 1)[1])
    else:
        print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="crawler", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("crawl", help="crawl on this machine, nothing else to set up")
    _job_flags(c)
    c.add_argument("--out", required=True, help="output directory (crawl.db, warc/, logs/)")
    c.add_argument("--workers", metavar="N", help="worker processes (default 2)")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    c.set_defaults(func=cmd_crawl)

    d = sub.add_parser("demo", help="crawl a synthetic web served on loopback (no network needed)")
    d.add_argument("--out", default="crawl-out", help="output directory (default: crawl-out)")
    d.add_argument("--sites", type=int, default=5)
    d.add_argument("--pages", type=int, default=100)
    d.add_argument("--workers", metavar="N")
    d.add_argument("-q", "--quiet", action="store_true")
    d.add_argument("--shop", action="store_true",
                   help="serve a shop catalogue instead and extract its products with examples/catalogue_spider.py")
    d.add_argument("--spider", metavar="SPIDER", help="with --shop: your spider instead of the example")
    for name in ("max_pages", "max_depth", "delay", "per_host", "concurrency", "shards", "allow_domains",
                 "user_agent", "redis_url", "allow_networks", "resolve", "sitemaps", "obey_robots", "extract",
                 "allow_urls", "deny_urls", "follow_nofollow", "noise_links"):
        d.set_defaults(**{name: None})
    d.set_defaults(func=cmd_demo)

    s = sub.add_parser("submit", help="enqueue a job for running workers; prints its id")
    _job_flags(s)
    s.add_argument("--store", help="store URL, e.g. sqlite:///data/crawl.db")
    s.add_argument("--warc-dir", help="directory for WARC files (default: beside an SQLite store)")
    s.set_defaults(func=cmd_submit)

    s.add_argument("--every", metavar="DURATION", help="run in cycles this far apart (30m, 6h, 1d)")
    s.add_argument("--cron", metavar="EXPR", help="run in cycles on a cron schedule, UTC ('0 */6 * * *')")
    s.add_argument("--revisit-min", metavar="DURATION", help="revisit a page at most this often (default: the period)")
    s.add_argument("--revisit-max", metavar="DURATION", help="revisit a page at least this often (default 30d)")

    st = sub.add_parser("status", help="a job's state and counters")
    st.add_argument("job")
    st.add_argument("--wait", action="store_true", help="return when the job is done")
    st.add_argument("--timeout", type=float, default=0, help="with --wait: give up after N seconds")
    st.add_argument("--json", action="store_true")
    st.add_argument("--hosts", action="store_true", help="each host's current delay, in flight and queued")
    st.add_argument("--redis-url")
    st.set_defaults(func=cmd_status)

    dl = sub.add_parser("deadlinks", help="404/410 pages of a job and the pages that link to them")
    dl.add_argument("job")
    dl.add_argument("--store", help="store URL (default: the job's)")
    dl.add_argument("--json", action="store_true")
    dl.add_argument("--redis-url")
    dl.set_defaults(func=cmd_deadlinks)

    rs = sub.add_parser("reset-seen", help="forget which URLs a job has seen (its Bloom filter or set)")
    rs.add_argument("job")
    rs.add_argument("--redis-url")
    rs.set_defaults(func=cmd_reset_seen)

    rc = sub.add_parser("recover", help="rebuild a job that Redis lost from its store (pages, definition)")
    rc.add_argument("job")
    rc.add_argument("--store", required=True, help="the job's store URL, e.g. sqlite:///data/crawl.db")
    rc.add_argument("--shards", metavar="N",
                    help="the job's shard count if `shards set` changed it (default: submitted)")
    rc.add_argument("--redis-url")
    rc.set_defaults(func=cmd_recover)

    se = sub.add_parser("set", help="change a running job's settings (workers apply them within 5 s), or one "
                                    "host's delay and in-flight limit")
    se.add_argument("job")
    se.add_argument("pairs", nargs="*", metavar="KEY=VALUE",
                    help=f"runtime settings: {', '.join(control.RUNTIME)}; with --host: delay, per_host")
    se.add_argument("--host", help="set (or --clear) this host's own delay=SECONDS and/or per_host=N")
    se.add_argument("--clear", action="store_true", help="with --host: the job's settings apply to it again")
    se.add_argument("--redis-url")
    se.set_defaults(func=cmd_set)

    lg = sub.add_parser("logs", help="a job's central log: warnings, errors and events from every worker")
    lg.add_argument("job")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing entries as they arrive")
    lg.add_argument("--level", default="INFO", help="the least level shown (DEBUG, INFO, WARNING, ERROR)")
    lg.add_argument("-n", "--lines", type=int, default=100, help="entries shown before following (default 100)")
    lg.add_argument("--redis-url")
    lg.set_defaults(func=cmd_logs)

    jl = sub.add_parser("jobs", help="the jobs Redis knows, newest first")
    jl.add_argument("--json", action="store_true")
    jl.add_argument("--redis-url")
    jl.set_defaults(func=cmd_jobs)

    sp = sub.add_parser("stop", help="dispatch nothing more for a job and end its schedule")
    sp.add_argument("job")
    sp.add_argument("--redis-url")
    sp.set_defaults(func=cmd_stop)

    for name, func, text in (("pause", cmd_pause, "dispatch nothing (and start no cycle) until resume"),
                             ("resume", cmd_resume, "undo pause")):
        x = sub.add_parser(name, help=text)
        x.add_argument("job")
        x.add_argument("--redis-url")
        x.set_defaults(func=func)

    cy = sub.add_parser("cycles", help="per cycle of a periodic job: start, end, fetched, new, changed, ...")
    cy.add_argument("job")
    cy.add_argument("--json", action="store_true")
    cy.add_argument("--redis-url")
    cy.set_defaults(func=cmd_cycles)

    sh = sub.add_parser("shards", help="change the shard count of running jobs")
    shs = sh.add_subparsers(dest="action", required=True)
    sset = shs.add_parser("set", help="give running jobs N shards; only the hosts whose shard changed move")
    sset.add_argument("count", metavar="N")
    sset.add_argument("--job", action="append", help="only this job (repeatable; default: every running job)")
    sset.add_argument("--redis-url")
    sset.set_defaults(func=cmd_shards)

    nd = sub.add_parser("nodes", help="every worker: pid, shards, last heartbeat, pages fetched, pages/s, state")
    nd.add_argument("--json", action="store_true")
    nd.add_argument("--redis-url")
    nd.set_defaults(func=cmd_nodes)

    w = sub.add_parser("web", help="the console and REST API in a browser (auth from CRAWLER_WEB_TOKEN, or "
                                   "CRAWLER_WEB_USER and CRAWLER_WEB_PASSWORD; required off loopback)")
    w.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    w.add_argument("--port", type=int, default=8089, help="port (default 8089)")
    w.add_argument("--redis-url")
    w.set_defaults(func=cmd_web)

    e = sub.add_parser("export", help="print stored pages (or, with --content, their main text; with --items, "
                                      "what the spider extracted)")
    e.add_argument("source", help="an output directory or a store URL")
    e.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    e.add_argument("--job", help="only this job's pages")
    e.add_argument("--content", action="store_true",
                   help="the pages' main text (the content table, filled by --extract) instead of the pages")
    e.add_argument("--items", action="store_true",
                   help="the items the job's spider extracted (the items table), each with _url and _job_id")
    e.add_argument("--depth", type=int, metavar="N", help="only pages at depth N (seeds are depth 0)")
    e.add_argument("--by-depth", action="store_true",
                   help="one file per depth: OUT.depth-N.FORMAT (needs --out)")
    e.add_argument("--out", metavar="PATH", help="write to PATH (with --by-depth: the files' prefix) instead of stdout")
    e.set_defaults(func=cmd_export)
    t = sub.add_parser("settings", help="print the settings table (defaults, env names, meaning)")
    t.add_argument("--readme", metavar="FILE", help="rewrite the table between the markers in FILE")
    t.set_defaults(func=cmd_settings)
    return p


def main(argv: list[str] | None = None) -> int:
    environment()  # a wrong CRAWLER_* variable ends every command with one line, before anything runs
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    args = build_parser().parse_args(argv)
    # Only the crawler's own errors and its environment's (Redis unreachable, a file or socket
    # failing) become one line: anything else is a bug, and its traceback is what fixes it.
    try:
        return int(args.func(args))
    except CrawlerError as exc:
        line, code = _crawler_error(exc)
    except BrokenPipeError:
        return 0  # the reader (``| head``) has what it wanted
    except redis.ConnectionError as exc:
        line, code = f"cannot reach Redis: {exc}", 1
    except redis.TimeoutError as exc:
        # The environment's failure, not a bug: Redis too busy to answer within the timeout.
        line, code = f"Redis did not answer in time: {_one_line(str(exc))}", 1
    except OSError as exc:
        line, code = f"{type(exc).__name__}: {_one_line(str(exc))}", 1
    print(redact(f"crawler {args.command}: {line}"), file=sys.stderr)
    return code


def _crawler_error(exc: CrawlerError) -> tuple[str, int]:
    """The line and exit status for one of the crawler's own errors: 2 for input that cannot be
    used (a setting, flag, seed, store URL or job id), 1 for a failure along the way."""
    if isinstance(exc, JobNotFound):  # str() of a KeyError is its repr, quotes and all
        return _one_line(str(exc.args[0] if exc.args else exc)), 2
    if isinstance(exc, (BadURL, ValueError)):
        return _one_line(str(exc)), 2
    return f"{type(exc).__name__}: {_one_line(str(exc))}", 1


if __name__ == "__main__":
    sys.exit(main())
