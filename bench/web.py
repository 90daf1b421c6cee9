"""A deterministic synthetic web for the peer benchmark, written to a directory of static files
that nginx or ``bench.server`` serves on loopback addresses (127.0.1.1, 127.0.1.2, ...).

Every page is 15-25 KB of ordinary-looking HTML with ~20 links: site navigation repeated on every
page, next/previous, same-host links written relative, root-relative and absolute, ~15%
cross-host, a duplicate href, a fragment variant, a tracking-parameter variant (utm_* in either
order) and now and then a link to a page that does not exist (404). A page's identity is its path:
the variants name the same file, so fetching one of them again is a duplicate fetch. The reachable
set (every page, through the next-links chain from each site's index) is computed, not assumed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

_VOCABULARY = (
    "the of and to in is for on that with as by this from at are be or an it was which not have has "
    "crawler page site index archive report market energy water city policy research science music "
    "history travel health garden school library museum river mountain coast harbour railway bridge "
    "council festival season weather harvest village district budget election transport network data "
    "system service public private annual review summary detail update notice guide manual article "
    "section chapter volume issue number record table figure chart result method sample model theory "
    "practice project program course lecture student teacher author editor reader visitor member "
    "partner sponsor event meeting workshop seminar conference journal letter press release statement"
)
WORDS = tuple(_VOCABULARY.split())
SECTIONS = 10
TRACKING = ("?utm_source=newsletter&utm_medium=email", "?utm_medium=email&utm_source=newsletter",
            "?utm_source=feed&utm_campaign=weekly")


@dataclass(frozen=True)
class WebSpec:
    hosts: int = 20
    pages: int = 500
    port: int = 0
    base_ip: str = "127.0.1."
    seed: int = 7
    min_size: int = 15_000
    max_size: int = 25_000
    cross_host: float = 0.15
    broken: float = 0.02  # chance per page of one link to a page that does not exist

    def ip(self, host: int) -> str:
        return f"{self.base_ip}{host + 1}"

    @property
    def ips(self) -> list[str]:
        return [self.ip(h) for h in range(self.hosts)]

    def origin(self, host: int) -> str:
        return f"http://{self.ip(host)}:{self.port}"

    all_seeds: bool = False  # every host's home page; default: one URL, as users start a crawl

    def seeds(self) -> list[str]:
        return [self.origin(h) + "/" for h in range(self.hosts if self.all_seeds else 1)]


def page_path(i: int) -> str:
    return "/" if i == 0 else f"/s{i % SECTIONS}/p{i}.html"


def file_of(path: str) -> str:
    """The file under a host's directory that serves a request path."""
    return "index.html" if path == "/" else path.lstrip("/")


def identity(url_or_target: str) -> tuple[str, str]:
    """(host, path) of a URL or (host, request target): the page it names, whatever its query
    or fragment."""
    parts = urlsplit(url_or_target)
    return parts.hostname or "", parts.path or "/"


def _relative(src: str, dst: str) -> str:
    """A document-relative href from one page path to another (``../s3/p17.html``)."""
    src_dir = src.rsplit("/", 1)[0]
    dst_dir, name = dst.rsplit("/", 1)
    if dst == "/":
        return "../" if src_dir else "./"
    if src_dir == dst_dir:
        return name
    return ("../" if src_dir else "") + dst.lstrip("/")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def links_of(spec: WebSpec, host: int, i: int) -> list[tuple[str, str]]:
    """(href, anchor text) in document order; drawn apart from the page's text so the reachable
    set can be computed without rendering."""
    rng = random.Random(f"{spec.seed}:links:{host}:{i}")
    me = page_path(i)
    origin = spec.origin(host)
    nav = [("/", "Home")] + [(page_path(s), f"Section {s}") for s in (1, 2, 3)]
    out = [(href, text) for href, text in nav]
    out.append((_relative(me, page_path((i + 1) % spec.pages)), "Next"))
    if i > 1:
        out.append((_relative(me, page_path(i - 1)), "Previous"))
    for _ in range(9):
        dst = page_path(rng.randrange(spec.pages))
        style = rng.random()
        href = _relative(me, dst) if style < 0.4 else dst if style < 0.75 else origin + dst
        out.append((href, _text(rng, 3)))
    crossing = sum(rng.random() < spec.cross_host for _ in range(20))
    for _ in range(crossing):
        other = rng.randrange(spec.hosts)
        out.append((spec.origin(other) + page_path(rng.randrange(spec.pages)), _text(rng, 2)))
    out.append(out[rng.randrange(4, len(out))])  # the same href twice on a page
    out.append((page_path(rng.randrange(spec.pages)) + "#comments", "Comments"))
    out.append((page_path(rng.randrange(spec.pages)) + rng.choice(TRACKING), "Shared"))
    if rng.random() < spec.broken * 10 and i % 10 == 3:
        out.append((f"/s{i % SECTIONS}/missing-{i}.html", "Old link"))
    return out


