"""The domain imports without Celery (issue 14): checked in a fresh interpreter, since the test
process itself has long since imported Celery."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_PROBE = """
import json, sys
import {modules}
print(json.dumps(sorted(m for m in ("celery", "kombu", "httpx") if m in sys.modules)))
"""


def _loaded(*modules: str) -> list[str]:
    # CRAWLER_SHARDS=0 is an invalid setting: only the Celery app reads the environment on
    # import, so the domain must import cleanly with it.
    env = {**os.environ, "CRAWLER_SHARDS": "0"}
    out = subprocess.run([sys.executable, "-c", _PROBE.format(modules=", ".join(modules))], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded: list[str] = json.loads(out.stdout)
    return loaded


def test_urls_alone_loads_neither_celery_nor_httpx() -> None:
    assert _loaded("crawler.urls") == []


@pytest.mark.parametrize("modules", [
    ("crawler.urls", "crawler.frontier", "crawler.fetch", "crawler.parse", "crawler.store"),
    ("crawler.dedup", "crawler.jobs", "crawler.stages", "crawler.state.nodes", "crawler.local.lifeline"),
    ("crawler.cli",),
])
def test_the_domain_loads_no_celery(modules: tuple[str, ...]) -> None:
    assert {"celery", "kombu"}.isdisjoint(_loaded(*modules))


def test_the_celery_app_is_made_on_first_use() -> None:
    """``celery -A crawler`` asks for ``crawler.app``: it must be the app, not a module."""
    probe = ("import sys, crawler; assert 'celery' not in sys.modules; "
             "from celery import Celery; assert isinstance(crawler.app, Celery), crawler.app")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
