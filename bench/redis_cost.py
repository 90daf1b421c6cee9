"""Redis cost per page (``make bench-redis``): how many Redis commands, and how much of the Redis
process's CPU, one crawled page costs on the defaults.

    python -m bench.redis_cost [--hosts 4] [--pages 800] [--runs 3] [--workers 2]

Our crawler crawls the synthetic web of ``bench.web`` (served on loopback by ``bench.server``) with
the defaults ``crawler crawl`` uses, on a private redis-server that is both broker and state, as
the one-command crawl runs them. ``INFO commandstats`` and ``INFO cpu`` (used_cpu_user +
used_cpu_sys of the Redis process) are read before the crawl starts and after it ends; the
difference, divided by the pages stored, is the cost per page. One Redis core is the ceiling of a
crawl's pages/s whatever the number of workers, so these are the figures that decide it.
Memory per unit (``MEMORY USAGE`` of every key of the job, grouped by structure and divided by
what it holds: URLs queued, leases, pages indexed, hosts) is read twice, mid-crawl (when queues
and leases are full) and at the end; ``docs/capacity.md`` is built from these figures.
``--monitor`` adds a run with Redis ``MONITOR`` on that says where the commands go: each command
a script runs is put down to that script, each other command to its name and the kind of key it
names (MONITOR slows Redis, so that run's CPU is no measurement).
Writes ``bench/results/redis_cost-<stamp>.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.peers import LIMIT, our_settings
from bench.server import free_port, make_server, nginx_binary
from bench.web import WebSpec, reachable, write
from crawler import jobs
from crawler.config.settings import Settings
from crawler.dedup import neardup
from crawler.dedup.bloom import BloomSeen
from crawler.dedup.neardup import NearDuplicates
from crawler.embedded import crawl
from crawler.frontier import lua
from crawler.local.redis_server import RedisServer
from crawler.state import keys
from crawler.state.conn import connect

RESULTS = Path(__file__).parent / "results"
TARGET_COMMANDS = 40.0  # per page, issue 29
TARGET_CPU_MS = 0.25


def snapshot(url: str) -> tuple[Counter[str], float, Counter[str]]:
    """(calls per command, Redis CPU seconds, microseconds spent in each command) of the server
    at ``url`` so far. A script's microseconds include those of the commands it runs."""
    r = connect(url)
    try:
        stats = r.info("commandstats")
        cpu = r.info("cpu")
    finally:
        r.close()
    calls: Counter[str] = Counter()
    usec: Counter[str] = Counter()
    for name, v in stats.items():
        # redis-py parses "cmdstat_hget:calls=3,usec=..." into {"cmdstat_hget": {"calls": 3, ...}}
        calls[name.removeprefix("cmdstat_")] = int(v["calls"])
        usec[name.removeprefix("cmdstat_")] = int(v["usec"])
    return calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), usec


# Structure of a job key (what follows ``c:{job}:``) -> (name, how its units are counted).
def _structure(rest: str) -> str:
    head = rest.split(":", 1)[0]
    if rest.startswith("q:"):
        return "host queues"
    if rest.startswith("sh:") or rest == "shseq":
        return "near-duplicate index"
    if head in ("bf", "bloom"):
        return "bloom seen-set"
    if head in ("lease", "lexp"):
        return "leases"
    if head in ("inf", "ipinf", "ip", "next", "delay", "hostn", "hoste", "hostf", "ovr") or head == "ipwait":
        return "per-host records"
    if head == "ready":
        return "ready sets"
    if head in ("b", "bb", "bm", "pend", "pendb", "pendc"):
        return "bodies and pending links (transient)"
    return "job records (meta, counters, log, ...)"


