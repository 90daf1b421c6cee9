"""Steering jobs: status, the job list, stop, pause, resume, live settings, logs, cycles, dead
links, the seen-set, recovery and resharding."""

from __future__ import annotations

import argparse
import json
import sys
import time
from functools import partial

from crawler import control
from crawler.cli.common import Subparsers, command, count_flag, redis_client, requester, summary
from crawler.config.redact import redact
from crawler.config.settings import parse_text
from crawler.errors import ConfigError


def cmd_status(args: argparse.Namespace) -> int:
    if not 0 <= args.timeout < float("inf"):  # a NaN deadline would never pass
        raise ConfigError(f"--timeout must be a finite number of seconds >= 0, got {args.timeout!r}")
    deadline = time.monotonic() + args.timeout if args.timeout else None
    told = False
    # A wait is a barrier (a script's): it waits out a master's failover as the workers do.
    grace = control.OUTAGE_GRACE if args.wait else 0

    def say(line: str) -> None:
        print(f"crawler status: {line}", file=sys.stderr)

    client = control.through_outage(lambda: redis_client(args.redis_url), grace, say)

    while True:
        # The hosts table is built once, for the answer, not on every poll of --wait.
        st = control.through_outage(
            lambda: control.status(client, args.job, with_hosts=args.hosts and not args.wait), grace, say)
        if not args.wait or st["status"] in (*control.FINISHED, control.WAITING):
            break
        if not told:  # a wait that may never end says why once, at its start
            told = True
            for line in control.through_outage(partial(control.worker_lines, client, st), grace, say):
                print(f"crawler status: {line}", file=sys.stderr)
        if deadline and time.monotonic() > deadline:
            print(f"crawler status: job {args.job} still {st['status']} after {args.timeout}s", file=sys.stderr)
            return 2
        time.sleep(0.5)
    if args.hosts and args.wait:
        st = control.through_outage(lambda: control.status(client, args.job, with_hosts=True), grace, say)
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(f"job {st['id']}: {st['status']}  ({summary(st)})")
    if st.get("error"):
        print(f"  error: {redact(st['error'])}")
    print(f"  queued: {st['queued_in_redis']} in Redis, {st['queued_in_store']} in the store")
    for line in control.worker_lines(client, st):
        print(f"  {line}")
    for w in st.get("robots_wait", [])[:5]:
        print(f"  waiting on robots.txt: {w['origin']} ({w['reason']}) until "
              f"{time.strftime('%H:%M:%S', time.localtime(w['until']))} (in {w['until'] - time.time():.0f}s)")
    if st.get("robots_waiting", 0) > 5:
        print(f"  ... {st['robots_waiting'] - 5} more origins waiting on robots.txt")
    if st.get("store_error"):
        e = st["store_error"]
        print(f"  store error, retrying for {time.time() - e['since']:.0f}s ({e['retries']} retries, last by "
              f"{e['node']}): {redact(e['error'])}")
    for k, v in st["counters"].items():
        print(f"  {k:24} {v}")
    c = st["counters"]
    if c.get("cache_lookups"):
        print(f"  {'local cache hit rate':24} {c.get('cache_hits', 0) / c['cache_lookups']:.1%}")
    if args.hosts:
        print(f"  {'host':40} {'delay s':>8} {'in flight':>9} {'queued':>7} {'in store':>8} {'render':>6}  "
              "render evidence")
        for h in st["hosts"]:
            print(f"  {h['host']:40} {h['delay']:8.3f} {h['inflight']:9d} {h['queued']:7d} {h['queued_in_store']:8d} "
                  f"{h['render'] or '-':>6}  {_evidence(h.get('render_evidence') or {})}")
    return 0


def _evidence(e: dict[str, int]) -> str:
    """What a host's render decision rests on, in a few words ('-' with no render yet)."""
    if not any(e.values()):
        return "-"
    return (f"{e['compared']} compared, {e['links_gained']:+d} links, {e['text_gained']:+d} chars; "
            f"{e['timeouts']} timed out, {e['failures']} failed")


