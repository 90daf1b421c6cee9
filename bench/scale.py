"""Cost growth (``make bench-scale``): one crawl of the 200,000-page web of ``bench.scaleweb`` by two
worker processes, as ``crawler crawl`` runs it (one seed, the default settings but for the
options below), sampled every 10 s: pages crawled, pages/s and CPU per page over the interval
(the workers and Redis), Redis used memory, URLs queued in Redis and in the store, URLs seen, and
each worker's RSS. Writes bench/results/scale-<stamp>.json and .png (each series against pages
crawled) and prints the targets met and missed.

    python -m bench.scale [--pages 200000] [--hosts 200] [--big-hosts 6] [--big-pages 20000]
                          [--workers 2] [--per-host 12] [--queue-cap N] [--max-minutes 60] [--cluster]

``--per-host`` defaults to 12 and adaptive delays are off (``--autothrottle`` puts them back): the
last part of this crawl is the six big hosts alone, and at one request per host at a time, or
with delays that grow with the server's response time, its rate would measure politeness, not
cost (a run with the defaults fell from 150 to 55 pages/s once the small hosts were done); six
hosts at 12 each can fill the job's 64 requests in flight, as the many small hosts do early on
(at 8, the tail ran at 0.83x the first tenth's rate with CPU per page unchanged).

Redis bytes per queued URL and per seen URL, two ways. Every 60 s (and at the end) every key's
``MEMORY USAGE`` is summed by what the key is: host queues over the URLs they hold, the
seen-set (Bloom filter) over the URLs seen, the near-duplicate index over the pages stored.
And used memory is regressed (least squares) on the URLs queued in Redis and the URLs seen at
each sample, which counts whatever else grows with the crawl. A run with ``--queue-cap 0`` shows
what uncapped queues cost.

``--cluster`` puts the crawl's state on a private Redis Cluster of 3 masters (``--masters``) with a replica each
and its task queues on a private Redis of their own (a cluster cannot be Celery's broker), and
runs the same workers against both. Each master is sampled too (used memory, CPU seconds, keys,
commands served), and the result says each one's Redis CPU ms and commands per page and its
share of the keys and commands, and which master serves the job's slot (a job's keys share one
hash tag, so one master holds them all).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

import psutil
from redis import Redis

from bench.peers import RESULTS
from bench.scaleweb import ScaleSpec, reachable
from bench.server import free_port
from crawler import jobs
from crawler.config.secretbox import KEY_FILE_VAR, KEY_VAR, new_key
from crawler.config.settings import Settings
from crawler.embedded import STORE_ROOT_ENV, Outcome, Progress, WorkerProcesses, all_queues, crawl
from crawler.local.lifeline import PARENT_ENV
from crawler.local.redis_cluster import RedisCluster
from crawler.local.redis_server import RedisServer
from crawler.state import keys
from crawler.state.conn import connect

EVERY = 10.0
BREAKDOWN_EVERY = 60.0  # seconds between key-by-key accounts of Redis memory


def key_family(key: bytes) -> str:
    """What a key is, for the memory account: a job's keys by their name's first parts (a host
    queue is ``q``, the near-duplicate index's bands ``sh:#`` and records ``sh:d``), others by
    theirs, numbers elided."""
    k = key.decode(errors="replace")
    m = re.match(r"c:\{[^}]*\}:(.*)", k)
    if m:
        parts = m.group(1).split(":")
        name = ":".join(parts[:2]) if parts[0] in ("sh", "bf") else parts[0]
        return "job:" + re.sub(r"\d+", "#", name)
    return re.sub(r"\d+", "#", ":".join(k.split(":")[:2]))[:40]


def memory_by_family(redis: Redis) -> dict[str, dict[str, int]]:
    """Bytes and keys per key family (MEMORY USAGE of every key, every element counted)."""
    out: dict[str, dict[str, int]] = {}
    batch: list[bytes] = []

    def flush() -> None:
        pipe = redis.pipeline(transaction=False)
        for key in batch:
            pipe.memory_usage(key, samples=0)
        for key, used in zip(batch, pipe.execute(), strict=True):
            fam = out.setdefault(key_family(key), {"bytes": 0, "keys": 0})
            fam["bytes"] += int(used or 0)
            fam["keys"] += 1
        batch.clear()

    for key in redis.scan_iter(count=1000):
        batch.append(key)
        if len(batch) >= 500:
            flush()
    flush()
    return out


class Sampler:
    def __init__(self, redis_url: str, job_pages: int) -> None:
        self.redis = connect(redis_url)
        self.redis_pid = int(self.redis.info("server")["process_id"])
        self.samples: list[dict[str, Any]] = []
        self.last = 0.0
        self.last_breakdown = -BREAKDOWN_EVERY
        self.total = job_pages

    def redis_cost(self) -> tuple[float, int, dict[str, Any]]:
        """Redis CPU seconds and used bytes so far, and whatever else a sample should say of Redis."""
        r = psutil.Process(self.redis_pid).cpu_times()
        return r.user + r.system, int(self.redis.info("memory")["used_memory"]), {}

    def breakdown(self) -> dict[str, dict[str, int]]:
        return memory_by_family(self.redis)

    def _workers(self) -> list[psutil.Process]:
        out = []
        for p in psutil.Process().children(recursive=True):
            try:
                if "celery" in " ".join(p.cmdline()):
                    out.append(p)
            except psutil.NoSuchProcess:
                pass
        return out

    def __call__(self, st: dict[str, Any], elapsed: float) -> None:
        if self.samples and elapsed - self.last < EVERY and st["status"] not in jobs.FINISHED:
            return
        self.last = elapsed
        workers = self._workers()
        cpu = 0.0
        rss = []
        for p in workers:
            try:
                t = p.cpu_times()
                cpu += t.user + t.system
                rss.append(p.memory_info().rss)
            except psutil.NoSuchProcess:
                pass
        redis_cpu, redis_used, more = self.redis_cost()
        c = st["counters"]
        self.samples.append({
            "t": elapsed, "stored": c.get("stored", 0), "fetched": c.get("fetched", 0),
            "cpu_s": cpu + redis_cpu, "redis_used": redis_used,
            "queued_redis": st.get("queued_in_redis", 0), "queued_store": st.get("queued_in_store", 0),
            "seen": c.get("admitted", 0), "worker_rss": rss, **more,
        })
        if elapsed - self.last_breakdown >= BREAKDOWN_EVERY or st["status"] in jobs.FINISHED:
            self.last_breakdown = elapsed
            self.samples[-1]["memory"] = self.breakdown()
        s = self.samples[-1]
        print(f"  {elapsed:6.0f}s stored {s['stored']:7d}  redis {s['redis_used'] / 2**20:7.1f} MB  queued "
              f"{s['queued_redis']:6d} redis / {s['queued_store']:6d} store  rss "
              f"{' '.join(f'{x / 2**20:.0f}' for x in rss)} MB", flush=True)


# What the sampler itself sends a node: not the crawl's commands. (Its key-by-key account's SCANs
# are counted: the crawler scans too, and a few a minute are lost among its thousands a second.)
OWN_COMMANDS = ("cmdstat_info", "cmdstat_dbsize", "cmdstat_memory")


def node_stats(client: Redis) -> dict[str, float]:
    """One Redis node's used memory, CPU seconds, keys and commands served since it started."""
    pipe = client.pipeline(transaction=False)
    pipe.info("memory")
    pipe.info("cpu")
    pipe.info("commandstats")
    pipe.dbsize()
    memory, cpu, commands, dbsize = pipe.execute()
    calls = sum(int(v["calls"]) for k, v in commands.items() if not k.startswith(OWN_COMMANDS))
    return {"used": int(memory["used_memory"]), "cpu_s": float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]),
            "keys": int(dbsize), "calls": calls}


