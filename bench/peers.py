"""Peer benchmark (``make bench``): our crawler against Scrapy and scrapy-redis on one synthetic
web, in one invocation, runs alternating, medians reported.

    python -m bench.peers [--hosts 20] [--pages 500] [--runs 3] [--server auto|nginx|asyncio]
                          [--systems ours-1,ours-2,ours-2-off,distributed-2,scrapy,scrapy-redis-2]

Every system crawls the same web from the same seed (one URL, as users start a crawl;
``--all-seeds`` for every host's home page). ``ours-2``, the headline, runs our defaults
(robots.txt, adaptive delay, one request per host at a time, near-duplicates, WARC);
``ours-2-off`` and the peers run without those (no delay, no robots.txt, 16 requests per host,
64 in flight). The server logs every request, so
responses, completeness and duplicate fetches are counted the same way for every system. A
benchmark, not a test: prints a table, writes JSON and a PNG chart under bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from bench.server import StaticServer, free_port, make_server, nginx_binary
from bench.web import WebSpec, identity, page_path, reachable, write
from crawler import jobs
from crawler.config.settings import Settings
from crawler.embedded import WorkerProcesses, crawl
from crawler.local.redis_server import RedisServer
from crawler.state.conn import connect

RESULTS = Path(__file__).parent / "results"
SYSTEMS = ("ours-1", "ours-2", "ours-2-off", "distributed-2", "scrapy", "scrapy-redis-2")
LIMIT = 900.0  # seconds any one run may take before it is abandoned


@dataclass
class Usage:
    """CPU seconds and peak RSS of a set of processes, read from the kernel while they live."""

    cpu: dict[int, float] = field(default_factory=dict)
    peak_rss: dict[int, int] = field(default_factory=dict)

    def sample(self, pids: list[int]) -> None:
        for pid in pids:
            try:
                p = psutil.Process(pid)
                t = p.cpu_times()
                self.cpu[pid] = t.user + t.system
                self.peak_rss[pid] = _vm_hwm(pid)
            except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
                pass

    @property
    def total(self) -> float:
        return sum(self.cpu.values())


def _vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _redis_cpu(url: str) -> float:
    info = connect(url).info("cpu")
    return float(info["used_cpu_user"] + info["used_cpu_sys"])


def _celery_pids() -> list[int]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "celery" in " ".join(p.cmdline()):
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


@dataclass
class Outcome:
    crawler: Usage
    redis_cpu: float = 0.0
    stored: int | None = None  # rows our store holds, as a cross-check of the server's count
    fetch_tasks: int | None = None  # ours: fetch tasks run (pages per task is what per-task costs divide by)


def our_settings(redis_url: str, spec: WebSpec, workers: int, features_off: bool = False, **extra: Any) -> Settings:
    """The headline: our defaults, as ``crawler crawl`` runs them (robots.txt, adaptive delay, one
    request per host at a time, near-duplicate hashing, WARC). ``features_off``: Scrapy's
    equivalents instead (no robots.txt, no AutoThrottle, no delay, 16 per host and 64 in all; pages
    stored as rows, no WARC, no near-duplicate hashing), the configuration the peers run."""
    off = dict(per_host=16, concurrency=64, obey_robots=False, autothrottle=False, near_duplicates=False,
               warc=False) if features_off else {}
    # The same scope as the peers' allowed_domains: every host of the web (one seed names one).
    return Settings.from_env(redis_url=redis_url, workers=workers, allow_networks=[f"{ip}/32" for ip in spec.ips],
                             allow_domains=list(spec.ips), task_events=False, **{"shards": 1, **off, **extra})


def run_ours(spec: WebSpec, workers: int, work: Path, features_off: bool = False,
             settings_of: Callable[..., Settings] | None = None) -> Outcome:
    """``settings_of``: our_settings's stand-in for another web (bench/polite.py)."""
    usage = Usage()
    settings_of = settings_of or our_settings
    with RedisServer() as server:
        cpu0 = _redis_cpu(server.url)
        redis_cpu = [0.0]

        def progress(st: dict[str, Any], elapsed: float) -> None:
            usage.sample(_celery_pids())
            if st["status"] in jobs.FINISHED:
                redis_cpu[0] = _redis_cpu(server.url) - cpu0
            if elapsed > LIMIT:
                raise KeyboardInterrupt

        outcome = crawl(settings_of(server.url, spec, workers, features_off), spec.seeds(), str(work), progress,
                        poll=0.1)
    counters = outcome.status["counters"]
    return Outcome(usage, redis_cpu[0], counters.get("stored"), counters.get("fetch_tasks"))