def memory(url: str, job: str) -> dict[str, dict[str, float]]:
    """Bytes per structure of the job, its units and bytes per unit, from MEMORY USAGE."""
    r = connect(url)
    try:
        got: dict[str, dict[str, float]] = {}
        for key in r.scan_iter(keys.job_pattern(job), count=1000):
            name = key.decode().split("}:", 1)[1]  # after the tag: the job's own, or a part's
            kind = _structure(name)
            entry = got.setdefault(kind, {"bytes": 0.0, "keys": 0.0, "units": 0.0})
            entry["bytes"] += int(r.memory_usage(key, samples=0) or 0)
            entry["keys"] += 1
            if kind == "host queues":
                entry["units"] += int(r.llen(key))
            elif name == "lease":
                entry["units"] += int(r.hlen(key))
        hosts = int(r.hlen(keys.host_admitted(job)))
        pages = int(r.get(keys.simhash_seq(job)) or 0)
        counters = {k.decode(): int(v) for k, v in r.hgetall(keys.counters(job)).items()}
        for kind, units in (("per-host records", hosts), ("near-duplicate index", pages)):
            if kind in got:
                got[kind]["units"] = units
        if "bloom seen-set" in got:  # per URL admitted (its size is set by bloom_capacity, not by use)
            got["bloom seen-set"]["units"] = counters.get("queued", 0) or counters.get("admitted", 0)
        for entry in got.values():
            entry["bytes_per_unit"] = entry["bytes"] / entry["units"] if entry["units"] else 0.0
        return got
    finally:
        r.close()


def index_profile(n: int = 60_000, budget: int = 30_000) -> dict[str, float]:
    """Bytes per page of the near-duplicate index filled with ``n`` distinct pages (the bench
    web's pages are near-duplicates of each other, so a crawl of it indexes almost none),
    unbounded and with ``budget``; and bytes per URL of the default Bloom filter at capacity."""
    rnd = random.Random(1)
    pages = [(f"http://127.0.1.{i % 200 + 1}:8080/s{i % 10}/p{i}.html", rnd.getrandbits(64)) for i in range(n)]
    out: dict[str, float] = {}
    with RedisServer() as server:
        r = connect(server.url)
        nd = NearDuplicates(r)
        for name, b in (("neardup_unbounded_b_per_page", 0), (f"neardup_budget_{budget}_b_per_page", budget)):
            for k in range(0, n, 500):
                nd.find_or_add(name, pages[k:k + 500], 3, budget=b)
            used = sum(int(r.memory_usage(key, samples=0) or 0) for key in r.scan_iter(keys.job_pattern(name)))
            out[name] = used / min(n, b or n)
        s = Settings.from_env()
        bloom = BloomSeen(r, "bloom", s.bloom_capacity, s.bloom_error_rate)
        bloom.add_many(["http://x/"])
        out["bloom_b_per_url_at_capacity"] = bloom.memory() / s.bloom_capacity
        r.close()
    return out


def _script_names() -> dict[str, str]:
    """sha1 -> name of every Lua script of ours (the frontier's and the ``scripts`` folders')."""
    texts = {name.lower(): text for name, text in vars(lua).items() if name.isupper() and isinstance(text, str)
             and name not in ("P",) and "redis.call" in text}
    root = Path(__file__).resolve().parent.parent / "crawler"
    texts.update(neardup.SCRIPTS)  # one file, four entry points
    for path in root.glob("*/scripts/*.lua"):
        texts.setdefault(path.stem, path.read_text())
    return {hashlib.sha1(t.encode()).hexdigest(): name for name, t in texts.items()}


def _key_kind(key: str) -> str:
    """A key's structure: ``c:{job}:ready:0`` -> ``ready``, ``c:{wake}:1`` -> ``c:{wake}``,
    ``shard-0`` -> ``shard-*`` (a queue of Celery's)."""
    m = re.match(r"c:\{[^}]*\}:([a-z]+)", key)
    if m:
        return m.group(1)
    if key.startswith("c:"):
        return ":".join(key.split(":")[:2])
    return re.sub(r"[-.][0-9a-f-]+$", "-*", key) if key else ""


def breakdown(url: str, stop: threading.Event, into: Counter[str]) -> None:
    """Count the commands Redis at ``url`` runs until ``stop``, by where they come from: a
    script's name for it and every command it runs, else the command and its key's kind."""
    names = _script_names()
    client = connect(url)
    script = ""
    with client.monitor() as m:
        for cmd in m.listen():
            if stop.is_set():
                return
            parts = str(cmd["command"]).split(" ", 3)
            name = parts[0].upper()
            if cmd.get("client_type") == "lua":
                into[f"{script}: {name}"] += 1
                continue
            if name in ("EVALSHA", "EVAL") and len(parts) > 1:
                script = names.get(parts[1], parts[1][:8]) if name == "EVALSHA" else "eval"
                into[f"{script}: EVALSHA"] += 1
            else:
                into[f"{name} {_key_kind(parts[1]) if len(parts) > 1 else ''}".strip()] += 1