def per_page(first: dict[str, float], last: dict[str, float], pages: int) -> dict[str, float]:
    """A node's Redis CPU ms and commands per page between two of its samples, and where it ended."""
    n = max(1, pages)
    return {"cpu_ms_per_page": (last["cpu_s"] - first["cpu_s"]) / n * 1000,
            "commands_per_page": (last["calls"] - first["calls"]) / n,
            "used_mb": last["used"] / 2**20, "keys": last["keys"]}


def node_costs(first: dict[str, dict[str, float]], last: dict[str, dict[str, float]],
               pages: int) -> dict[str, dict[str, float]]:
    """Each master's cost per page, and its share of the masters' keys (at the end), commands and
    CPU (over the run): how evenly the cluster carries the crawl."""
    out = {node: per_page(first[node], last[node], pages) for node in last if node in first}

    keys_all = sum(c["keys"] for c in out.values())
    calls_all = sum(c["commands_per_page"] for c in out.values())
    cpu_all = sum(c["cpu_ms_per_page"] for c in out.values())
    for c in out.values():
        c["key_share"] = c["keys"] / keys_all if keys_all else 0.0
        c["command_share"] = c["commands_per_page"] / calls_all if calls_all else 0.0
        c["cpu_share"] = c["cpu_ms_per_page"] / cpu_all if cpu_all else 0.0
    return out


