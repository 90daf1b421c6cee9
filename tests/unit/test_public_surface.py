"""What users type and import, pinned, so that moving modules between packages breaks none of
it: the spider API (``from crawler.spiders import ...``, as the docs and examples write it), the
Celery app and the task names on the wire (workers of two versions share queues), the console's
factory, and the command's entry points."""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

from tests.conftest import ROOT

SPIDER_API = ["DropItem", "Follow", "Headers", "LoginFailed", "Page", "Request", "Session", "Spider", "form_request"]
TASKS = ["crawler.cycle_tick", "crawler.dedup", "crawler.fetch", "crawler.parse", "crawler.refill", "crawler.render",
         "crawler.store"]


def test_the_spider_api_is_importable_as_documented() -> None:
    spiders = importlib.import_module("crawler.spiders")
    assert sorted(spiders.__all__) == SPIDER_API
    for name in SPIDER_API:
        assert getattr(spiders, name) is not None
    from crawler.spiders.session import LoginFailed  # the docs' sessions page imports it from there

    assert LoginFailed is spiders.LoginFailed


@pytest.mark.parametrize("module, names", [
    ("crawler.web", ["create_app"]),
    ("crawler.cli", ["main", "build_parser"]),
    ("crawler.store", ["open_store", "PageStore", "PageRecord", "JobDefinition"]),
    ("crawler.config.settings", ["Settings"]),
    ("crawler.errors", ["CrawlerError", "ConfigError", "JobNotFound", "BadURL", "StoreError"]),
])
def test_documented_names_stay_where_they_are(module: str, names: list[str]) -> None:
    got = importlib.import_module(module)
    assert [n for n in names if not hasattr(got, n)] == []


def test_the_celery_app_and_its_task_names() -> None:
    probe = ("import crawler; crawler.app.loader.import_default_modules(); "
             "print(sorted(n for n in crawler.app.tasks if n.startswith('crawler.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert eval(out.stdout) == TASKS


def test_the_command_is_installed_and_runs_as_a_module() -> None:
    [ep] = [e for e in entry_points(group="console_scripts") if e.name == "crawler"]
    assert ep.value == "crawler.cli:main"
    for module in ("crawler", "crawler.cli"):
        out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT,
                             timeout=60)
        assert out.returncode == 0 and "usage: crawler" in out.stdout, out.stderr