def run_distributed(spec: WebSpec, shards: int, work: Path) -> Outcome:
    """``celery -A crawler worker -Q shard-N`` per shard on one Redis, the job submitted to it."""
    usage = Usage()
    with RedisServer() as server:
        cpu0 = _redis_cpu(server.url)
        settings = our_settings(server.url, spec, shards, shards=shards).replace(store=f"sqlite:///{work / 'crawl.db'}")
        client = connect(server.url)
        job_id = jobs.submit(client, settings, spec.seeds())
        env = {**os.environ, "CRAWLER_REDIS_URL": server.url, "CRAWLER_TASK_EVENTS": "0"}
        (work / "logs").mkdir(parents=True, exist_ok=True)
        workers = WorkerProcesses([[f"shard-{i}"] for i in range(shards)], env, str(work / "logs"))
        try:
            deadline = time.monotonic() + LIMIT
            while time.monotonic() < deadline:
                usage.sample([p.pid for p in workers.procs])
                st = jobs.status(client, job_id)
                if st["status"] in jobs.FINISHED:
                    break
                workers.check()
                time.sleep(0.1)
            redis_cpu = _redis_cpu(server.url) - cpu0
        finally:
            workers.stop()
    return Outcome(usage, redis_cpu, st["counters"].get("stored"), st["counters"].get("fetch_tasks"))


def run_scrapy(spec: WebSpec, processes: int, work: Path, extra: tuple[str, ...] = ()) -> Outcome:
    """Scrapy in one process, or scrapy-redis in several sharing one Redis; ``extra``: more
    arguments for ``bench.scrapy_peer`` (``--polite``)."""
    server = RedisServer().start() if processes > 1 else None
    try:
        cmd = [sys.executable, "-m", "bench.scrapy_peer", "--out", str(work), "--allowed", ",".join(spec.ips),
               *extra]
        cpu0 = 0.0
        if server is not None:
            client = connect(server.url)
            client.lpush("bench:start_urls", *spec.seeds())
            cpu0 = _redis_cpu(server.url)
            cmd += ["--redis", server.url]
        else:
            seeds = work / "seeds.txt"
            seeds.write_text("\n".join(spec.seeds()))
            cmd += ["--seeds", str(seeds)]
        logs = [open(work / f"scrapy-{i}.log", "wb") for i in range(processes)]  # noqa: SIM115
        procs = [subprocess.Popen(cmd, stdout=logs[i], stderr=subprocess.STDOUT) for i in range(processes)]
        for p in procs:
            p.wait(LIMIT)
        for f in logs:
            f.close()
        redis_cpu = _redis_cpu(server.url) - cpu0 if server is not None else 0.0
    finally:
        if server is not None:
            server.stop()
    usage = Usage()
    for f in work.glob("stats-*.json"):
        s = json.loads(f.read_text())
        usage.cpu[s["pid"]] = s["cpu"]
        usage.peak_rss[s["pid"]] = s["peak_rss"]
    if len(usage.cpu) != processes:
        raise RuntimeError(f"scrapy peer wrote {len(usage.cpu)} of {processes} stats files; see {work}")
    return Outcome(usage, redis_cpu)


RUNNERS: dict[str, Callable[[WebSpec, Path], Outcome]] = {
    "ours-1": lambda spec, work: run_ours(spec, 1, work),
    "ours-2": lambda spec, work: run_ours(spec, 2, work),
    "ours-2-off": lambda spec, work: run_ours(spec, 2, work, features_off=True),
    "distributed-2": lambda spec, work: run_distributed(spec, 2, work),
    "scrapy": lambda spec, work: run_scrapy(spec, 1, work),
    "scrapy-redis-2": lambda spec, work: run_scrapy(spec, 2, work),
}


