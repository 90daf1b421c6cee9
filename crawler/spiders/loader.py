"""Finding a spider by what the user typed, whether this process may run it, and the version a
job records.

``--spider`` accepts the name of an installed spider (an entry point in the group
``crawler.spiders``, as a package declares in its pyproject: ``[project.entry-points."crawler.spiders"]
docs = "mypkg.spiders:DocsSpider"``), ``path/to/file.py:Class`` (made absolute when the job is
submitted) or ``package.module:Class``.

Spider code comes from two places only, both the operator's: installed entry points, and the
directories the ``spider_paths`` setting (``CRAWLER_SPIDER_PATHS``) lists. Submitting a job
(``prepare``: the API, ``crawler submit``) never runs spider code: it finds the file, checks it
lies under a listed directory (symlinks and ``..`` resolved), reads it with ``ast`` for the class
and its literal ``version``, ``start_urls`` and ``allowed_domains``, and records the version the
file gives. A worker (``load``) checks the same, against its own setting, before it imports
anything. Only ``crawler crawl``, on the operator's own machine, imports the spider it was given
(``prepare_local``) and lists its directory for the crawl's own workers.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from crawler.config.settings import Settings
from crawler.errors import ConfigError
from crawler.spiders import scrapy_settings
from crawler.spiders.base import Spider
from crawler.spiders.source import assigned, bound_names, top_level
from crawler.spiders.starts import has_start_requests

GROUP = "crawler.spiders"
PATHS_ENV = "CRAWLER_SPIDER_PATHS"
_ARG = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_FACTS = ("version", "start_urls", "allowed_domains")


class SpiderUnavailable(ConfigError):
    """The spider cannot be loaded here (no such module, file, class or entry point; not under
    the directories this process may load spiders from; not a Spider; it raised on import or
    construction; another version). One line naming why."""


@dataclass(frozen=True)
class Found:
    """Where a spider is, found without running it."""

    target: str  # what the job records: ``module:Class`` or ``/abs/file.py:Class``
    name: str  # the class
    file: Path | None  # the source its version and class are read from (None: an installed module not located)
    root: Path | None = None  # the listed directory it lies under; None for an installed spider
    module: str = ""  # the dotted module, for ``module:Class`` targets


def installed() -> dict[str, str]:
    """Installed spiders: entry-point name -> ``module:Class``."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def spider_dirs(paths: Sequence[str]) -> list[Path]:
    """The listed directories, symlinks and ``..`` resolved (relative ones against the working
    directory)."""
    return [Path(p).expanduser().resolve() for p in paths if p.strip()]


def _is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def _under(path: Path, roots: Sequence[Path]) -> Path | None:
    """The root ``path`` (resolved) lies under, if any."""
    resolved = path.resolve()
    return next((root for root in roots if resolved.is_relative_to(root)), None)


def _outside(ref: str, what: str, roots: Sequence[Path]) -> SpiderUnavailable:
    listed = "" if roots else f" ({PATHS_ENV} is not set here)"
    return SpiderUnavailable(f"spider {ref[:200]!r}: {what} is not under a directory {PATHS_ENV} lists{listed}; "
                             f"put it in one, or set {PATHS_ENV}=DIR (several separated by {os.pathsep!r} or ',') "
                             "for the submitter and every worker")


def _split(ref: str) -> tuple[str, str]:
    ref = ref.strip()
    if ":" not in ref:
        found = installed()
        if ref not in found:
            known = ", ".join(sorted(found)) or "none installed"
            raise SpiderUnavailable(f"no spider named {ref[:200]!r} (group {GROUP}: {known}); "
                                    "or give package.module:Class or path/to/file.py:Class")
        ref = found[ref]
    where, sep, name = ref.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise SpiderUnavailable(f"spider {ref[:200]!r}: give package.module:Class or path/to/file.py:Class")
    return where, name


def find(ref: str, paths: Sequence[str]) -> Found:
    """Where the spider ``ref`` names is, if this process may load it: an installed entry point
    (by name or by its ``module:Class``), or a file or module under one of ``paths``. Reads
    directories only, never runs or even opens the spider's code; SpiderUnavailable otherwise."""
    where, name = _split(ref)
    try:
        return _find(ref, where, name, spider_dirs(paths))
    except (OSError, RuntimeError) as exc:  # a path too long, a symlink loop
        raise SpiderUnavailable(f"spider {ref[:200]!r}: {type(exc).__name__}: {exc}") from None


