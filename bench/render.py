"""Rendering cost (part of ``make bench``): a crawl of a site whose pages build their links with
scripts (4 hosts on 127.0.6.1-4, 600 pages unless told; by default app shells built by Vue's production
build and an app script, external files, from fetched JSON: ``--site inline`` for inline
scripts), with ``--render always``: one shard worker and
one render worker (one Chromium, ``render_pages`` pages at once), as ``crawler crawl`` runs them.
Reports rendered pages/s and the render worker's memory (the worker and its browser's processes)
sampled every 2 s, and judges whether it stays flat across the run (the browser is restarted
every ``render_recycle_pages`` pages): flat when the median PSS over the last tenth of the samples
taken after the first restart is within FLAT (1.25x) of the median over their first tenth. Exits
non-zero only when fewer than 99% of the pages were rendered. Needs Debian's chromium.

    python -m bench.render [--pages 600] [--hosts 4] [--site external|inline] [--recycle N]

``make bench`` runs the default, 600 pages (about 6 minutes here): enough for a few browser
restarts at the default recycling. The figures in docs/benchmarks.md are of 2,000 pages and more
(about 20 minutes each): ``python -m bench.render --pages 2000 [--recycle N]``. Besides the summary,
the result file has the median PSS and the pages/s of each tenth of the run, to see whether
memory stays flat and speed holds over it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil

from bench.peers import RESULTS
from crawler import jobs
from crawler.config.settings import Settings
from crawler.embedded import crawl
from crawler.render.browser import RenderUnavailable, chromium_path

FANOUT = 4
VUE = Path(__file__).resolve().parent.parent / "crawler" / "testweb" / "static" / "vue.global.prod.js"
# The counters of pages the browser did not render (wholly); the other render_* ones count its requests.
RENDER_ERRORS = frozenset({"render_timeout", "render_failed", "render_crashed", "render_body_lost", "render_too_large",
                           "render_unavailable"})
FLAT = 1.25  # the last tenth's median memory over the first tenth's, at most, for "flat"
TEXT = "Rendered text that a script writes into the page for the crawler to read. " * 20


def page(n: int, per_host: int) -> bytes:
    kids = [k for k in range(FANOUT * n + 1, FANOUT * n + FANOUT + 1) if k < per_host]
    js = "".join(f"a=document.createElement('a');a.href='/p{k}';a.textContent='p{k}';m.appendChild(a);" for k in kids)
    return (f"<!DOCTYPE html><html><head><title>p{n}</title></head><body><main id=m></main><script>"
            f"var m=document.getElementById('m'),a;{js}"
            f"var t=document.createElement('p');t.textContent={TEXT!r};m.appendChild(t);</script></body></html>"
            ).encode()


# The external site: every page the same shell; Vue's production build and the app's script are
# external files, and the app builds the page's links and text from its JSON, as app shells do.
SHELL = (b'<!DOCTYPE html><html><head><meta charset="utf-8"><title>app</title></head><body><div id="app"></div>'
         b'<script src="/static/vue.global.prod.js"></script><script src="/static/app.js"></script></body></html>')
APP = b"""Vue.createApp({setup() {
  const links = Vue.ref([]), text = Vue.ref("");
  fetch("/api" + location.pathname + ".json").then(r => r.json())
    .then(d => { links.value = d.kids; text.value = d.text; });
  return {links, text};
}, template: '<main><p>{{ text }}</p><a v-for="k in links" :key="k" :href="k">{{ k }}</a></main>'}).mount("#app");"""


def kids(n: int, per_host: int) -> list[str]:
    return [f"/p{k}" for k in range(FANOUT * n + 1, FANOUT * n + FANOUT + 1) if k < per_host]


def answer(path: str, per_host: int, external: bool) -> tuple[str, bytes] | None:
    """(content type, body) of a path of the bench site, or None."""
    if external and path == "/static/vue.global.prod.js":
        return "application/javascript", VUE.read_bytes()
    if external and path == "/static/app.js":
        return "application/javascript", APP
    if external and path.startswith("/api/p") and path.endswith(".json"):
        n = path[len("/api/p"):-len(".json")]
        if n.isdigit() and int(n) < per_host:
            return "application/json", json.dumps({"kids": kids(int(n), per_host), "text": TEXT}).encode()
    if path.startswith("/p") and path[2:].isdigit() and int(path[2:]) < per_host:
        return "text/html; charset=utf-8", SHELL if external else page(int(path[2:]), per_host)
    return None


def serve(ips: list[str], per_host: int, external: bool = False) -> tuple[int, list[ThreadingHTTPServer]]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            got = answer(self.path.split("?", 1)[0], per_host, external)
            ctype, body = got if got is not None else ("text/html; charset=utf-8", b"not found")
            self.send_response(200 if got is not None else 404)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    first = ThreadingHTTPServer((ips[0], 0), Handler)
    port = first.server_address[1]
    servers = [first, *(ThreadingHTTPServer((ip, port), Handler) for ip in ips[1:])]
    for s in servers:
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
    return port, servers


def render_worker_memory() -> tuple[int, int]:
    """Bytes the render worker and its browser's processes hold now, (PSS, RSS), summed over the
    processes; (0, 0) if it is not up. PSS splits pages the processes share (Chromium's renderers
    share most of theirs), so its sum is what the worker costs the machine; summed RSS counts
    shared pages once per process and overstates it."""
    for p in psutil.Process().children(recursive=True):
        try:
            if "celery" in " ".join(p.cmdline()) and "render" in p.cmdline():
                procs = [p, *p.children(recursive=True)]
                pss = rss = 0
                for q in procs:
                    try:
                        info = q.memory_full_info()
                    except psutil.Error:
                        continue
                    pss += info.pss
                    rss += info.rss
                return pss, rss
        except psutil.Error:
            pass
    return 0, 0


def _tenths(values: list[int]) -> list[list[int]]:
    """``values`` cut into ten consecutive parts (fewer when there are fewer than ten), none empty."""
    n = min(10, len(values))
    return [values[i * len(values) // n:(i + 1) * len(values) // n] for i in range(n)]


def _rates(samples: list[tuple[float, int, int, int]]) -> list[float]:
    """Rendered pages/s over each tenth of the run's samples."""
    out = []
    for part in _tenths(list(range(len(samples)))):
        (t0, n0, *_), (t1, n1, *_) = samples[max(0, part[0] - 1)], samples[part[-1]]
        out.append(round((n1 - n0) / (t1 - t0), 2) if t1 > t0 else 0.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=600,
                    help="pages to render (default 600; the documented figures: --pages 2000)")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--site", choices=("external", "inline"), default="external",
                    help="external: app-shell pages built by Vue's production build and an app script, both "
                         "external files, from fetched JSON (default); inline: pages built by an inline script")
    ap.add_argument("--recycle", type=int, default=None,
                    help="restart the browser after this many pages (default: the render_recycle_pages setting)")
    args = ap.parse_args()
    try:
        chromium_path()
    except RenderUnavailable as exc:
        print(f"bench.render: skipped: {exc}")
        return
    ips = [f"127.0.6.{i + 1}" for i in range(args.hosts)]
    per_host = args.pages // args.hosts
    port, servers = serve(ips, per_host, args.site == "external")
    samples: list[tuple[float, int, int, int]] = []  # (elapsed, rendered, pss, rss)
    last = [-10.0]

    def progress(st: dict[str, Any], elapsed: float) -> None:
        if elapsed - last[0] >= 2.0 or st["status"] in jobs.FINISHED:
            last[0] = elapsed
            samples.append((elapsed, st["counters"].get("rendered", 0), *render_worker_memory()))

    settings = Settings.from_env(render="always", shards=1, workers=1, allow_networks=[f"{ip}/32" for ip in ips],
                                 allow_domains=ips, task_events=False, render_recycle_pages=args.recycle)
    with tempfile.TemporaryDirectory(prefix="bench-render-") as tmp:
        started = time.monotonic()
        outcome = crawl(settings, [f"http://{ip}:{port}/p0" for ip in ips], tmp, progress, poll=0.5)
        wall = time.monotonic() - started
    for s in servers:
        s.shutdown()
    c = outcome.status["counters"]
    rendered = c.get("rendered", 0)
    live = [pss for _, _, pss, _ in samples if pss]
    live_rss = [rss for _, _, _, rss in samples if rss]
    # Before the first restart the browser only grows: flat is judged over what follows it.
    steady = [pss for _, n, pss, _ in samples if pss and n >= settings.render_recycle_pages] or live
    tenth = max(1, len(steady) // 10)
    head = statistics.median(steady[:tenth]) if steady else 0
    tail = statistics.median(steady[-tenth:]) if steady else 0
    flat = bool(steady) and tail <= FLAT * head
    result = {
        "pss_by_tenth_mb": [round(statistics.median(part) / 2**20) for part in _tenths(live)],
        "pages_per_s_by_tenth": _rates(samples),
        "pages": args.pages, "hosts": args.hosts, "site": args.site, "rendered": rendered, "stored": c.get("stored", 0),
        "render_errors": {k: v for k, v in c.items() if k in RENDER_ERRORS},
        "render_counters": {k: v for k, v in c.items() if k.startswith("render_")},
        "wall_s": wall, "rendered_per_s": rendered / wall,
        "render_worker_peak_pss_mb": max(live, default=0) / 2**20,
        "render_worker_peak_rss_sum_mb": max(live_rss, default=0) / 2**20,
        "pss_first_tenth_mb": head / 2**20, "pss_last_tenth_mb": tail / 2**20,
        "pss_after_first_recycle": len(steady) < len(live), "pss_flat": flat, "flat_ratio_max": FLAT,
        "render_pages": settings.render_pages, "recycle_after": settings.render_recycle_pages,
        "samples": samples,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"render-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"render ({args.site} scripts): {rendered} pages rendered of {c.get('stored', 0)} stored in {wall:.0f}s: "
          f"{result['rendered_per_s']:.1f} pages/s with {settings.render_pages} pages at once")
    print(f"render worker memory (worker + browser, PSS): peak {result['render_worker_peak_pss_mb']:.0f} MB "
          f"(summed RSS {result['render_worker_peak_rss_sum_mb']:.0f} MB); median "
          f"{result['pss_first_tenth_mb']:.0f} MB over the first tenth of the run"
          f"{' after the first restart' if result['pss_after_first_recycle'] else ''}, "
          f"{result['pss_last_tenth_mb']:.0f} MB over the last: "
          f"{'flat' if flat else 'NOT flat'} (last/first within {FLAT}x)")
    print(f"over the run, by tenths: PSS {result['pss_by_tenth_mb']} MB; pages/s {result['pages_per_s_by_tenth']}")
    print(f"written: {out}")
    if rendered < args.pages * 0.99:
        sys.exit(f"bench.render: only {rendered} of {args.pages} pages rendered")


if __name__ == "__main__":
    main()