def measure(system: str, spec: WebSpec, root: Path, kind: str, want: set[tuple[str, str]]) -> dict[str, Any]:
    server: StaticServer = make_server(kind, root, spec.ips, spec.port).start()
    srv = Usage()
    srv.sample(server.pids())
    srv_cpu0 = srv.total
    with tempfile.TemporaryDirectory(prefix=f"bench-{system}-") as tmp:
        start = time.time()
        outcome = RUNNERS[system](spec, Path(tmp))
        srv.sample(server.pids())
        server.stop()
    hits = [r for r in server.requests() if r.at >= start - 0.01]
    server.close()
    if not hits:
        raise RuntimeError(f"{system}: the server saw no request")
    wall = max(r.at for r in hits) - start
    per_page = Counter(identity(f"http://{r.ip}{r.target}") for r in hits)
    ok = {identity(f"http://{r.ip}{r.target}") for r in hits if r.status == 200}
    n = len(hits)
    crawler_cpu = outcome.crawler.total
    return {
        "system": system, "wall_s": wall, "responses": n, "unique_pages": len(ok),
        "pages_per_s": n / wall, "unique_pages_per_s": len(ok) / wall,
        "crawler_cpu_s": crawler_cpu, "redis_cpu_s": outcome.redis_cpu, "server_cpu_s": srv.total - srv_cpu0,
        "cpu_ms_per_page": (crawler_cpu + outcome.redis_cpu) / n * 1000,
        "crawler_cpu_ms_per_page": crawler_cpu / n * 1000, "redis_cpu_ms_per_page": outcome.redis_cpu / n * 1000,
        "server_cpu_ms_per_page": (srv.total - srv_cpu0) / n * 1000,
        "processes": len(outcome.crawler.cpu), "peak_rss_mb": max(outcome.crawler.peak_rss.values()) / 2**20,
        "peak_rss_mb_each": sorted(v / 2**20 for v in outcome.crawler.peak_rss.values()),
        "completeness": len(ok & want) / len(want), "duplicate_fetches": n - len(per_page),
        "not_found": sum(1 for r in hits if r.status == 404), "stored_rows": outcome.stored,
        "pages_per_fetch_task": n / outcome.fetch_tasks if outcome.fetch_tasks else None,
        "missing_sample": sorted(f"http://{h}{p}" for h, p in want - ok)[:5],
    }


def floor(spec: WebSpec, root: Path, kind: str) -> dict[str, Any]:
    server = make_server(kind, root, spec.ips, spec.port).start()
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            f.write("\n".join(spec.origin(h) + page_path(i) for h in range(spec.hosts) for i in range(spec.pages)))
            f.flush()
            out = subprocess.run([sys.executable, "-m", "bench.floor", f.name], capture_output=True, text=True,
                                 check=True, timeout=LIMIT)
    finally:
        server.stop()
        server.close()
    return json.loads(out.stdout)


METRICS = ("wall_s", "responses", "unique_pages", "pages_per_s", "unique_pages_per_s", "crawler_cpu_s",
           "redis_cpu_s", "server_cpu_s", "cpu_ms_per_page", "crawler_cpu_ms_per_page", "redis_cpu_ms_per_page",
           "server_cpu_ms_per_page", "peak_rss_mb", "completeness", "duplicate_fetches", "not_found")


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: statistics.median(r[k] for r in runs) for k in METRICS}


