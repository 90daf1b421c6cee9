"""What every command shares: the parser that ends a usage mistake in one line, the options
declared once (``command`` attaches a job argument, ``--json`` and ``--redis-url``), the job
flags of ``crawl`` and ``submit``, and the Redis client."""

from __future__ import annotations

import argparse
import getpass
import socket
from collections.abc import Callable
from typing import Any, NoReturn

import redis

from crawler import control
from crawler.celeryapp.config import redis_url
from crawler.config.settings import Settings, parse_text

Handler = Callable[[argparse.Namespace], int]
Subparsers = Any  # argparse's _SubParsersAction, private to it


class Parser(argparse.ArgumentParser):
    """Usage mistakes end in one line, like every other error of the command, not a usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {one_line(message)} (see {self.prog} --help)\n")


def one_line(message: str, limit: int = 300) -> str:
    # Messages may quote what the user gave: keep them one readable line whatever it held.
    message = message.replace("\r", "\\r").replace("\n", "\\n")
    return message if len(message) <= limit else message[: limit - 3] + "..."


LOCAL = ""  # a command that acts on this machine (a crawl, a server, a file), not on the cluster


def command(sub: Subparsers, name: str, handler: Handler, help: str | None, *, job: bool = False,
            json: bool = False, redis: bool = True, operation: str | None = None) -> argparse.ArgumentParser:
    """A subcommand run by ``handler``, with the options most commands share: the job it acts
    on, ``--json`` output, and the Redis to use. ``operation``: the operation of
    ``crawler.control`` it is the face of (default: its name), the one the REST API serves too;
    ``LOCAL`` for a command the API has no business with."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help)
    p.set_defaults(operation=name if operation is None else operation)
    if job:
        p.add_argument("job")
    if json:
        p.add_argument("--json", action="store_true")
    if redis:
        p.add_argument("--redis-url", help="Redis to use (default: $CRAWLER_REDIS_URL)")
    p.set_defaults(func=handler)
    return p


# Numeric flags stay text until ``job_settings`` reads them as the environment's values are read,
# so both give the same one-line error (``setting delay: ..., got 'nan'``).
def job_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("seeds", nargs="*", metavar="SEED", help="start URLs (default: the spider's start_urls)")
    p.add_argument("--max-pages", metavar="N", help="admit at most N URLs (0: no limit)")
    p.add_argument("--max-depth", metavar="N", help="follow links at most N hops from a seed (0: no limit)")
    p.add_argument("--delay", metavar="SECONDS", help="seconds between requests to one host")
    p.add_argument("--per-host", metavar="N", help="requests in flight per host (default 1)")
    p.add_argument("--concurrency", metavar="N", help="requests in flight in total")
    p.add_argument("--shards", metavar="N", help="number of shards")
    p.add_argument("--frontier-split", action=argparse.BooleanOptionalAction, default=None,
                   help="split the job's frontier into one part per shard, each under a Redis hash tag of its own, "
                        "so a Redis Cluster spreads one job over its masters (its shard count may then go down, "
                        "not above its parts); default: on for a Redis Cluster")
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


def job_settings(args: argparse.Namespace, **extra: Any) -> Settings:
    names = ("max_pages", "max_depth", "delay", "per_host", "concurrency", "shards", "allow_domains",
             "user_agent", "redis_url", "allow_networks", "resolve", "sitemaps", "obey_robots", "extract",
             "allow_urls", "deny_urls", "follow_nofollow", "spider", "spider_args", "auth", "session_headers",
             "cookies", "noise_links", "host_queue_cap", "render", "frontier_split")
    given = {**{n: getattr(args, n, None) for n in names}, **extra}
    for name in _TEXT_FLAGS:
        if isinstance(given.get(name), str):
            given[name] = parse_text(name, given[name], "--" + name.replace("_", "-"))
    return Settings.from_env(**given)


def count_flag(name: str, raw: str | None, flag: str) -> int | None:
    """A count flag outside the job flags (``shards set N``, ``recover --shards``), read and
    checked as the setting it names."""
    return None if raw is None else int(parse_text(name, raw, flag))


def redis_client(url: str | None) -> redis.Redis:
    """The Redis a command acts on: ``--redis-url``, else the environment's."""
    return control.client(url or redis_url())


def summary(st: dict[str, Any]) -> str:
    c = st.get("counters", {})
    errors = sum(v for k, v in c.items() if k.startswith("error:"))
    # A callback that raised costs items, not pages: without this the line would read clean.
    spider = c.get("spider_error", 0)
    spiders = f", {spider} spider errors (see logs)" if spider else ""
    return f"{c.get('stored', 0)} pages stored, {errors} errors{spiders}, {c.get('open', 0)} queued or in flight"


def requester() -> str:
    """Who is asking, for the job's log: the local user on this host."""

    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except Exception:  # no user name in a bare container: still say where
        return socket.gethostname()