class ClusterSampler(Sampler):
    """The crawl's state on a Redis Cluster, its queues on a broker apart: every master, every
    replica and the broker sampled by what each says of itself (INFO), not by process."""

    def __init__(self, cluster: RedisCluster, broker_url: str, job_pages: int) -> None:
        self.samples = []
        self.last = 0.0
        self.last_breakdown = -BREAKDOWN_EVERY
        self.total = job_pages
        # Ports fixed at the start: a failover would move a master's slots, and this bench makes none.
        self.masters = {str(p): c for p, c in cluster.node_clients().items()}
        self.replicas = {str(p): Redis(port=p, socket_timeout=5) for p in cluster.live_ports()
                         if str(p) not in self.masters}
        self.broker = connect(broker_url)
        self.baseline = self.stats()

    def stats(self) -> dict[str, dict[str, dict[str, float]]]:
        return {"nodes": {p: node_stats(c) for p, c in self.masters.items()},
                "replicas": {p: node_stats(c) for p, c in self.replicas.items()},
                "broker": {"broker": node_stats(self.broker)}}

    def redis_cost(self) -> tuple[float, int, dict[str, Any]]:
        now = self.stats()
        cpu = sum(n["cpu_s"] for group in now.values() for n in group.values())
        # A replica's copy is not more memory the crawl needs: masters and broker only.
        used = sum(n["used"] for n in now["nodes"].values()) + now["broker"]["broker"]["used"]
        return cpu, int(used), now

    def breakdown(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for client in [*self.masters.values(), self.broker]:
            for fam, v in memory_by_family(client).items():
                into = out.setdefault(fam, {"bytes": 0, "keys": 0})
                into["bytes"] += v["bytes"]
                into["keys"] += v["keys"]
        return out

    def costs(self) -> dict[str, Any]:
        """Per master, per replica and for the broker: cost per page over the whole run."""
        last = self.samples[-1]
        pages = last["fetched"]
        return {"masters": node_costs(self.baseline["nodes"], last["nodes"], pages),
                "replicas": {p: per_page(self.baseline["replicas"][p], v, pages)
                             for p, v in last["replicas"].items() if p in self.baseline["replicas"]},
                "broker": per_page(self.baseline["broker"]["broker"], last["broker"]["broker"], pages)}

    def close(self) -> None:
        for c in [*self.masters.values(), *self.replicas.values(), self.broker]:
            c.close()


def _tail_logs(log_dir: Path, lines: int = 40) -> None:
    """The workers' logs, before the temporary directory that holds them goes."""
    for log in sorted(log_dir.glob("worker-*")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        if text:
            print(f"--- {log.name} (last {len(text)} lines)\n" + "\n".join(text), file=sys.stderr)


def crawl_on_cluster(settings: Settings, seeds: list[str], out: Path, cluster: RedisCluster,
                     progress: Progress, poll: float = 1.0) -> Outcome:
    """One job to its end, as ``crawler.embedded.crawl`` runs it, but with the state and the
    broker apart: that one gives its workers the state Redis as their broker, which a cluster
    cannot be. Ctrl-C or the bench's deadline (KeyboardInterrupt from ``progress``) stops the job."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    settings = settings.replace(store=f"sqlite:///{out / 'crawl.db'}",
                                warc_dir=str(out / "warc") if settings.warc else "")
    client = connect(settings.redis_url)
    job_id = jobs.submit(client, settings, seeds)
    print(f"job {job_id}: its slot ({keys.meta(job_id)}) is on master 127.0.0.1:"
          f"{cluster.master_for_key(keys.meta(job_id))}", flush=True)
    env = {**os.environ, "CRAWLER_REDIS_URL": settings.redis_url, "CRAWLER_BROKER_URL": settings.broker_url,
           "CRAWLER_TASK_EVENTS": "0", PARENT_ENV: str(os.getpid()), STORE_ROOT_ENV: str(out)}
    if not (env.get(KEY_VAR) or env.get(KEY_FILE_VAR)):
        env[KEY_VAR] = new_key()
    workers = WorkerProcesses([all_queues(settings.shards)] * settings.workers, env, str(out / "logs"))
    started = time.monotonic()
    try:
        while True:
            st = jobs.status(client, job_id)
            progress(st, time.monotonic() - started)
            if st["status"] in jobs.FINISHED:
                return Outcome(job_id, st, time.monotonic() - started)
            workers.check()
            time.sleep(poll)
    except KeyboardInterrupt:
        jobs.stop(client, job_id)
        workers.stop()
        return Outcome(job_id, jobs.status(client, job_id), time.monotonic() - started, interrupted=True)
    except Exception:
        workers.stop()
        _tail_logs(out / "logs")
        raise
    finally:
        workers.stop()
        client.close()


def intervals(samples: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per interval between samples: pages/s and CPU ms per page, at the pages crawled by its end."""
    out = []
    for a, b in itertools.pairwise(samples):
        pages = b["fetched"] - a["fetched"]
        if pages <= 0 or b["t"] <= a["t"]:
            continue
        out.append({"pages": b["fetched"], "pages_per_s": pages / (b["t"] - a["t"]),
                    "cpu_ms_per_page": (b["cpu_s"] - a["cpu_s"]) / pages * 1000})
    return out


def tenth_rates(samples: list[dict[str, Any]]) -> tuple[float, float]:
    """pages/s over the first and the last tenth of the pages crawled."""
    total = samples[-1]["fetched"]

    def rate(lo: float, hi: float) -> float:
        inside = [s for s in samples if lo <= s["fetched"] <= hi]
        if len(inside) < 2:
            return 0.0
        a, b = inside[0], inside[-1]
        return float((b["fetched"] - a["fetched"]) / max(1e-9, b["t"] - a["t"]))

    return rate(0, total * 0.1 + 1), rate(total * 0.9, total)


def per_url_bytes(samples: list[dict[str, Any]]) -> dict[str, float]:
    """Least squares of Redis used memory on (queued in Redis, seen)."""
    import numpy as np

    rows = [s for s in samples if s["seen"]]
    if len(rows) < 3:
        return {}
    x = np.array([[1.0, s["queued_redis"], s["seen"]] for s in rows])
    y = np.array([float(s["redis_used"]) for s in rows])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return {"base_bytes": float(coef[0]), "bytes_per_queued_url": float(coef[1]), "bytes_per_seen_url": float(coef[2]),
            "peak_used_bytes": float(y.max()), "peak_queued_redis": float(max(s["queued_redis"] for s in rows))}


def accounted(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Redis bytes per queued URL (host queues at the sample with the most queued), per seen URL
    (the seen-set, Bloom or exact, at the last sample) and per stored page (the near-duplicate
    index), from the key-by-key accounts, with the largest families at the end."""
    counted = [s for s in samples if "memory" in s]
    if not counted:
        return {}

    def fam(s: dict[str, Any], *names: str) -> int:
        return sum(v["bytes"] for k, v in s["memory"].items() if k in names or any(
            k.startswith(n + ":") for n in names))

    busiest = max(counted, key=lambda s: s["queued_redis"])
    last = counted[-1]
    return {
        "bytes_per_queued_url": fam(busiest, "job:q") / max(1, busiest["queued_redis"]),
        "queued_at": busiest["queued_redis"],
        "seen_set_bytes": fam(last, "job:bf", "job:bloom", "job:seen"), "seen": last["seen"],
        "bytes_per_seen_url": fam(last, "job:bf", "job:bloom", "job:seen") / max(1, last["seen"]),
        "near_dup_bytes": fam(last, "job:sh", "job:shseq"), "stored": last["stored"],
        "near_dup_bytes_per_page": fam(last, "job:sh", "job:shseq") / max(1, last["stored"]),
        "largest_at_end": dict(sorted(last["memory"].items(), key=lambda kv: -kv[1]["bytes"])[:8]),
    }


def chart(samples: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    iv = intervals(samples)
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    pages = [s["fetched"] / 1000 for s in samples]
    ax[0][0].plot([p["pages"] / 1000 for p in iv], [p["pages_per_s"] for p in iv])
    ax[0][0].set_title("pages/s (10 s intervals)")
    ax[0][1].plot([p["pages"] / 1000 for p in iv], [p["cpu_ms_per_page"] for p in iv])
    ax[0][1].set_title("CPU ms per page (workers + Redis)")
    ax[1][0].plot(pages, [s["redis_used"] / 2**20 for s in samples], label="Redis used MB")
    ax[1][0].plot(pages, [s["queued_redis"] / 1000 for s in samples], label="queued in Redis (k URLs)")
    ax[1][0].plot(pages, [s["queued_store"] / 1000 for s in samples], label="queued in store (k URLs)")
    ax[1][0].legend()
    ax[1][0].set_title("Redis memory and queues")
    n = max((len(s["worker_rss"]) for s in samples), default=0)
    for k in range(n):
        ax[1][1].plot(pages, [s["worker_rss"][k] / 2**20 if k < len(s["worker_rss"]) else None for s in samples],
                      label=f"worker {k}")
    ax[1][1].set_title("worker RSS MB")
    ax[1][1].legend()
    for a in ax.flat:
        a.set_xlabel("pages crawled (thousands)")
        a.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def run_crawl(args: argparse.Namespace, spec: ScaleSpec,
              out: Path) -> tuple[Outcome, float, Sampler, Settings, dict[str, Any]]:
    """The crawl, sampled, on a private Redis (or, ``--cluster``, a private cluster and broker),
    stopped at the deadline: its outcome, wall time, sampler, settings and where the cluster put it."""
    extra = {} if args.queue_cap is None else {"host_queue_cap": args.queue_cap}
    common: dict[str, Any] = dict(workers=args.workers, shards=args.shards, frontier_split=args.frontier_split,
                                  per_host=args.per_host,
                                  autothrottle=args.autothrottle, allow_networks=[f"{ip}/32" for ip in spec.ips],
                                  allow_domains=list(spec.ips), task_events=False, **extra)
    deadline = time.monotonic() + args.max_minutes * 60
    with ExitStack() as stack:
        cluster: RedisCluster | None = None
        if args.cluster:
            cluster = stack.enter_context(RedisCluster(masters=args.masters, replicas=1))
            broker = stack.enter_context(RedisServer())
            print(f"redis cluster: masters {cluster.master_ports()}, broker {broker.port}", flush=True)
            # jobs.submit in this process publishes to the broker the workers read, not to the cluster.
            os.environ["CRAWLER_BROKER_URL"] = broker.url
            settings = Settings.from_env(redis_url=cluster.url, broker_url=broker.url, **common)
            on_cluster = ClusterSampler(cluster, broker.url, spec.total)
            stack.callback(on_cluster.close)
            sampler: Sampler = on_cluster

            def go(p: Progress) -> Outcome:
                assert cluster is not None
                return crawl_on_cluster(settings, [spec.seed()], out, cluster, p)
        else:
            redis_server = stack.enter_context(RedisServer())
            settings = Settings.from_env(redis_url=redis_server.url, **common)
            sampler = Sampler(redis_server.url, spec.total)

            def go(p: Progress) -> Outcome:
                return crawl(settings, [spec.seed()], str(out), p, poll=1.0)

        def progress(st: dict[str, Any], elapsed: float) -> None:
            sampler(st, elapsed)
            if time.monotonic() > deadline:
                raise KeyboardInterrupt

        started = time.monotonic()
        outcome = go(progress)
        wall = time.monotonic() - started
        info: dict[str, Any] = {}
        if cluster is not None and isinstance(sampler, ClusterSampler):
            info = {"master_ports": cluster.master_ports(), "job": outcome.job_id,
                    "job_master": cluster.master_for_key(keys.meta(outcome.job_id)), **sampler.costs()}
    return outcome, wall, sampler, settings, info


def print_cluster(info: dict[str, Any]) -> None:
    print(f"cluster: job {info['job']}'s slot on master {info['job_master']}; per page:")
    for port, c in info["masters"].items():
        mark = "  <- the job's slot" if int(port) == info["job_master"] else ""
        print(f"  master {port}: {c['cpu_ms_per_page']:.2f} CPU ms, {c['commands_per_page']:.1f} commands "
              f"({c['command_share']:.0%}), {c['keys']:,} keys ({c['key_share']:.0%}), {c['used_mb']:.1f} MB{mark}")
    for port, c in info["replicas"].items():
        print(f"  replica {port}: {c['cpu_ms_per_page']:.2f} CPU ms, {c['used_mb']:.1f} MB")
    b = info["broker"]
    print(f"  broker: {b['cpu_ms_per_page']:.2f} CPU ms, {b['commands_per_page']:.1f} commands, {b['used_mb']:.1f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=200_000)
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--big-hosts", type=int, default=6)
    ap.add_argument("--big-pages", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--per-host", type=int, default=12)
    ap.add_argument("--queue-cap", type=int, default=None, help="host_queue_cap (default: the crawler's)")
    ap.add_argument("--autothrottle", action="store_true", help="adaptive per-host delays, as the crawler's default")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--frontier-split", action=argparse.BooleanOptionalAction, default=None,
                    help="the job's frontier in a part per shard (frontier_split), spread over a cluster's masters "
                         "(default: the crawler's, on for --cluster with --shards above 1)")
    ap.add_argument("--max-minutes", type=float, default=60.0)
    ap.add_argument("--masters", type=int, default=3, help="--cluster's masters (a replica each)")
    ap.add_argument("--cluster", action="store_true",
                    help="the state on a private Redis Cluster (--masters, a replica each), the queues apart")
    args = ap.parse_args()

    probe = ScaleSpec(args.hosts, args.big_hosts, args.big_pages, args.pages)
    spec = ScaleSpec(args.hosts, args.big_hosts, args.big_pages, args.pages, port=free_port(probe.ips))
    want = reachable(spec)
    print(f"web: {spec.hosts} hosts ({spec.big_hosts} of {spec.big_pages:,} pages), {spec.total:,} pages, "
          f"{len(want):,} reachable from {spec.seed()}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        log = Path(tmp) / "access.log"
        server = subprocess.Popen([sys.executable, "-m", "bench.scaleweb", str(spec.port), str(log), str(spec.hosts),
                                   str(spec.big_hosts), str(spec.big_pages), str(spec.pages)])
        time.sleep(2.0)
        try:
            outcome, wall, sampler, settings, cluster_info = run_crawl(args, spec, Path(tmp) / "out")
        finally:
            server.terminate()
            server.wait(60)
        hits = [line.split(" ", 3) for line in log.read_text().splitlines()]
    samples = sampler.samples
    ok = {(h[2], h[3]) for h in hits if h[1] == "200"}
    first, last = tenth_rates(samples)
    rss_after = [sum(s["worker_rss"]) for s in samples[len(samples) // 5:]]
    result = {
        "spec": asdict(spec), "reachable": len(want), "responses": len(hits), "unique_ok": len(ok),
        "complete": len(ok) / len(want), "duplicate_fetches": len(hits) - len({(h[2], h[3]) for h in hits}),
        "wall_s": wall, "status": outcome.status["status"],
        "settings": {"per_host": args.per_host, "autothrottle": args.autothrottle,
                     "host_queue_cap": settings.host_queue_cap},
        "first_tenth_pages_per_s": first, "last_tenth_pages_per_s": last,
        "last_over_first": last / first if first else 0.0,
        "worker_rss_after_warmup_mb": [min(rss_after) / 2**20, max(rss_after) / 2**20] if rss_after else [],
        "redis": per_url_bytes(samples), "redis_accounted": accounted(samples), "samples": samples,
    }
    if cluster_info:
        result["cluster"] = cluster_info
    out = RESULTS / f"scale-{stamp}.json"
    out.write_text(json.dumps(result, indent=1))
    chart(samples, RESULTS / f"scale-{stamp}.png")
    print(f"\n{len(ok):,} of {len(want):,} pages ({result['complete']:.1%}) in {wall:.0f}s, "
          f"{result['duplicate_fetches']} duplicate fetches")
    print(f"pages/s: first tenth {first:.0f}, last tenth {last:.0f} ({result['last_over_first']:.2f}x; want >= 0.9)")
    if rss_after:
        print(f"worker RSS after warm-up (sum): {min(rss_after) / 2**20:.0f}-{max(rss_after) / 2**20:.0f} MB")
    rb = result["redis"]
    if rb:
        print(f"Redis: peak {rb['peak_used_bytes'] / 2**20:.1f} MB; {rb['bytes_per_queued_url']:.0f} B per queued URL, "
              f"{rb['bytes_per_seen_url']:.1f} B per seen URL (least squares over the samples)")
    acc = result["redis_accounted"]
    if acc:
        print(f"Redis, key by key: host queues {acc['bytes_per_queued_url']:.0f} B per queued URL (at "
              f"{acc['queued_at']:,} queued); seen-set {acc['seen_set_bytes'] / 2**20:.1f} MB for {acc['seen']:,} "
              f"URLs ({acc['bytes_per_seen_url']:.1f} B each); near-duplicate index "
              f"{acc['near_dup_bytes_per_page']:.0f} B per stored page")
        print("largest at the end: " + ", ".join(f"{k} {v['bytes'] / 2**20:.1f} MB ({v['keys']} keys)"
                                                  for k, v in acc["largest_at_end"].items()))
    if cluster_info:
        print_cluster(cluster_info)
    print(f"written: {out}, {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