def cmd_deadlinks(args: argparse.Namespace) -> int:
    for dead in control.all_dead_links(redis_client(args.redis_url), args.job, args.store):
        if args.json:
            print(json.dumps(dead))
        else:
            print(f"{dead['status']} {dead['url']}")
            for ref in dead["linked_from"]:
                print(f"      <- {ref}")
    return 0


def cmd_reset_seen(args: argparse.Namespace) -> int:
    deleted = control.reset_seen(redis_client(args.redis_url), args.job, by=requester())
    print(f"job {args.job}: seen-set cleared ({deleted} keys)")
    return 0


def cmd_recover(args: argparse.Namespace) -> int:
    shards = count_flag("shards", args.shards, "--shards")
    done = control.recover(redis_client(args.redis_url), args.job, args.store, by=requester(), shards=shards)
    cycle = f" cycle {done['cycle']}," if done["cycle"] else ""
    print(f"job {args.job}: rebuilt from {redact(args.store)}:{cycle} {done['stored']} stored pages, "
          f"{done['seen']} marked seen, {done['not_due']} not due, {done['queued']} URLs queued; "
          f"status {done['status']}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    client = redis_client(args.redis_url)
    control.stop(client, args.job, by=requester())
    print(f"job {args.job}: stopped")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    client = redis_client(args.redis_url)
    was = control.status(client, args.job)["status"]
    now = control.pause(client, args.job, by=requester())
    why = control.not_applied("pause", was, now)
    print(f"job {args.job}: {now}" + (f" ({why})" if why else ""))
    return 1 if why else 0


def cmd_resume(args: argparse.Namespace) -> int:
    client = redis_client(args.redis_url)
    was = control.status(client, args.job)["status"]
    now = control.resume(client, args.job, by=requester())
    why = control.not_applied("resume", was, now)
    print(f"job {args.job}: {now}" + (f" ({why})" if why else ""))
    return 1 if why else 0


def cmd_set(args: argparse.Namespace) -> int:
    """Change runtime settings of a running job, or one host's override."""
    client = redis_client(args.redis_url)
    pairs: dict[str, str] = {}
    for item in args.pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"not KEY=VALUE: {item!r}")
        pairs[key.strip().replace("-", "_")] = value
    if args.host is not None:  # "" too: an empty $HOST must not change the whole job
        if args.clear:
            gone = control.clear_host_override(client, args.job, args.host, by=requester())
            print(f"job {args.job}: {args.host}: " + ("the job's settings apply again" if gone else "had no override"))
            return 0
        unknown = set(pairs) - {"delay", "per_host"}
        if unknown:
            raise ConfigError(f"a host takes delay=SECONDS and/or per_host=N, not {', '.join(sorted(unknown))}")
        got = control.set_host_override(client, args.job, args.host, pairs.get("delay"), pairs.get("per_host"),
                                        by=requester())
        print(f"job {args.job}: {got['host']}: " + ", ".join(f"{k} {v}" for k, v in got["override"].items()))
        if got.get("warning"):
            print(f"crawler set: warning: {got['warning']}", file=sys.stderr)
        return 0
    if args.clear:
        raise ConfigError("--clear needs --host HOST")
    changed = control.set_settings(client, args.job, pairs, by=requester())["changed"]
    if not changed:
        print(f"job {args.job}: nothing changed")
    for name, (old, new) in changed.items():
        print(f"job {args.job}: {name} {old!r} -> {new!r} (workers apply it within 5 s)")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    client = redis_client(args.redis_url)
    entries = control.logs(client, args.job, level=args.level, limit=args.lines)
    for e in entries:
        print(control.format_log_entry(e), flush=True)
    if args.follow:
        after = entries[-1]["id"] if entries else "$"
        try:
            for e in control.follow_logs(client, args.job, after=after, level=args.level):
                print(control.format_log_entry(e), flush=True)
        except KeyboardInterrupt:
            return 0
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    rows = control.list_jobs(redis_client(args.redis_url))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        made = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(row["created_at"]))
        print(f"{row['id']:26} {row['status']:8} {made}  {row['stored']:>8} stored {row['open']:>8} open "
              f"{row['errors']:>6} errors")
    return 0