def render(spec: WebSpec, host: int, i: int, pool: Sequence[str] = ()) -> bytes:
    """Page ``i`` of ``host``. Its text is drawn word by word, or, given a ``pool`` of paragraphs
    (bench/polite.py's, to build 20,000 large pages fast), paragraph by paragraph from it."""
    rng = random.Random(f"{spec.seed}:text:{host}:{i}")
    title = f"{_text(rng, 4).title()} - Site {host + 1}"
    links = links_of(spec, host, i)
    nav = "".join(f'<li><a href="{h}">{t}</a></li>' for h, t in links[:4])
    inline = [f'<a href="{h}">{t}</a>' for h, t in links[4:]]
    description = rng.choice(pool)[:160] if pool else _text(rng, 18)
    head = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f'<meta name="description" content="{description}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<link rel="stylesheet" href="/static/site.css"><script>window.dataLayer=[];</script>'
            f'</head><body><header><h1>{title}</h1><nav><ul>{nav}</ul></nav></header><main><article>')
    target = rng.randint(spec.min_size, spec.max_size)
    parts = [head]
    size = len(head)
    footer = f"Site {host + 1}, page {i}" if pool else _text(rng, 12)
    tail = f'</article></main><footer><p>{footer}</p></footer></body></html>\n'
    k = 0
    while size + len(tail) < target:
        link = f" {inline[k]}" if k < len(inline) else ""
        k += 1
        text = rng.choice(pool) if pool else _text(rng, rng.randint(40, 90))
        para = f'<p class="c{k % 7}">{text}{link}.</p>\n'
        if k % 6 == 0:
            para = f"<h2>{_text(rng, 5)}</h2>\n" + para
        parts.append(para)
        size += len(para)
    parts.extend(f"<p>{a}</p>" for a in inline[k:])  # a short page still carries all its links
    parts.append(tail)
    return "".join(parts).encode()


def reachable(spec: WebSpec) -> set[tuple[str, str]]:
    """Identities reachable from the seeds by following links, without fetching anything."""
    from urllib.parse import urljoin

    exists = {(spec.ip(h), page_path(i)) for h in range(spec.hosts) for i in range(spec.pages)}
    index = {(spec.ip(h), page_path(i)): (h, i) for h in range(spec.hosts) for i in range(spec.pages)}
    todo = [identity(s) for s in spec.seeds()]
    seen = set(todo)
    while todo:
        ident = todo.pop()
        h, i = index[ident]
        base = spec.origin(h) + page_path(i)
        for href, _ in links_of(spec, h, i):
            nxt = identity(urljoin(base, href))
            if nxt in exists and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def write(spec: WebSpec, root: Path, pool: Sequence[str] = (), robots: bytes = b"") -> dict[str, int]:
    """Write every page under ``root/<ip>/`` (text from ``pool`` if given, see ``render``; a
    robots.txt per host if given); return counts for the report."""
    total = 0
    for h in range(spec.hosts):
        base = root / spec.ip(h)
        for i in range(spec.pages):
            f = base / file_of(page_path(i))
            f.parent.mkdir(parents=True, exist_ok=True)
            body = render(spec, h, i, pool)
            f.write_bytes(body)
            total += len(body)
        if robots:
            (base / "robots.txt").write_bytes(robots)
    info = {"hosts": spec.hosts, "pages": spec.hosts * spec.pages, "bytes": total}
    (root / "web.json").write_text(json.dumps(info))
    return info
