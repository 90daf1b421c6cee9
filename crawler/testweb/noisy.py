"""Deterministic article pages with the usual noise around them: a navigation bar, a tag cloud,
a share bar inside the article and a footer. Each page says which of its links are noise and
which are content, so tests can score the noise-link filter and the main-text extractor.

Content links are inline in paragraphs (``/p/N.html``); noise links are the nav
(``/section/NAME/``), the tag cloud (``/tag/WORD``), the share bar and the footer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from html import escape

_WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "they", "you", "were", "her",
    "she", "there", "been", "one", "all", "we", "their", "has", "would", "when", "if", "so", "no", "will",
    "more", "can", "about", "out", "who", "up", "some", "what", "them", "into", "time", "only", "new", "could",
    "other", "than", "then", "also", "may", "people", "after", "first", "two", "most", "over", "many", "world",
    "year", "state", "system", "government", "program", "research", "water", "market", "country", "city",
    "history", "report", "public", "development", "study", "music", "energy", "service", "between", "during",
    "through", "under", "power", "order", "level", "process", "example", "result", "network", "design", "model",
)
_SECTIONS = ("news", "sport", "business", "culture", "science", "travel", "opinion", "video")
_TAGS = ("python", "rust", "golang", "java", "kotlin", "swift", "haskell", "ocaml", "erlang",
         "elixir", "scala", "clojure", "ruby", "perl", "php", "lua", "zig", "nim", "dart", "julia")
_FOOTER = (("About us", "/about"), ("Contact", "/contact"), ("Privacy policy", "/privacy"),
           ("Terms of use", "/terms"), ("Careers", "/careers"), ("Advertise", "/advertise"))
NAV_TEXT = "Subscribe to the Daily Example"
FOOTER_TEXT = "All rights reserved by Example Media Group"


@dataclass(frozen=True)
class NoisyPage:
    html: bytes
    title: str
    paragraphs: tuple[str, ...]  # the article's paragraphs as plain text
    content_links: tuple[str, ...]  # hrefs, in page order
    noise_links: tuple[str, ...]


def _sentence(rng: random.Random, words: int) -> str:
    s = " ".join(rng.choice(_WORDS) for _ in range(words))
    return s[0].upper() + s[1:] + "."


def noisy_page(n: int, paragraphs: int = 12, script_kb: int = 0, related: int = 0, pages: int = 10_000) -> NoisyPage:
    """Page ``n`` (deterministic in ``n``): ``paragraphs`` paragraphs of about 60 words, every
    other one with an inline content link; ``script_kb`` KB of inline script in the head, as real
    pages carry (it changes the size, not the text); ``related`` "related stories" cards in the
    sidebar (noise: a link list), which give the page the element count of a real one. Article
    links (content and related) point at ``/p/N.html`` for N below ``pages``."""
    rng = random.Random(n)
    title = f"Report {n}: " + _sentence(rng, 5)[:-1]
    content: list[str] = []
    noise: list[str] = []
    texts: list[str] = []
    out = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{escape(title)} | Example</title>", '<meta name="author" content="Jane Example">',
           '<meta property="article:published_time" content="2024-03-15T10:00:00Z">']
    if script_kb:
        out.append("<script>var cfg = {" + ", ".join(f'"k{i}": {i}' for i in range(script_kb * 100)) + "};</script>")
    out.append("</head><body>")
    out.append('<header><div class="brand"><a href="/">Example</a></div>')
    out.append(f'<nav class="main"><span>{NAV_TEXT}</span><ul>')
    for s in _SECTIONS:
        href = f"/section/{s}/"
        noise.append(href)
        out.append(f'<li><a href="{href}">{s.title()}</a></li>')
    out.append("</ul></nav></header>")
    noise.insert(0, "/")
    out.append('<div class="page"><main><article>')
    out.append(f"<h1>{escape(title)}</h1>")
    out.append('<div class="share"><a href="/share?via=mail">Mail</a> <a href="/share?via=print">Print</a></div>')
    noise += ["/share?via=mail", "/share?via=print"]
    for k in range(paragraphs):
        a, b = _sentence(rng, 30), _sentence(rng, 30)
        if k == paragraphs // 2:
            out.append(f"<h2>Part two of report {n}</h2>")
        if k % 2 == 0:
            target = rng.randrange(pages)
            href = f"/p/{target}.html"
            content.append(href)
            anchor = _sentence(rng, 3)[:-1].lower()
            out.append(f'<p>{a} See <a href="{href}">{anchor}</a> for more. {b}</p>')
            texts.append(f"{a} See {anchor} for more. {b}")
        else:
            out.append(f"<p>{a} {b}</p>")
            texts.append(f"{a} {b}")
    out.append("</article></main>")
    out.append('<aside class="sidebar"><h3>Tags</h3><div class="tagcloud">')
    for t in rng.sample(_TAGS, 12):
        href = f"/tag/{t}"
        noise.append(href)
        out.append(f'<a href="{href}" style="font-size:{rng.randrange(10, 24)}px">{t}</a>')
    out.append("</div>")
    if related:
        out.append('<div class="related"><h3>Related stories</h3>')
        for _ in range(related):
            href = f"/p/{rng.randrange(pages)}.html"
            noise.append(href)
            out.append(f'<div class="card"><div class="thumb"><img src="/img/{rng.randrange(999)}.jpg" alt=""></div>'
                       f'<h4><a href="{href}">{escape(_sentence(rng, 6)[:-1])}</a></h4>'
                       f'<span class="date">2024-0{rng.randrange(1, 9)}-1{rng.randrange(10)}</span></div>')
        out.append("</div>")
    out.append("</aside></div>")
    out.append(f'<footer><p>{FOOTER_TEXT}</p><ul class="links">')
    for text, href in _FOOTER:
        noise.append(href)
        out.append(f'<li><a href="{href}">{text}</a></li>')
    out.append("</ul></footer></body></html>")
    return NoisyPage("\n".join(out).encode("utf-8"), title, tuple(texts), tuple(content), tuple(noise))


NOISE_PATHS = ("/", *(f"/section/{s}/" for s in _SECTIONS), *(f"/tag/{t}" for t in _TAGS),
               "/share?via=mail", "/share?via=print", *(href for _text, href in _FOOTER))


def plain_page(path: str) -> bytes:
    """What a noise link leads to: a page with a title and no links, so that following it is
    observable (it is stored) and leads nowhere further."""
    return (f"<!doctype html><html><head><title>{escape(path)}</title></head>"
            f"<body><p>The page at {escape(path)}.</p></body></html>").encode()


def content_reachable(start: int, pages: int, **kw: int) -> set[int]:
    """The article numbers reachable from article ``start`` by content links alone."""
    seen, todo = {start}, [start]
    while todo:
        for href in noisy_page(todo.pop(), pages=pages, **kw).content_links:
            k = int(href[len("/p/"):-len(".html")])
            if k not in seen:
                seen.add(k)
                todo.append(k)
    return seen