def run_once(spec: WebSpec, workers: int, work: Path, profile: bool = False,
             monitor: Counter[str] | None = None, shards: int = 1) -> dict[str, Any]:
    """One crawl's cost; ``profile``: with memory read mid-crawl and at the end (whose own
    commands make that run's counts no measurement)."""
    expect = len(reachable(spec))
    with RedisServer() as server:
        calls0, cpu0, usec0 = snapshot(server.url)
        stop = threading.Event()
        if monitor is not None:
            threading.Thread(target=breakdown, args=(server.url, stop, monitor), daemon=True).start()
        after: list[tuple[Counter[str], float, Counter[str]]] = []
        mem: dict[str, Any] = {}

        def progress(st: dict[str, Any], elapsed: float) -> None:
            stored = int(st["counters"].get("stored", 0))
            if profile and "mid" not in mem and stored >= expect // 3:
                mem["mid"] = {"stored": stored, "structures": memory(server.url, st["id"])}
            if st["status"] in jobs.FINISHED and not after:
                stop.set()
                after.append(snapshot(server.url))
                if profile:
                    mem["end"] = {"stored": stored, "structures": memory(server.url, st["id"])}
            if elapsed > LIMIT:
                raise KeyboardInterrupt

        outcome = crawl(our_settings(server.url, spec, workers, shards=shards), spec.seeds(), str(work), progress)
        calls1, cpu1, usec1 = after[0] if after else snapshot(server.url)
        stop.set()
    # The snapshots' own INFO calls are not the crawl's.
    calls = Counter({k: v - calls0.get(k, 0) for k, v in calls1.items() if v - calls0.get(k, 0) > 0})
    calls["info"] = max(0, calls["info"] - 2)
    counters = outcome.status["counters"]
    pages = int(counters.get("stored", 0))
    if pages == 0:
        raise RuntimeError(f"the crawl stored nothing: {outcome.status}")
    total = sum(calls.values())
    usec = Counter({k: v - usec0.get(k, 0) for k, v in usec1.items() if v - usec0.get(k, 0) > 0})
    return {"pages": pages, "fetched": int(counters.get("fetched", 0)), "elapsed_s": outcome.elapsed,
            "commands": total, "commands_per_page": total / pages, "redis_cpu_s": cpu1 - cpu0,
            "redis_cpu_ms_per_page": (cpu1 - cpu0) / pages * 1000,
            "per_page": {k: v / pages for k, v in calls.most_common()},
            "usec_per_page": {k: v / pages for k, v in usec.most_common()}, "memory": mem}