def targets(med: dict[str, dict[str, Any]], fl: dict[str, Any]) -> list[tuple[str, float, str, bool]]:
    """(what, measured, wanted, met) for each target of the issue that this run can check."""
    out: list[tuple[str, float, str, bool]] = []
    ours = med.get("ours-2")
    floor_ms = fl["fetch_cpu_ms"] + fl["parse_cpu_ms"] if fl else None
    if ours is None:
        return out
    if "scrapy" in med:
        sc = med["scrapy"]
        out.append(("pages/s ours-2 / scrapy", ours["pages_per_s"] / sc["pages_per_s"], ">= 3.0",
                    ours["pages_per_s"] >= 3.0 * sc["pages_per_s"]))
        out.append(("CPU/page ours-2 / scrapy", ours["cpu_ms_per_page"] / sc["cpu_ms_per_page"], "<= 0.45",
                    ours["cpu_ms_per_page"] <= 0.45 * sc["cpu_ms_per_page"]))
        out.append(("duplicate fetches ours-2 - scrapy", ours["duplicate_fetches"] - sc["duplicate_fetches"], "<= 0",
                    ours["duplicate_fetches"] <= sc["duplicate_fetches"]))
        out.append(("peak RSS per process ours-2 / scrapy", ours["peak_rss_mb"] / sc["peak_rss_mb"], "<= 1.0",
                    ours["peak_rss_mb"] <= sc["peak_rss_mb"]))
    if "ours-2-off" in med:
        off = med["ours-2-off"]
        # The ratio of the medians; the median of the runs' own ratios is printed beside it (pairs).
        out.append(("CPU/page ours-2 (defaults) / ours-2-off", ours["cpu_ms_per_page"] / off["cpu_ms_per_page"],
                    "<= 1.3", ours["cpu_ms_per_page"] <= 1.3 * off["cpu_ms_per_page"]))
    if "scrapy-redis-2" in med:
        sr = med["scrapy-redis-2"]
        out.append(("pages/s ours-2 / scrapy-redis-2", ours["pages_per_s"] / sr["pages_per_s"], ">= 2.0",
                    ours["pages_per_s"] >= 2.0 * sr["pages_per_s"]))
    if "distributed-2" in med:
        d = med["distributed-2"]
        # Separate shard workers on one Redis must not be the slow path.
        out.append(("pages/s distributed-2 / ours-2", d["pages_per_s"] / ours["pages_per_s"], ">= 0.95",
                    d["pages_per_s"] >= 0.95 * ours["pages_per_s"]))
    out.append(("completeness ours-2", ours["completeness"], "= 1.0", ours["completeness"] >= 1.0))
    if floor_ms:
        out.append(("CPU/page ours-2 / floor", ours["cpu_ms_per_page"] / floor_ms, "<= 1.5",
                    ours["cpu_ms_per_page"] <= 1.5 * floor_ms))
    return out


def paired(runs: dict[str, list[dict[str, Any]]], a: str, b: str) -> list[float]:
    """CPU per page of ``a`` over ``b``, run by run: runs alternate, so each pair met the same
    minute of this shared machine, which the ratio of the medians does not promise."""
    if a not in runs or b not in runs:
        return []
    return [x["cpu_ms_per_page"] / y["cpu_ms_per_page"] for x, y in zip(runs[a], runs[b], strict=False)]


def table(med: dict[str, dict[str, Any]], fl: dict[str, Any]) -> str:
    head = (f"{'system':<15} {'wall s':>7} {'pages/s':>8} {'uniq/s':>7} {'CPU ms/pg':>9} {'(crawler':>9} "
            f"{'redis)':>7} {'server':>7} {'RSS MB':>7} {'complete':>8} {'dups':>5} {'404':>4}")
    lines = [head]
    for name, m in med.items():
        lines.append(f"{name:<15} {m['wall_s']:>7.1f} {m['pages_per_s']:>8.0f} {m['unique_pages_per_s']:>7.0f} "
                     f"{m['cpu_ms_per_page']:>9.2f} {m['crawler_cpu_ms_per_page']:>9.2f} "
                     f"{m['redis_cpu_ms_per_page']:>7.2f} {m['server_cpu_ms_per_page']:>7.2f} {m['peak_rss_mb']:>7.0f} "
                     f"{m['completeness']:>8.1%} {m['duplicate_fetches']:>5.0f} {m['not_found']:>4.0f}")
    if fl:
        others = ", ".join(f"{k} {v['cpu_ms']:.2f}" for k, v in fl.get("clients", {}).items())
        lines.append(f"floor: the cheapest client, {fl.get('client', 'httpx')}, {fl['fetch_cpu_ms']:.2f} ms/page "
                     f"({fl['concurrency']} in flight; {others}) + lxml {fl['parse_cpu_ms']:.2f} ms/page = "
                     f"{fl['fetch_cpu_ms'] + fl['parse_cpu_ms']:.2f} ms/page")
    return "\n".join(lines)


