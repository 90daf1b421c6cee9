"""The cluster as a whole: ``nodes`` (every worker) and ``web`` (the console and REST API)."""

from __future__ import annotations

import argparse
import json
import sys

from crawler import control
from crawler.cli.common import LOCAL, Subparsers, command, redis_client
from crawler.errors import ConfigError


def cmd_nodes(args: argparse.Namespace) -> int:
    client = redis_client(args.redis_url)
    rows = control.nodes_status(client)  # with taken_over: its shards now served by backups
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
    for line in control.shards_overview(client, rows):
        print(line)
    return 0


def cmd_web(args: argparse.Namespace) -> int:
    # Lazy: the web server's modules load only for this command.
    from crawler.web.server import listen_auth, serve

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port must be 1..65535, got {args.port}")
    auth = listen_auth(args.host)
    print(f"console on http://{args.host}:{args.port}/ ({'auth required' if auth else 'no auth: loopback only'})",
          file=sys.stderr)
    serve(redis_client(args.redis_url), auth, args.host, args.port)
    return 0


def cmd_metrics(args: argparse.Namespace) -> int:
    sys.stdout.write(control.metrics(redis_client(args.redis_url)))
    return 0


def register(sub: Subparsers) -> None:
    command(sub, "metrics", cmd_metrics, "every job's and node's figures as Prometheus text (what /metrics serves)")
    command(sub, "nodes", cmd_nodes, "every worker: pid, shards, last heartbeat, pages fetched, pages/s, state",
            json=True)
    w = command(sub, "web", cmd_web, "the console and REST API in a browser (auth from CRAWLER_WEB_TOKEN, or "
                                     "CRAWLER_WEB_USER and CRAWLER_WEB_PASSWORD; required off loopback)",
                operation=LOCAL)
    w.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    w.add_argument("--port", type=int, default=8089, help="port (default 8089)")
