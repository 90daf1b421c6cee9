"""The ``crawler`` command: crawl (embedded), submit, status, pause, resume, stop, recover, cycles, export.

One module per group of commands, each with its handlers and their options side by side
(``crawling``, ``jobs``, ``cluster``, ``output``); ``common`` declares what they share.
"""

from __future__ import annotations

import argparse
import logging
import sys

import redis

from crawler.celeryapp.config import environment
from crawler.cli import cluster, crawling, jobs, output
from crawler.cli.common import Parser, job_settings, one_line
from crawler.config.redact import redact
from crawler.errors import BadURL, CrawlerError, JobNotFound

__all__ = ["build_parser", "main"]
_settings = job_settings  # the name tests and scripts used before the split


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="crawler", description=__doc__.split("\n", 1)[0])
    sub = p.add_subparsers(dest="command", required=True)
    for group in (crawling, jobs, cluster, output):
        group.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    environment()  # a wrong CRAWLER_* variable ends every command with one line, before anything runs
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    args = parse_intermixed(build_parser(), argv)
    # Only the crawler's own errors and its environment's (Redis unreachable, a file or socket
    # failing) become one line: anything else is a bug, and its traceback is what fixes it.
    try:
        return int(args.func(args))
    except CrawlerError as exc:
        line, code = _crawler_error(exc)
    except BrokenPipeError:
        return 0  # the reader (``| head``) has what it wanted
    except redis.ConnectionError as exc:
        line, code = f"cannot reach Redis: {one_line(str(exc))}", 1
    except (redis.exceptions.MovedError, redis.exceptions.AskError,
            redis.exceptions.ClusterCrossSlotError) as exc:
        # A node of a Redis Cluster, named as a plain Redis: it says where a key lives instead, or
        # (in a transaction whose keys it holds in several slots) refuses them together.
        line, code = (f"Redis answered {_cluster_answer(exc)}: it is a node of a Redis Cluster; name it "
                      "(and other nodes) as redis+cluster://host:port,host:port"), 2
    except (redis.exceptions.RedisClusterException, redis.exceptions.ClusterError,
            redis.exceptions.TryAgainError) as exc:
        # Unreachable, not a cluster, or between a master's loss and its replica's promotion.
        line, code = f"cannot use the Redis Cluster: {type(exc).__name__}: {one_line(str(exc))}", 1
    except redis.ResponseError as exc:
        if "DB index is out of range" not in str(exc):
            raise  # any other refusal is a bug of ours: its traceback is what fixes it
        line, code = "the Redis URL names a database that server does not have (it has 0 to databases - 1)", 2
    except redis.TimeoutError as exc:
        # The environment's failure, not a bug: Redis too busy to answer within the timeout.
        line, code = f"Redis did not answer in time: {one_line(str(exc))}", 1
    except OSError as exc:
        line, code = f"{type(exc).__name__}: {one_line(str(exc))}", 1
    print(redact(f"crawler {args.command}: {line}"), file=sys.stderr)
    return code


def parse_intermixed(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parse_args``, with a command's list of values allowed on both sides of its options:
    ``crawler set JOB --host H delay=2`` as well as ``crawler set JOB delay=2 --host H``. argparse
    gives a list all the values before the first option and calls the rest unrecognized
    (its ``parse_intermixed_args`` refuses subcommands)."""
    args, extra = parser.parse_known_args(argv)
    if not extra:
        return args
    chosen = parser
    while subs := [a for a in chosen._actions if isinstance(a, argparse._SubParsersAction)]:
        name = getattr(args, subs[0].dest, None)
        if name not in subs[0].choices:
            break
        chosen = subs[0].choices[name]
    lists = [a for a in chosen._get_positional_actions() if a.nargs in ("*", "+")]
    # After "--" everything is a value, as argparse itself has it.
    values = extra[1:] if extra[0] == "--" else extra
    if len(lists) != 1 or (values is extra and any(a.startswith("-") for a in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    extra = values
    dest = lists[0].dest
    setattr(args, dest, [*(getattr(args, dest) or []), *extra])
    return args


def _cluster_answer(exc: redis.exceptions.ResponseError) -> str:
    if isinstance(exc, redis.exceptions.MovedError):
        return f"MOVED {exc}"
    if isinstance(exc, redis.exceptions.AskError):
        return f"ASK {exc}"
    return f"CROSSSLOT ({one_line(str(exc))})"


def _crawler_error(exc: CrawlerError) -> tuple[str, int]:
    """The line and exit status for one of the crawler's own errors: 2 for input that cannot be
    used (a setting, flag, seed, store URL or job id), 1 for a failure along the way."""
    if isinstance(exc, JobNotFound):  # str() of a KeyError is its repr, quotes and all
        return one_line(str(exc.args[0] if exc.args else exc)), 2
    if isinstance(exc, (BadURL, ValueError)):
        return one_line(str(exc)), 2
    return f"{type(exc).__name__}: {one_line(str(exc))}", 1