def ratios(med: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for peer in ("scrapy", "scrapy-redis-2"):
        if peer not in med:
            continue
        for ours in ("ours-1", "ours-2", "ours-2-off", "distributed-2"):
            if ours in med:
                p, o = med[peer], med[ours]
                out[f"{ours}/{peer}"] = {"pages_per_s": o["pages_per_s"] / p["pages_per_s"],
                                         "cpu_ms_per_page": o["cpu_ms_per_page"] / p["cpu_ms_per_page"],
                                         "peak_rss_mb": o["peak_rss_mb"] / p["peak_rss_mb"]}
    return out


def chart(med: dict[str, dict[str, Any]], fl: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(med)
    colors = ["#2b6cb0" if not n.startswith("scrapy") else "#c05621" for n in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=100)
    a.bar(names, [med[n]["pages_per_s"] for n in names], color=colors)
    a.set_title("pages/s (higher is better)")
    crawler = [med[n]["crawler_cpu_ms_per_page"] for n in names]
    b.bar(names, crawler, color=colors, label="crawler")
    b.bar(names, [med[n]["redis_cpu_ms_per_page"] for n in names], bottom=crawler, color="#a0aec0", label="Redis")
    if fl:
        b.axhline(fl["fetch_cpu_ms"] + fl["parse_cpu_ms"], color="black", linestyle="--", linewidth=1,
                  label="floor (cheapest client + lxml)")
    b.set_title("CPU ms per page (lower is better)")
    b.legend(fontsize=7)
    for ax in (a, b):
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--pages", type=int, default=500)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--server", default="auto", choices=("auto", "nginx", "asyncio"))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--no-floor", action="store_true")
    ap.add_argument("--all-seeds", action="store_true", help="seed every host (default: one URL, as users do)")
    args = ap.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        ap.error(f"unknown systems {sorted(unknown)}; known: {', '.join(SYSTEMS)}")
    probe = WebSpec(hosts=args.hosts, pages=args.pages)
    spec = WebSpec(hosts=args.hosts, pages=args.pages, port=free_port(probe.ips), all_seeds=args.all_seeds)
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)  # nginx's worker may run as another user
        info = write(spec, root)
        want = reachable(spec)
        kind = args.server if args.server != "auto" else "nginx" if nginx_binary() else "asyncio"
        print(f"web: {info['hosts']} hosts x {args.pages} pages, {info['bytes'] / info['pages'] / 1000:.1f} KB/page, "
              f"{len(want)} reachable; server: {kind}; {args.runs} runs of {', '.join(systems)}", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
        for i in range(args.runs):
            # Alternate: a slow minute on this noisy machine hits every system, not one.
            order = systems if i % 2 == 0 else systems[::-1]
            for s in order:
                r = measure(s, spec, root, kind, want)
                runs[s].append(r)
                per_task = f"  {r['pages_per_fetch_task']:.1f} pages/fetch task" if r["pages_per_fetch_task"] else ""
                print(f"  run {i + 1} {s:<15} {r['pages_per_s']:6.0f} pages/s  {r['cpu_ms_per_page']:6.2f} CPU ms/page"
                      f"  complete {r['completeness']:.1%}  dups {r['duplicate_fetches']}{per_task}", flush=True)
        fl = {} if args.no_floor else floor(spec, root, kind)
    med = {s: medians(rs) for s, rs in runs.items()}
    print(f"\nmedian of {args.runs} (CPU per response: crawler processes + Redis; the server apart)")
    print(table(med, fl))
    rat = ratios(med)
    for k, v in rat.items():
        print(f"  {k:<32} pages/s x{v['pages_per_s']:.2f}   CPU/page x{v['cpu_ms_per_page']:.2f}   "
              f"peak RSS x{v['peak_rss_mb']:.2f}")
    pairs = paired(runs, "ours-2", "ours-2-off")
    if pairs:
        print(f"  CPU/page ours-2 / ours-2-off, run by run: {', '.join(f'{x:.2f}' for x in pairs)} "
              f"(median {statistics.median(pairs):.2f}); pages per fetch task "
              + ", ".join(f"{s} {statistics.median(r['pages_per_fetch_task'] for r in runs[s]):.1f}"
                          for s in ("ours-2", "ours-2-off")))
    checks = targets(med, fl)
    for what, value, want_s, met in checks:
        print(f"  target {what:<38} {value:8.2f} (want {want_s}) {'met' if met else 'MISSED'}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"peers-{stamp}.json"
    out.write_text(json.dumps({
        "web": {**info, "reachable": len(want), "server": kind}, "runs": runs, "median": med, "floor": fl,
        "ratios": rat, "defaults_over_off_by_run": pairs,
        "targets": [dict(zip(("what", "value", "want", "met"), t, strict=True)) for t in checks],
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "settings": asdict(our_settings("", spec, 2)), "settings_off": asdict(our_settings("", spec, 2, True)),
    }, indent=2))
    png = out.with_suffix(".png")
    try:
        chart(med, fl, png)
        print(f"written: {out}, {png}")
    except ImportError:
        print(f"written: {out} (no chart: matplotlib is not installed; pip install -e '.[bench]')")


if __name__ == "__main__":
    main()
