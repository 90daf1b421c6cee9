"""The polite benchmark (``make bench``'s headline, issue 30): many hosts, one request in flight
per host, robots.txt obeyed, on both sides, from one seed URL.

    python -m bench.polite [--hosts 500] [--pages 40] [--runs 3] [--systems ours,scrapy]

A web of ``--hosts`` hosts (127.0.10.1, 127.0.10.2, ... 250 per /24, loopback only) x
``--pages`` pages of 20-60 KB of HTML with the link structure of ``bench/web.py`` (navigation,
next/previous, relative, root-relative and absolute links, ~3 links a page to other hosts,
duplicate hrefs, ``#fragment`` and ``utm_*`` variants, now and then a 404), text drawn from a
pool of paragraphs so that pages are not near-duplicates of each other; every host serves a
robots.txt (``Disallow: /private/``, which no link names). One asyncio server process serves every
address (``bench/server.py``), its CPU reported apart.

``ours`` is ``crawler crawl`` embedded with its defaults and two worker processes (robots.txt,
adaptive delay from 0, one request per host, 64 in flight per job, near-duplicates, WARC).
``scrapy`` is one Scrapy process with the same politeness (``bench/scrapy_peer.py --polite``:
CONCURRENT_REQUESTS=64, CONCURRENT_REQUESTS_PER_DOMAIN=1, ROBOTSTXT_OBEY, DOWNLOAD_DELAY=0 and
AutoThrottle from a start delay of 0 with target concurrency 1, its counterpart of our adaptive
delay). ``scrapy-nothrottle`` (not run by default) is the same without AutoThrottle.

Pages are the server's responses other than robots.txt; CPU per page is the crawler's processes
(our workers and Redis; the Scrapy process), the server apart. Runs alternate; medians reported;
JSON and a PNG chart go to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import peers
from bench.peers import Outcome, Usage, our_settings, run_ours, run_scrapy
from bench.server import make_server
from bench.web import WORDS, WebSpec, identity, reachable
from bench.web import write as web_write

RESULTS = Path(__file__).parent / "results"
ROBOTS = b"User-agent: *\nDisallow: /private/\n"
PER_NET = 250
SYSTEMS = ("ours", "scrapy", "scrapy-nothrottle")
DEFAULT_SYSTEMS = ("ours", "scrapy")
PARAGRAPHS = 6000  # in the pool pages draw from: two 40 KB pages share about 1 paragraph in 100


@dataclass(frozen=True)
class PoliteSpec(WebSpec):
    """bench/web.py's web spread over many /24s: host h on 127.0.(10 + h // 250).(1 + h % 250)."""

    hosts: int = 500
    pages: int = 40
    min_size: int = 20_000
    max_size: int = 60_000

    def ip(self, host: int) -> str:
        return f"127.0.{10 + host // PER_NET}.{1 + host % PER_NET}"

    @property
    def networks(self) -> list[str]:
        return [f"127.0.{10 + n}.0/24" for n in range((self.hosts + PER_NET - 1) // PER_NET)]


def _pool(seed: int) -> list[str]:
    rng = random.Random(f"{seed}:pool")
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 90))) for _ in range(PARAGRAPHS)]


def write(spec: PoliteSpec, root: Path) -> dict[str, int]:
    return web_write(spec, root, _pool(spec.seed), ROBOTS)


def _scope(spec: PoliteSpec, settings_of: Callable[..., Any]) -> Callable[..., Any]:
    """our_settings for this web: its /24s as the allowed networks (500 /32s work too, slower to
    check), every host's address in scope."""
    def settings(redis_url: str, _spec: WebSpec, workers: int, features_off: bool = False, **extra: Any) -> Any:
        return settings_of(redis_url, spec, workers, features_off, **extra).replace(allow_networks=spec.networks)
    return settings


def run(system: str, spec: PoliteSpec, work: Path) -> Outcome:
    if system == "ours":
        return run_ours(spec, 2, work, settings_of=_scope(spec, our_settings))
    extra = ("--polite",) + (("--no-throttle",) if system == "scrapy-nothrottle" else ())
    return run_scrapy(spec, 1, work, extra)


def slow_hosts(spec: PoliteSpec, count: int) -> list[str]:
    """The addresses of ``count`` hosts spread over the web, never the seed's (host 0)."""
    step = spec.hosts / max(1, count)
    return sorted({spec.ip(min(spec.hosts - 1, int(k * step + step / 2) or 1)) for k in range(count)})


