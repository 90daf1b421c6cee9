"""Finding a spider class by what the user typed, and the version a job records.

``--spider`` accepts ``package.module:Class``, ``path/to/file.py:Class`` (made absolute when the
job is submitted, so every worker on this machine finds the same file) or the name of an
installed spider: an entry point in the group ``crawler.spiders``, as a package declares in its
pyproject (``[project.entry-points."crawler.spiders"] docs = "mypkg.spiders:DocsSpider"``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from crawler.errors import ConfigError
from crawler.settings import Settings
from crawler.spiders.base import Spider

GROUP = "crawler.spiders"
_ARG = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


class SpiderUnavailable(ConfigError):
    """The spider cannot be loaded here (no such module, file, class or entry point; not a
    Spider; it raised on import or construction; another version). One line naming why."""


def installed() -> dict[str, str]:
    """Installed spiders: entry-point name -> ``module:Class``."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def target_of(ref: str) -> str:
    """The ``module:Class`` or ``/abs/file.py:Class`` that ``ref`` names (an entry point's name is
    looked up, a file path made absolute); SpiderUnavailable if it names nothing installed."""
    ref = ref.strip()
    if ":" not in ref:
        found = installed()
        if ref not in found:
            known = ", ".join(sorted(found)) or "none installed"
            raise SpiderUnavailable(f"no spider named {ref!r} (group {GROUP}: {known}); "
                                    "or give package.module:Class or path/to/file.py:Class")
        return found[ref]
    where, _, name = ref.rpartition(":")
    if _is_file(where):
        where = str(Path(where).expanduser().resolve())
    return f"{where}:{name}"


def _is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def load_class(target: str) -> type[Spider]:
    """The class ``target`` (``module:Class`` or ``/abs/file.py:Class``) names."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise SpiderUnavailable(f"spider {target!r}: give package.module:Class or path/to/file.py:Class")
    try:
        module = _import_file(where) if _is_file(where) else _import_module(where)
    except SpiderUnavailable:
        raise
    except Exception as exc:  # a spider's import may raise anything: it is the user's code
        raise SpiderUnavailable(f"spider {target!r}: cannot import {where!r}: "
                                f"{type(exc).__name__}: {exc}") from exc
    cls = getattr(module, name, None)
    if cls is None:
        raise SpiderUnavailable(f"spider {target!r}: {where!r} has no {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, Spider)):
        raise SpiderUnavailable(f"spider {target!r}: {name!r} is not a subclass of crawler.spiders.Spider")
    return cls


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # A spider module beside the user, as ``python -m`` would find it: the ``crawler`` and
        # ``celery`` commands do not put the working directory on the path themselves.
        cwd = os.getcwd()
        if exc.name != name.split(".")[0] or cwd in sys.path:
            raise
        sys.path.append(cwd)
        return importlib.import_module(name)


def _import_file(path: str) -> ModuleType:
    file = Path(path)
    if not file.is_file():
        raise SpiderUnavailable(f"spider file {path!r} does not exist on this machine")
    # A stable name per file, so two spiders named alike in different files do not collide and
    # a second load reuses the first.
    mod_name = "crawler_spider_" + hashlib.sha1(str(file).encode()).hexdigest()[:12]
    module = sys.modules.get(mod_name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(mod_name, file)
    if spec is None or spec.loader is None:
        raise SpiderUnavailable(f"spider file {path!r} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[mod_name]
        raise
    return module


def version_of(cls: type[Spider]) -> str:
    """The class's ``version``, or a digest of its source file: either way two workers agree only
    when they run the same spider."""
    if cls.version:
        return str(cls.version)
    try:
        source = Path(inspect.getfile(cls)).read_bytes()
    except (OSError, TypeError):
        source = cls.__qualname__.encode()
    return "src-" + hashlib.sha1(source).hexdigest()[:12]


def parse_args(items: list[str]) -> dict[str, str]:
    """``key=value`` spider arguments as keyword arguments; SpiderUnavailable naming a bad one."""
    out: dict[str, str] = {}
    for item in items:
        if not _ARG.match(item):
            raise SpiderUnavailable(f"spider argument {item[:80]!r} is not key=value (key a Python name)")
        key, _, value = item.partition("=")
        out[key] = value
    return out


def instantiate(cls: type[Spider], args: list[str]) -> Spider:
    try:
        return cls(**parse_args(args))
    except SpiderUnavailable:
        raise
    except Exception as exc:
        raise SpiderUnavailable(f"spider {cls.__qualname__}: constructor raised {type(exc).__name__}: {exc}") from exc


def load(target: str, version: str, args: list[str]) -> Spider:
    """The spider a job recorded (``target`` and ``version``), built with its arguments; raises
    SpiderUnavailable when this worker cannot run that very spider."""
    cls = load_class(target)
    mine = version_of(cls)
    if version and mine != version:
        raise SpiderUnavailable(f"spider {target!r} is version {mine} on this worker, but the job was "
                                f"submitted with version {version}: deploy the same code to every worker")
    return instantiate(cls, args)


def prepare(settings: Settings, seeds: list[str]) -> tuple[Settings, list[str]]:
    """Resolve the spider ``settings`` name for submission: the settings with ``spider`` as the
    target every worker imports and ``spider_version`` recorded, and the seeds (the spider's
    ``start_urls`` when none are given); its ``allowed_domains`` when no ``allow_domains`` are.
    SpiderUnavailable if it cannot be loaded or built here, before anything is created."""
    if not settings.spider:
        return settings, seeds
    target = target_of(settings.spider)
    cls = load_class(target)
    instantiate(cls, settings.spider_args)  # its arguments fail here, not on every worker
    changes: dict[str, object] = {"spider": target, "spider_version": version_of(cls)}
    if not settings.allow_domains and cls.allowed_domains:
        changes["allow_domains"] = list(cls.allowed_domains)
    return settings.replace(**changes), seeds or list(cls.start_urls)