def _find(ref: str, where: str, name: str, roots: list[Path]) -> Found:
    if _is_file(where):
        file = Path(where).expanduser().resolve()
        # The outermost listed directory holding it: the one a Scrapy project's root, found
        # above the file, may lie under (see ``_project_root``).
        root = min((r for r in roots if file.is_relative_to(r)), key=lambda r: len(r.parts), default=None)
        if root is None:
            raise _outside(ref, "the file (symlinks and '..' resolved)", roots)
        if not file.is_file():
            raise SpiderUnavailable(f"spider file {str(file)!r} does not exist on this machine")
        return Found(f"{file}:{name}", name, file, root)
    if not all(part.isidentifier() for part in where.split(".")):
        raise SpiderUnavailable(f"spider {ref[:200]!r}: {where[:200]!r} is not a module name")
    target = f"{where}:{name}"
    if target in installed().values():
        return Found(target, name, _installed_file(where), None, where)
    for root in roots:
        parts = _walk(where, root)
        if parts is None:
            continue
        for part in parts:
            if part.file is not None and _under(part.file, [root]) is None:
                raise _outside(ref, f"{part.name!r} (it links out of its directory)", roots)
        last = parts[-1].file
        assert last is not None  # _walk ends on a file
        return Found(target, name, last.resolve(), root, where)
    raise _outside(ref, f"module {where!r} (not an installed spider, group {GROUP})", roots)


@dataclass(frozen=True)
class _Part:
    name: str  # the dotted name so far
    file: Path | None  # the source importing it runs (None: a namespace package)
    package: Path | None  # its directory, for a package


def _walk(module: str, base: Path) -> list[_Part] | None:
    """The packages and module file an import of ``module`` from ``base`` alone would run, found
    by looking at the directory, as the path finder does for source files; None if absent."""
    parts = module.split(".")
    out = []
    here = base
    for i, part in enumerate(parts):
        name, pkg, last = ".".join(parts[:i + 1]), here / part, i == len(parts) - 1
        if (pkg / "__init__.py").is_file():
            out.append(_Part(name, pkg / "__init__.py", pkg))
        elif last and (here / f"{part}.py").is_file():
            out.append(_Part(name, here / f"{part}.py", None))
        elif not last and pkg.is_dir():
            out.append(_Part(name, None, pkg))
        else:
            return None
        here = pkg
    return out