def print_breakdown(where: Counter[str], pages: int) -> None:
    """Commands per page by script (each with its commands) and by command outside scripts."""
    scripts: dict[str, Counter[str]] = {}
    for k, v in where.items():
        head, sep, cmd = k.partition(": ")
        if sep:
            scripts.setdefault(head, Counter())[cmd] += v
    print(f"MONITOR over a crawl of {pages} pages, commands per page:")
    rows = [(sum(c.values()), name, c) for name, c in scripts.items()]
    rows += [(v, k, Counter()) for k, v in where.items() if ": " not in k]
    for total, name, c in sorted(rows, key=lambda r: -r[0]):
        if total / pages < 0.05:
            continue
        inner = ", ".join(f"{cmd} {n / pages:.1f}" for cmd, n in c.most_common(8))
        print(f"  {name:<34} {total / pages:6.2f}  {inner}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--pages", type=int, default=800)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=1,
                    help="the job's shards (with CRAWLER_FRONTIER_SPLIT=1: the parts its frontier is split into)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--server", default="auto", choices=("auto", "nginx", "asyncio"))
    ap.add_argument("--no-memory", action="store_true", help="skip the extra run that reads memory per structure")
    ap.add_argument("--label", default="", help="a word for the results file name (before, after)")
    ap.add_argument("--monitor", action="store_true",
                    help="one more run with Redis MONITOR: commands per page by script and by command")
    args = ap.parse_args()
    probe = WebSpec(hosts=args.hosts, pages=args.pages)
    spec = WebSpec(hosts=args.hosts, pages=args.pages, port=free_port(probe.ips))
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)  # nginx's worker may run as another user
        info = write(spec, root)
        kind = args.server if args.server != "auto" else "nginx" if nginx_binary() else "asyncio"
        print(f"web: {info['hosts']} hosts x {args.pages} pages, {len(reachable(spec))} reachable; server: {kind}; "
              f"{args.runs} runs, {args.workers} workers, defaults", flush=True)
        server = make_server(kind, root, spec.ips, spec.port).start()
        try:
            for i in range(args.runs):
                with tempfile.TemporaryDirectory(prefix="bench-redis-cost-") as work:
                    r = run_once(spec, args.workers, Path(work), shards=args.shards)
                runs.append(r)
                print(f"  run {i + 1}: {r['pages']} pages, {r['commands_per_page']:.1f} commands/page, "
                      f"{r['redis_cpu_ms_per_page']:.3f} Redis CPU ms/page", flush=True)
            profile: dict[str, Any] = {}
            if not args.no_memory:
                with tempfile.TemporaryDirectory(prefix="bench-redis-cost-") as work:
                    profile = run_once(spec, args.workers, Path(work), profile=True, shards=args.shards)["memory"]
                profile["index"] = index_profile()
            where: Counter[str] = Counter()
            monitored = 0
            if args.monitor:
                with tempfile.TemporaryDirectory(prefix="bench-redis-cost-") as work:
                    monitored = run_once(spec, args.workers, Path(work), monitor=where, shards=args.shards)["pages"]
        finally:
            server.stop()
            server.close()
    med_cmds = statistics.median(r["commands_per_page"] for r in runs) if runs else 0.0
    med_cpu = statistics.median(r["redis_cpu_ms_per_page"] for r in runs) if runs else 0.0
    names = {k for r in runs for k in r["per_page"]}
    per_cmd = {k: statistics.median(r["per_page"].get(k, 0.0) for r in runs) for k in names}
    if runs:
        print(f"\nmedian of {args.runs}: {med_cmds:.1f} Redis commands/page (target <= {TARGET_COMMANDS:.0f}), "
              f"{med_cpu:.3f} ms Redis CPU/page (target <= {TARGET_CPU_MS})")
        print("top commands per page:")
        for name, v in sorted(per_cmd.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"  {name:<20} {v:7.2f}")
        usec_names = {k for r in runs for k in r["usec_per_page"]}
        per_usec = {k: statistics.median(r["usec_per_page"].get(k, 0.0) for r in runs) for k in usec_names}
        # What commands cost the Redis process runs on top of this: reading requests, writing replies.
        print(f"microseconds per page spent in commands ({sum(per_usec.get(k, 0.0) for k in per_cmd):.0f} in all, "
              "a script's including those it runs):")
        for name, v in sorted(per_usec.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"  {name:<20} {v:7.1f}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"redis_cost{'-' + args.label if args.label else ''}-{stamp}.json"
    out.write_text(json.dumps({
        "web": {**info, "server": kind}, "workers": args.workers, "runs": runs, "memory": profile,
        "median": {"commands_per_page": med_cmds, "redis_cpu_ms_per_page": med_cpu,
                   "per_page": dict(sorted(per_cmd.items(), key=lambda kv: -kv[1]))},
        "targets": {"commands_per_page": [TARGET_COMMANDS, med_cmds <= TARGET_COMMANDS],
                    "redis_cpu_ms_per_page": [TARGET_CPU_MS, med_cpu <= TARGET_CPU_MS]},
        "monitor": {"pages": monitored, "per_page": {k: v / monitored for k, v in where.most_common()}}
        if monitored else {},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "command": " ".join(["python -m bench.redis_cost", *sys.argv[1:]]),
    }, indent=2))
    for when in ("mid", "end"):
        m = profile.get(when)
        if m:
            print(f"memory {when}-crawl ({m['stored']} pages stored; a run apart):")
            for kind, e in sorted(m["structures"].items(), key=lambda kv: -kv[1]["bytes"]):
                print(f"  {kind:<40} {e['bytes'] / 1e6:8.2f} MB in {e['keys']:6.0f} keys, "
                      f"{e['bytes_per_unit']:7.1f} B per unit ({e['units']:.0f})")
    for name, v in profile.get("index", {}).items():
        print(f"  {name:<40} {v:7.1f}")
    if monitored:
        print_breakdown(where, monitored)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