def measure(system: str, spec: PoliteSpec, root: Path, want: set[tuple[str, str]],
            slow: tuple[float, list[str]] | None = None) -> dict[str, Any]:
    server = make_server("asyncio", root, spec.ips, spec.port, slow).start()
    srv = Usage()
    srv.sample(server.pids())
    srv_cpu0 = srv.total
    with tempfile.TemporaryDirectory(prefix=f"bench-polite-{system}-") as tmp:
        start = time.time()
        outcome = run(system, spec, Path(tmp))
        srv.sample(server.pids())
        server.stop()
    hits = [r for r in server.requests() if r.at >= start - 0.01]
    server.close()
    pages = [r for r in hits if r.target != "/robots.txt"]
    if not pages:
        raise RuntimeError(f"{system}: the server saw no page request")
    wall = max(r.at for r in hits) - start
    n = len(pages)
    per_page = Counter(identity(f"http://{r.ip}{r.target}") for r in pages)
    ok = {identity(f"http://{r.ip}{r.target}") for r in pages if r.status == 200}
    cpu = outcome.crawler.total
    # With slow servers the crawl ends with theirs, one late answer after another: what they
    # cost the rest shows in how soon the other hosts' pages are all fetched.
    quick = [r for r in pages if not slow or r.ip not in slow[1]]
    quick_wall = max(r.at for r in quick) - start if quick else wall
    return {
        "quick_hosts_wall_s": quick_wall, "quick_pages_per_s": len(quick) / quick_wall if quick_wall > 0 else 0.0,
        "system": system, "wall_s": wall, "pages": n, "unique_pages": len(ok),
        "robots_fetches": len(hits) - n, "pages_per_s": n / wall, "unique_pages_per_s": len(ok) / wall,
        "crawler_cpu_s": cpu, "redis_cpu_s": outcome.redis_cpu, "server_cpu_s": srv.total - srv_cpu0,
        "cpu_ms_per_page": (cpu + outcome.redis_cpu) / n * 1000, "crawler_cpu_ms_per_page": cpu / n * 1000,
        "redis_cpu_ms_per_page": outcome.redis_cpu / n * 1000,
        "server_cpu_ms_per_page": (srv.total - srv_cpu0) / n * 1000, "processes": len(outcome.crawler.cpu),
        "peak_rss_mb": max(outcome.crawler.peak_rss.values()) / 2**20,
        "completeness": len(ok & want) / len(want), "duplicate_fetches": n - len(per_page),
        "not_found": sum(1 for r in pages if r.status == 404), "stored_rows": outcome.stored,
    }


METRICS = ("wall_s", "quick_hosts_wall_s", "quick_pages_per_s", "pages", "unique_pages", "robots_fetches",
           "pages_per_s", "unique_pages_per_s",
           "crawler_cpu_s", "redis_cpu_s", "server_cpu_s", "cpu_ms_per_page", "crawler_cpu_ms_per_page",
           "redis_cpu_ms_per_page", "server_cpu_ms_per_page", "peak_rss_mb", "completeness", "duplicate_fetches",
           "not_found")
TARGETS = (("pages_per_s", ">=", 4.0), ("cpu_ms_per_page", "<=", 0.35))