def _installed_file(module: str) -> Path | None:
    """The source file of an installed module, found without importing it or its packages."""
    top, _, rest = module.partition(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: the finders run, no module code does
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        origin = Path(spec.origin) if spec.has_location and spec.origin else None
        return origin if origin is not None and origin.suffix == ".py" else None
    for directory in spec.submodule_search_locations or ():
        parts = _walk(rest, Path(directory))
        if parts is not None:
            return parts[-1].file
    return None


def _facts(found: Found, source: bytes) -> dict[str, Any]:
    """The class's literal ``version``, ``start_urls`` and ``allowed_domains`` (its own, else
    those of base classes in the same file), read with ``ast``; SpiderUnavailable if the file
    does not parse or binds no such name at its top level (not asked of an installed spider,
    whose module may take the class from elsewhere)."""
    where = str(found.file)
    try:
        tree = ast.parse(source, filename=where)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise SpiderUnavailable(f"spider {found.target!r}: cannot read {where!r}: "
                                f"{type(exc).__name__}: {exc}") from None
    classes = {node.name: node for node in top_level(tree.body) if isinstance(node, ast.ClassDef)}
    bound = bound_names(tree.body)
    if found.name not in bound and found.root is not None:
        raise SpiderUnavailable(f"spider {found.target!r}: {where!r} has no {found.name!r}")
    facts: dict[str, Any] = {}
    seen: set[str] = set()
    todo = [classes[found.name]] if found.name in classes else []
    while todo:
        cls = todo.pop(0)
        if cls.name in seen:
            continue
        seen.add(cls.name)
        for stmt in cls.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "start_requests":
                facts.setdefault("start_requests", True)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "start":
                facts.setdefault("start", True)  # Scrapy 2.13+'s: its default reads start_urls
            key, value = assigned(stmt)
            if key in _FACTS and value is not None and key not in facts:
                try:
                    facts[key] = ast.literal_eval(value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    pass  # not a literal: unknown here
        todo += [classes[b.id] for b in cls.bases if isinstance(b, ast.Name) and b.id in classes]
    try:
        scrapy_facts = scrapy_settings.from_source(tree, found.name)  # a scrapy.Spider subclass?
    except scrapy_settings.ScrapyUnsupported as exc:
        raise SpiderUnavailable(f"spider {found.target!r}: {exc}") from None
    if scrapy_facts is not None:
        facts["scrapy"] = scrapy_facts
    return facts


def _read(found: Found) -> tuple[str, dict[str, Any]]:
    """The spider's version and literal facts, from its source file's bytes alone: the class's
    literal ``version``, else a digest of the file. Submitter and workers compute it alike."""
    if found.file is None:
        return "", {}
    try:
        source = found.file.read_bytes()
    except OSError as exc:
        raise SpiderUnavailable(f"spider {found.target!r}: cannot read {str(found.file)!r}: {exc.strerror}") from None
    facts = _facts(found, source)
    version = facts.get("version")
    if isinstance(version, (str, int, float)) and not isinstance(version, bool) and str(version):
        return str(version), facts
    return "src-" + hashlib.sha1(source).hexdigest()[:12], facts


def version_of(ref: str, paths: Sequence[str]) -> str:
    """The version a job with this spider records (see ``_read``)."""
    return _read(find(ref, paths))[0]


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


# -- importing: only what ``find`` allowed -----------------------------------------------------

SCRAPY_CFG = "scrapy.cfg"


def _project_root(file: Path, bound: Path | None) -> Path | None:
    """The Scrapy project ``file`` is part of: the nearest directory holding a ``scrapy.cfg``,
    from the file's own up to ``bound`` (a listed directory: a project root outside the
    directories this process may load code from is never searched), or up to the filesystem's
    root without one (``crawler crawl``, the operator's own file)."""
    for directory in file.parents:
        if bound is not None and not directory.is_relative_to(bound):
            return None
        if (directory / SCRAPY_CFG).is_file():
            return directory
    return None


def _on_path(directory: Path) -> None:
    # As Scrapy's own command line does for the project it runs in (``init_env``): appended, so
    # the project's packages never shadow an installed module.
    if str(directory) not in sys.path:
        sys.path.append(str(directory))


def _import_file(file: Path, bound: Path | None = None) -> ModuleType:
    """Import the spider (or pipeline) file ``file``; inside a Scrapy project (see
    ``_project_root``) with the project's root on the import path first, so its ``from
    myproject.items import ...`` work as under ``scrapy crawl``."""
    if not file.is_file():
        raise SpiderUnavailable(f"spider file {str(file)!r} does not exist on this machine")
    # A stable name per file, so two spiders named alike in different files do not collide and
    # a second load reuses the first.
    mod_name = "crawler_spider_" + hashlib.sha1(str(file).encode()).hexdigest()[:12]
    # One import at a time: the module is in sys.modules while it runs, and another thread of a
    # threads-pool worker must not take it half-built (a slow import, Scrapy's, made it likely).
    with _IMPORTING:
        module = sys.modules.get(mod_name)
        if module is not None:
            return module
        spec = importlib.util.spec_from_file_location(mod_name, file)
        if spec is None or spec.loader is None:
            raise SpiderUnavailable(f"spider file {str(file)!r} cannot be imported")
        project = _project_root(file, bound)
        if project is not None:
            _on_path(project)
        return _exec(spec)


_IMPORTING = threading.RLock()


def _exec(spec: importlib.machinery.ModuleSpec) -> ModuleType:
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        if spec.loader is not None:
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


def _import_listed(module: str, root: Path) -> ModuleType:
    """``module`` as found under ``root`` and nowhere else: its packages and file are imported
    from there (never from ``sys.path``), or SpiderUnavailable if a name is already taken by a
    module from elsewhere."""
    parts = _walk(module, root)
    if parts is None:
        raise SpiderUnavailable(f"spider module {module!r} is not under {str(root)!r} on this machine")
    with _IMPORTING:  # as in _import_file: never a half-built module to another thread
        parent: ModuleType | None = None
        for part in parts:
            got = sys.modules.get(part.name)
            if got is None:
                spec: importlib.machinery.ModuleSpec | None
                if part.file is None:
                    spec = importlib.machinery.ModuleSpec(part.name, None, is_package=True)
                    spec.submodule_search_locations = [str(part.package)]
                else:
                    locations = [str(part.package)] if part.package is not None else None
                    spec = importlib.util.spec_from_file_location(part.name, part.file.resolve(),
                                                                  submodule_search_locations=locations)
                if spec is None:
                    raise SpiderUnavailable(f"spider module {part.name!r} cannot be imported")
                got = _exec(spec)
                if parent is not None:
                    setattr(parent, part.name.rpartition(".")[2], got)
            elif not _from(got, root):
                raise SpiderUnavailable(f"spider module {module!r}: {part.name!r} is already imported here from "
                                        f"outside {str(root)!r}")
            parent = got
    assert parent is not None
    return parent


def _from(module: ModuleType, root: Path) -> bool:
    places = [getattr(module, "__file__", None), *list(getattr(module, "__path__", []))]
    return any(p and Path(p).resolve().is_relative_to(root) for p in places)


def _class(module: ModuleType, target: str, name: str) -> type[Spider]:
    cls = getattr(module, name, None)
    if cls is None:
        raise SpiderUnavailable(f"spider {target!r}: {module.__name__!r} has no {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, Spider)):
        wrapped = _scrapy_spider(cls, target)
        if wrapped is None:
            raise SpiderUnavailable(f"spider {target!r}: {name!r} is not a subclass of crawler.spiders.Spider "
                                    "(or of scrapy.Spider)")
        return wrapped
    return cls


def _scrapy_spider(cls: Any, target: str) -> type[Spider] | None:
    """A crawler spider class running ``cls`` if it is a ``scrapy.Spider`` subclass, else None.
    Scrapy is looked at only if the spider's module imported it: the crawler never does itself."""
    scrapy = sys.modules.get("scrapy")
    if scrapy is None or not (isinstance(cls, type) and issubclass(cls, scrapy.Spider)):
        return None
    from crawler.spiders import scrapy_compat  # here, not above: Scrapy is optional

    try:
        return scrapy_compat.wrap(cls)
    except scrapy_settings.ScrapyUnsupported as exc:
        raise SpiderUnavailable(f"spider {target!r}: {exc}") from None


def _importing(target: str, where: str, run: Any) -> ModuleType:
    try:
        module: ModuleType = run()
    except SpiderUnavailable:
        raise
    except Exception as exc:  # a spider's import may raise anything: it is the user's code
        scrapy = isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "scrapy"
        hint = " (a Scrapy spider needs the extra: pip install 'crawler[scrapy]')" if scrapy else ""
        raise SpiderUnavailable(f"spider {target!r}: cannot import {where!r}: "
                                f"{type(exc).__name__}: {exc}{hint}") from exc
    return module


def import_found(found: Found) -> ModuleType:
    """Import the module ``find`` found: the file itself, the module from its listed directory,
    or an installed module as Python finds it (also for item pipelines, found the same way)."""
    file, root = found.file, found.root
    if file is not None and not found.module:
        return _importing(found.target, str(file), lambda: _import_file(file, root))
    if root is not None:
        return _importing(found.target, found.module, lambda: _import_listed(found.module, root))
    return _importing(found.target, found.module, lambda: importlib.import_module(found.module))


def load_class(found: Found) -> type[Spider]:
    """Import the class ``find`` found (see ``import_found``)."""
    return _class(import_found(found), found.target, found.name)


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


def load(target: str, version: str, args: list[str], paths: Sequence[str]) -> Spider:
    """The spider a job recorded (``target`` and ``version``), built with its arguments, if this
    worker may run it (installed, or under ``paths``: the worker's own ``spider_paths``). The
    place and version are checked before anything is imported; SpiderUnavailable otherwise."""
    found = find(target, paths)
    mine, _ = _read(found)
    if version and mine != version:
        raise SpiderUnavailable(f"spider {target!r} is version {mine or 'unknown'} on this worker, but the job was "
                                f"submitted with version {version}: deploy the same code to every worker")
    return instantiate(load_class(found), args)


# -- submitting ------------------------------------------------------------------------------

def prepare(settings: Settings, seeds: list[str], starts: bool | None = None) -> tuple[Settings, list[str]]:
    """Resolve the spider ``settings`` name for submission, without running any of its code:
    the settings with ``spider`` as the target every worker loads and ``spider_version``
    recorded, and the seeds (the class's literal ``start_urls`` when none are given); its literal
    ``allowed_domains`` when no ``allow_domains`` are. SpiderUnavailable if the spider is not
    one this process's ``spider_paths`` or installed entry points allow, before anything is
    created. A class that defines ``start_requests`` (``starts``; default: as its source shows)
    starts from what that yields and any seeds given, not from its ``start_urls``; one of ours with
    neither seeds nor domains to scope it by is refused."""
    if not settings.spider:
        return settings, seeds
    parse_args(settings.spider_args)  # a malformed argument fails here, not on every worker
    found = find(settings.spider, settings.spider_paths)
    version, facts = _read(found)
    changes: dict[str, object] = {"spider": found.target, "spider_version": version}
    if "scrapy" in facts:  # a Scrapy spider's settings, where the user gave no flag of their own
        try:
            wanted = scrapy_settings.submit_changes(found.name, facts["scrapy"])
        except scrapy_settings.ScrapyUnsupported as exc:
            raise SpiderUnavailable(f"spider {found.target!r}: {exc}") from None
        changes.update({k: v for k, v in wanted.items() if getattr(settings, k) == _default(k)})
    domains = _strings(facts.get("allowed_domains"))
    if not settings.allow_domains and domains:
        changes["allow_domains"] = domains
    starts = bool(facts.get("start_requests") or "scrapy" in facts) if starts is None else starts
    changes["spider_start_requests"] = starts
    if starts and not seeds and "scrapy" not in facts:
        if not (settings.allow_domains or domains):
            raise SpiderUnavailable(f"spider {found.target!r}: the hosts its start_requests yields are not known "
                                    "before it runs: give allowed_domains (a literal list), --allow-domain, or seeds")
        return settings.replace(**changes), seeds
    # A Scrapy spider that overrides start() or start_requests() starts from what they yield:
    # Scrapy never reads its start_urls, and taken as seeds they were fetched and scoped the job
    # to their domains, dropping start()'s other hosts. With Scrapy's own start(), they are the
    # seeds (requeued every cycle of a periodic job, and what `recover` starts again from).
    if not seeds and not ("scrapy" in facts and (facts.get("start") or facts.get("start_requests"))):
        seeds = _strings(facts.get("start_urls")) or []
        if not seeds and "scrapy" not in facts:  # a Scrapy spider's start() runs on a worker
            raise SpiderUnavailable(f"spider {found.target!r}: give seeds (the class has no literal start_urls list, "
                                    "and submitting never runs spider code)")
    return settings.replace(**changes), seeds


def _default(name: str) -> Any:
    f = Settings.__dataclass_fields__[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def prepare_local(settings: Settings, seeds: list[str]) -> tuple[Settings, list[str]]:
    """``prepare`` for a crawl on the operator's own machine (``crawler crawl``), which runs the
    spider it was given on its command line: it is imported here (its ``start_urls``,
    ``allowed_domains`` and arguments are the class's, computed or not), and its directory is
    added to ``spider_paths`` so the crawl's own workers may load it."""
    if not settings.spider:
        return settings, seeds
    where, name = _split(settings.spider)
    root: Path | None = None
    if _is_file(where):
        file = Path(where).expanduser().resolve()
        target = f"{file}:{name}"
        module = _importing(target, str(file), lambda: _import_file(file))
        # Its directory, or its Scrapy project's root, for the crawl's workers to load it from.
        root = _project_root(file, None) or file.parent
    else:
        target = f"{where}:{name}"
        if target in installed().values():
            module = _importing(target, where, lambda: importlib.import_module(where))
        else:
            module = _importing(target, where, lambda: _import_module_here(where))
            root = _root_of(module, where, target)
    cls = _class(module, target, name)
    instantiate(cls, settings.spider_args)  # its arguments fail here, not on every worker
    changes: dict[str, object] = {"spider": target}
    if root is not None and _under(root, spider_dirs(settings.spider_paths)) is None:
        changes["spider_paths"] = [*settings.spider_paths, str(root)]
    if not settings.allow_domains and cls.allowed_domains:
        changes["allow_domains"] = list(cls.allowed_domains)
    starts = has_start_requests(cls)
    return prepare(settings.replace(**changes), seeds or ([] if starts else list(cls.start_urls)), starts)


def _import_module_here(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # A spider module beside the user, as ``python -m`` would find it: the ``crawler``
        # command does not put the working directory on the path itself.
        cwd = os.getcwd()
        if exc.name != name.split(".")[0] or cwd in sys.path:
            raise
        sys.path.append(cwd)
        return importlib.import_module(name)


def _root_of(module: ModuleType, name: str, target: str) -> Path:
    """The directory ``name`` was imported from (what ``sys.path`` held for it)."""
    file = getattr(module, "__file__", None)
    if not file:
        raise SpiderUnavailable(f"spider {target!r}: module {name!r} has no file")
    path = Path(file)
    depth = name.count(".") + (1 if path.name == "__init__.py" else 0)
    return path.parents[depth].resolve()
