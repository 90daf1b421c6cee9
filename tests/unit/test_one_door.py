"""One door: every operation the command line offers on the cluster, the REST API serves too, and
the reverse (both call crawler.control; the import contract in pyproject.toml keeps them from
reaching past it). Commands that act on this machine only (a crawl, a server, the settings table)
say so."""

from __future__ import annotations

import argparse

from crawler.cli import build_parser
from crawler.web.api import ENDPOINTS

# Routes of the console app beside the endpoint table, and the operation each is a face of.
STREAMS = {"/api/jobs/{job}/events": "logs", "/metrics": "metrics"}


def _leaves(p: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    out = {}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                inner = _leaves(sub, (*prefix, name))
                out.update(inner or {" ".join((*prefix, name)): sub})
    return out


def test_the_cli_and_the_api_offer_the_same_operations() -> None:
    commands = _leaves(build_parser())
    cli_ops = {name: sub.get_default("operation") for name, sub in commands.items()}
    assert None not in cli_ops.values(), [n for n, op in cli_ops.items() if op is None]
    local = sorted(n for n, op in cli_ops.items() if op == "")
    assert local == ["crawl", "demo", "settings", "web"]
    # A command is the face of the operation it is named after.
    assert all(op == name for name, op in cli_ops.items() if op)
    api_ops = {e.operation for e in ENDPOINTS} | set(STREAMS.values())
    assert "" not in api_ops, [e.path for e in ENDPOINTS if not e.operation]
    assert sorted(api_ops) == sorted(op for op in cli_ops.values() if op)