def cmd_cycles(args: argparse.Namespace) -> int:
    rows = control.cycles(redis_client(args.redis_url), args.job)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:  # a table head over nothing would read as a periodic job with no cycle yet
        print(f"job {args.job} runs once: it has no cycles (a job submitted with --every or --cron runs in cycles)")
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
    moves = control.set_shards(redis_client(args.redis_url), count, args.job, by=requester())
    if not moves:
        print("no running job to reshard (give --job JOB)")
        return 1
    for m in moves:
        share = m["hosts"] / m["hosts_total"] if m["hosts_total"] else 0.0
        print(f"job {m['job']}: {count} shards; {m['hosts']} of {m['hosts_total']} hosts moved ({share:.0%}), "
              f"{m['records']} records rewritten, {m['messages']} messages requeued")
    print(f"start workers for shard-0 .. shard-{count - 1} (celery -A crawler worker -Q shard-N)")
    return 0


def register(sub: Subparsers) -> None:
    st = command(sub, "status", cmd_status, "a job's state and counters", job=True, json=True)
    st.add_argument("--wait", action="store_true", help="return when the job is done")
    st.add_argument("--timeout", type=float, default=0, help="with --wait: give up after N seconds")
    st.add_argument("--hosts", action="store_true", help="each host's current delay, in flight and queued")

    dl = command(sub, "deadlinks", cmd_deadlinks, "404/410 pages of a job and the pages that link to them",
                 job=True, json=True)
    dl.add_argument("--store", help="store URL (default: the job's)")

    command(sub, "reset-seen", cmd_reset_seen, "forget which URLs a job has seen (its Bloom filter or set)", job=True)

    rc = command(sub, "recover", cmd_recover, "rebuild a job that Redis lost from its store (pages, definition)",
                 job=True)
    rc.add_argument("--store", required=True, help="the job's store URL, e.g. sqlite:///data/crawl.db")
    rc.add_argument("--shards", metavar="N",
                    help="the job's shard count if `shards set` changed it (default: submitted)")

    se = command(sub, "set", cmd_set, "change a running job's settings (workers apply them within 5 s), or one "
                                      "host's delay and in-flight limit", job=True)
    se.add_argument("pairs", nargs="*", metavar="KEY=VALUE",
                    help=f"runtime settings: {', '.join(control.RUNTIME)}; with --host: delay, per_host")
    se.add_argument("--host", help="set (or --clear) this host's own delay=SECONDS and/or per_host=N")
    se.add_argument("--clear", action="store_true", help="with --host: the job's settings apply to it again")

    lg = command(sub, "logs", cmd_logs, "a job's central log: warnings, errors and events from every worker",
                 job=True)
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing entries as they arrive")
    lg.add_argument("--level", default="INFO", help="the least level shown (DEBUG, INFO, WARNING, ERROR)")
    lg.add_argument("-n", "--lines", type=int, default=100, help="entries shown before following (default 100)")

    command(sub, "jobs", cmd_jobs, "the jobs Redis knows, newest first", json=True)
    command(sub, "stop", cmd_stop, "dispatch nothing more for a job and end its schedule", job=True)
    command(sub, "pause", cmd_pause, "dispatch nothing (and start no cycle) until resume", job=True)
    command(sub, "resume", cmd_resume, "undo pause", job=True)
    command(sub, "cycles", cmd_cycles, "per cycle of a periodic job: start, end, fetched, new, changed, ...",
            job=True, json=True)

    sh = sub.add_parser("shards", help="change the shard count of running jobs")
    shs = sh.add_subparsers(dest="action", required=True)
    sset = command(shs, "set", cmd_shards, "give running jobs N shards; only the hosts whose shard changed move",
                   operation="shards set")
    sset.add_argument("count", metavar="N")
    sset.add_argument("--job", action="append", help="only this job (repeatable; default: every running job)")