def targets(med: dict[str, dict[str, Any]], runs: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each target of the issue: the ratio of the medians, and of each run's pair (run i of ours
    against run i of Scrapy, which ran next to it)."""
    if "ours" not in med or "scrapy" not in med:
        return []
    out = []
    for metric, sense, want in TARGETS:
        value = med["ours"][metric] / med["scrapy"][metric]
        pairs = [o[metric] / s[metric] for o, s in zip(runs["ours"], runs["scrapy"], strict=True)]
        met = value >= want if sense == ">=" else value <= want
        out.append({"what": f"{metric} ours / scrapy", "value": value, "pairs": pairs, "want": f"{sense} {want}",
                    "met": met})
    return out


def chart(med: dict[str, dict[str, Any]], spec: PoliteSpec, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(med)
    colors = ["#2b6cb0" if not n.startswith("scrapy") else "#c05621" for n in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.4), dpi=100)
    a.bar(names, [med[n]["pages_per_s"] for n in names], color=colors)
    a.set_title("pages/s (higher is better)")
    crawler = [med[n]["crawler_cpu_ms_per_page"] for n in names]
    b.bar(names, crawler, color=colors, label="crawler")
    b.bar(names, [med[n]["redis_cpu_ms_per_page"] for n in names], bottom=crawler, color="#a0aec0", label="Redis")
    b.set_title("CPU ms per page (lower is better)")
    b.legend(fontsize=7)
    fig.suptitle(f"{spec.hosts} hosts x {spec.pages} pages, 1 request in flight per host, robots.txt obeyed",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def report(spec: PoliteSpec, info: dict[str, int], want: int, runs: dict[str, list[dict[str, Any]]],
           out: Path) -> None:
    """Medians, targets, JSON and chart of the runs so far (written after every run, so a long
    benchmark cut short still leaves its figures)."""
    runs = {s: rs for s, rs in runs.items() if rs}
    done = min(len(rs) for rs in runs.values())
    med = {s: {k: statistics.median(r[k] for r in rs) for k in METRICS} for s, rs in runs.items()}
    print(f"\nmedian of {done} (pages: responses other than robots.txt; CPU: crawler processes + Redis)")
    for s, m in med.items():
        print(f"  {s:<18} {m['pages_per_s']:6.0f} pages/s  {m['cpu_ms_per_page']:6.2f} CPU ms/page  "
              f"wall {m['wall_s']:.0f} s  server {m['server_cpu_ms_per_page']:.2f} ms/page  "
              f"RSS {m['peak_rss_mb']:.0f} MB  complete {m['completeness']:.1%}  dups {m['duplicate_fetches']:.0f}"
              + (f"  other hosts done in {m['quick_hosts_wall_s']:.1f} s" if info.get("slow_hosts") else ""))
    checks = targets(med, {s: rs[:done] for s, rs in runs.items()})
    for c in checks:
        pairs = ", ".join(f"{p:.2f}" for p in c["pairs"])
        print(f"  target {c['what']:<28} {c['value']:.2f} (runs {pairs}; want {c['want']}) "
              f"{'met' if c['met'] else 'MISSED'}")
    out.write_text(json.dumps({
        "web": {**info, "reachable": want, "server": "asyncio", "networks": spec.networks},
        "runs": runs, "median": med, "targets": checks,
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "load": os.getloadavg()},
        "settings": asdict(_scope(spec, our_settings)("", spec, 2)),
    }, indent=2))
    try:
        chart(med, spec, out.with_suffix(".png"))
        print(f"written: {out}, {out.with_suffix('.png')}", flush=True)
    except ImportError:
        print(f"written: {out} (no chart: pip install -e '.[bench]')", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=500)
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS))
    ap.add_argument("--limit", type=float, default=3600.0, help="seconds one run may take (a loaded machine is slow)")
    ap.add_argument("--slow-hosts", type=int, default=0,
                    help="hosts, spread over the web, whose every answer waits --slow-seconds (a web of mixed servers)")
    ap.add_argument("--slow-seconds", type=float, default=2.0)
    args = ap.parse_args()
    peers.LIMIT = args.limit
    systems = [s for s in args.systems.split(",") if s]
    if set(systems) - set(SYSTEMS) or not 1 <= args.hosts <= 250 * 40:
        ap.error(f"systems: {', '.join(SYSTEMS)}; hosts: 1-10000")
    from bench.server import free_port

    probe = PoliteSpec(hosts=args.hosts, pages=args.pages)
    spec = PoliteSpec(hosts=args.hosts, pages=args.pages, port=free_port(probe.ips))
    with tempfile.TemporaryDirectory(prefix="bench-polite-web-") as tmp:
        root = Path(tmp)
        info = write(spec, root)
        want = reachable(spec)
        print(f"web: {info['hosts']} hosts x {args.pages} pages, {info['bytes'] / info['pages'] / 1000:.1f} KB/page, "
              f"{len(want)} reachable from one seed; {args.runs} runs of {', '.join(systems)}", flush=True)
        slow = (args.slow_seconds, slow_hosts(spec, args.slow_hosts)) if args.slow_hosts else None
        if slow:
            info = {**info, "slow_hosts": len(slow[1]), "slow_ms": int(slow[0] * 1000)}  # info holds ints
            print(f"{len(slow[1])} of the hosts answer {slow[0]} s late", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
        RESULTS.mkdir(exist_ok=True)
        label = f"slow{len(slow[1])}-" if slow else ""
        out = RESULTS / f"polite-{label}{time.strftime('%Y%m%d-%H%M%S')}.json"
        for i in range(args.runs):
            for s in systems if i % 2 == 0 else systems[::-1]:
                r = measure(s, spec, root, want, slow)
                runs[s].append(r)
                quick = f"  other hosts done in {r['quick_hosts_wall_s']:.1f} s" if slow else ""
                print(f"  run {i + 1} {s:<18} {r['pages_per_s']:6.0f} pages/s  {r['cpu_ms_per_page']:6.2f} CPU ms/page"
                      f"  ({r['crawler_cpu_ms_per_page']:.2f} + Redis {r['redis_cpu_ms_per_page']:.2f})"
                      f"  {r['wall_s']:.0f} s  complete {r['completeness']:.1%}  dups {r['duplicate_fetches']}{quick}",
                      flush=True)
            report(spec, info, len(want), runs, out)


if __name__ == "__main__":
    main()
