"""Noise links: navigation, footers, tag clouds and the URL patterns they use.

The MapReduce crawler design's filter, in two parts, both pure and bounded per page:

1. :func:`noise_blocks`: over an lxml HTML tree, a link is noise when the block that holds it
   is mostly link text. The *judged block* of a link is its innermost container element
   (:data:`CONTAINERS`: ``div``, ``nav``, ``ul``, ``table``...; not ``p``, ``li`` or ``td``, which
   describe one item rather than a region) that has at least ``min_chars`` characters of text; a
   container with less says too little to judge (a wrapper around one icon or one short link),
   so its parent judges. The block is noise when anchor text / all text > ``ratio``
   (default 1/4). So a share bar or a small nav inside an article is judged on its own (its
   innermost container is the bar), while the article's inline links are judged by the article,
   whose text dwarfs them. Text is counted without white space, and never inside ``script``,
   ``style``, ``noscript`` or ``template``.

2. :class:`UrlClusters`: single-pass longest-common-subsequence clustering of one site's URLs.
   A URL is tokenised (path and query; letters runs, digit runs and each other character are
   tokens) and joins the *first* cluster whose pattern it matches with similarity >= a
   threshold; the pattern then becomes the LCS of the two with ``*`` where either had tokens
   the other lacks. A cluster is *known noise* once it has ``min_members`` distinct URLs and
   most of them were seen in noise blocks. :func:`mark_noise` puts the two together for a page.

Neither part touches Redis, Celery or the network; the caller keeps one :class:`UrlClusters`
per site (host) for as long as it likes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from lxml import etree
from lxml.html import HtmlElement

# Regions of a page. p, li, td, dt/dd and headings are left out on purpose: each is one item,
# and a short paragraph that is mostly one link is still content when its region is not.
CONTAINERS = frozenset({
    "body", "div", "section", "article", "main", "nav", "header", "footer", "aside", "menu",
    "ul", "ol", "dl", "table", "form", "figure", "center",
})
_INVISIBLE = frozenset({"script", "style", "noscript", "template"})
_WS_RE = re.compile(r"\s+")
_TOKEN_RE = re.compile(r"[A-Za-z]+|[0-9]+|[^A-Za-z0-9]")
WILDCARD = "*"

DEFAULT_RATIO = 0.25
DEFAULT_MIN_CHARS = 1
DEFAULT_MAX_LINKS = 2000


def _chars(s: str | None) -> int:
    return len(_WS_RE.sub("", s)) if s else 0


def _text_lengths(root: HtmlElement) -> tuple[dict[HtmlElement, int], dict[HtmlElement, int]]:
    """Characters of visible text and of anchor text under every element, in one iterative
    post-order walk (no recursion: libxml2 trees can be deeper than Python's stack)."""
    total: dict[HtmlElement, int] = {}
    anchor: dict[HtmlElement, int] = {}
    stack: list[tuple[HtmlElement, Iterator[HtmlElement]]] = [(root, iter(root))]
    while stack:
        el, children = stack[-1]
        child = next(children, None)
        if child is not None:
            if isinstance(child.tag, str) and child.tag not in _INVISIBLE:
                stack.append((child, iter(child)))
            continue
        stack.pop()
        t = _chars(el.text)
        a = 0
        for c in el:
            if c in total:
                t += total[c]
                a += anchor[c]
            t += _chars(c.tail)
        total[el] = t
        # an <a> nested in an <a> (invalid, but parsed) must not count twice; a name anchor
        # (<a name>, no href) is plain text
        anchor[el] = t if el.tag == "a" and el.get("href") is not None else a
    return total, anchor


def noise_blocks(
    tree: HtmlElement | etree._ElementTree[HtmlElement] | None,
    *,
    ratio: float = DEFAULT_RATIO,
    min_chars: int = DEFAULT_MIN_CHARS,
    max_links: int = DEFAULT_MAX_LINKS,
) -> set[HtmlElement]:
    """The ``<a href>`` elements of ``tree`` (an lxml HTML document or element) that sit in noise
    blocks, by the rule in this module's docstring. Only the first ``max_links`` anchors are
    judged (the rest are not returned, i.e. count as content); the cost is one walk of the tree
    plus, per judged anchor, a walk up its ancestors. Never raises on a parsed tree."""
    if tree is None:
        return set()
    root = tree.getroot() if isinstance(tree, etree._ElementTree) else tree
    total, anchor = _text_lengths(root)
    verdict: dict[HtmlElement, bool] = {}
    noisy: set[HtmlElement] = set()
    for n, a in enumerate(root.iter("a")):
        if n >= max_links:
            break
        if a.get("href") is None or a not in total:
            continue  # a name anchor, or one inside <script>/<template>
        block = _judged_block(a, total, min_chars)
        if block is None:
            continue
        got = verdict.get(block)
        if got is None:
            got = verdict[block] = anchor[block] > ratio * total[block]
        if got:
            noisy.add(a)
    return noisy


def _judged_block(a: HtmlElement, total: dict[HtmlElement, int], min_chars: int) -> HtmlElement | None:
    outermost = None
    for el in a.iterancestors():
        if el.tag in CONTAINERS and el in total:
            if total[el] >= min_chars:
                return el
            outermost = el
    # nothing has enough text to judge: the whole page is a handful of links
    return outermost


def tokens(url: str, max_tokens: int = 32) -> list[str]:
    """The tokens of a URL's path and query: runs of letters, runs of digits, and each other
    character alone (``/p/1.html`` -> ``/ p / 1 . html``). At most ``max_tokens``, so one
    comparison costs at most ``max_tokens`` squared steps. Case is kept (paths are case
    sensitive); the host is not a token (clusters are kept per site)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return _TOKEN_RE.findall(target, 0, max_tokens * 64)[:max_tokens]


def _lcs_table(p: Sequence[str], u: Sequence[str]) -> list[list[int]]:
    # wildcards match nothing literally: they are the gaps of the pattern
    rows = [[0] * (len(u) + 1) for _ in range(len(p) + 1)]
    for i in range(len(p) - 1, -1, -1):
        row, below, pi = rows[i], rows[i + 1], p[i]
        for j in range(len(u) - 1, -1, -1):
            if pi == u[j] and pi != WILDCARD:
                row[j] = below[j + 1] + 1
            else:
                row[j] = below[j] if below[j] >= row[j + 1] else row[j + 1]
    return rows


def similarity(pattern: Sequence[str], url_tokens: Sequence[str]) -> float:
    """LCS similarity of a pattern and a URL's tokens, in [0, 1]: ``2 (L + w) / (|p| + |u|)``
    where L is the length of their longest common subsequence (wildcards matching nothing
    literally) and w the number of the pattern's wildcards that can absorb a URL token left
    over (``min(wildcards, |u| - L)``). A URL that fits a pattern exactly scores 1."""
    n = len(pattern) + len(url_tokens)
    if n == 0:
        return 1.0
    lcs = _lcs_table(pattern, url_tokens)[0][0]
    wild = min(pattern.count(WILDCARD), len(url_tokens) - lcs)
    return 2 * (lcs + wild) / n


def generalise(pattern: Sequence[str], url_tokens: Sequence[str]) -> list[str]:
    """The LCS of ``pattern`` and ``url_tokens``, with one wildcard wherever either side had
    tokens (or a wildcard) between two common tokens, or before the first or after the last."""
    rows = _lcs_table(pattern, url_tokens)
    out: list[str] = []
    gap = False
    i = j = 0
    while i < len(pattern) and j < len(url_tokens):
        if pattern[i] == url_tokens[j] and pattern[i] != WILDCARD:
            if gap and out[-1:] != [WILDCARD]:
                out.append(WILDCARD)
            out.append(pattern[i])
            gap = False
            i += 1
            j += 1
        elif rows[i + 1][j] >= rows[i][j + 1]:
            gap = True
            i += 1
        else:
            gap = True
            j += 1
    if (gap or i < len(pattern) or j < len(url_tokens)) and out[-1:] != [WILDCARD]:
        out.append(WILDCARD)
    return out


@dataclass
class Cluster:
    """A URL pattern and how many distinct URLs joined it from noise blocks and from content."""

    pattern: list[str]
    noise_members: int = 0
    content_members: int = 0

    @property
    def members(self) -> int:
        return self.noise_members + self.content_members


@dataclass
class UrlClusters:
    """Single-pass LCS clustering of one site's URLs, with membership counts.

    ``threshold``: least :func:`similarity` for a URL to join a cluster. ``max_clusters``: a URL
    that fits no cluster when this many exist stays unclustered (never cluster noise), so one
    observation costs at most ``max_clusters`` comparisons of ``max_tokens`` tokens.
    ``max_memo``: distinct URLs remembered (their cluster, whether counted as noise or content);
    when full it is cleared, so a URL seen before may be counted again (both kinds alike).
    A cluster is known noise with at least ``min_members`` distinct URLs of which more than
    ``noise_share`` came from noise blocks."""

    threshold: float = 0.7
    max_clusters: int = 64
    max_tokens: int = 32
    max_memo: int = 100_000
    min_members: int = 3
    noise_share: float = 0.8
    clusters: list[Cluster] = field(default_factory=list)
    _memo: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def cluster_of(self, url: str) -> Cluster | None:
        """The cluster ``url`` belongs to (joining or founding one if it fits none and there is
        room), or ``None``. Does not count the URL as a member: :meth:`observe` does."""
        entry = self._entry(url)
        return self.clusters[entry[0]] if entry[0] >= 0 else None

    def observe(self, url: str, in_noise_block: bool) -> Cluster | None:
        """Record that ``url`` was seen in a noise block or in content; each distinct URL counts
        at most once as noise and once as content. Returns its cluster, or ``None``."""
        entry = self._entry(url)
        if entry[0] < 0:
            return None
        cluster = self.clusters[entry[0]]
        if in_noise_block and not entry[1]:
            entry[1] = 1
            cluster.noise_members += 1
        elif not in_noise_block and not entry[2]:
            entry[2] = 1
            cluster.content_members += 1
        return cluster

    def is_known_noise(self, url: str) -> bool:
        """Whether ``url`` falls in a cluster that is known noise (see the class docstring)."""
        cluster = self.cluster_of(url)
        return cluster is not None and self._noisy(cluster)

    def noise_patterns(self) -> list[str]:
        """The patterns of the known-noise clusters, joined (``/tag/*``), for logs and reports."""
        return ["".join(c.pattern) for c in self.clusters if self._noisy(c)]

    def _noisy(self, c: Cluster) -> bool:
        return c.members >= self.min_members and c.noise_members > self.noise_share * c.members

    def _entry(self, url: str) -> list[int]:
        entry = self._memo.get(url)
        if entry is None:
            if len(self._memo) >= self.max_memo:
                self._memo.clear()
            entry = self._memo[url] = [self._assign(tokens(url, self.max_tokens)), 0, 0]
        return entry

    def _assign(self, toks: list[str]) -> int:
        n = len(toks)
        for k, c in enumerate(self.clusters):
            p = c.pattern
            # the similarity cannot exceed 2 (min + wildcards) / (|p| + |u|): skip the table
            bound = 2 * (min(len(p), n) + p.count(WILDCARD)) / ((len(p) + n) or 1)
            if bound >= self.threshold and similarity(p, toks) >= self.threshold:
                c.pattern = generalise(p, toks)
                return k
        if len(self.clusters) >= self.max_clusters:
            return -1
        self.clusters.append(Cluster(list(toks)))
        return len(self.clusters) - 1


def mark_noise(
    links: Iterable[tuple[str, bool]],
    clusters: UrlClusters,
    *,
    max_links: int = DEFAULT_MAX_LINKS,
) -> list[bool]:
    """For one page's links, as ``(absolute URL, in a noise block)`` pairs in page order: whether
    each is noise (in a noise block, or in a known-noise cluster). All are observed first, so a
    page's own tag cloud can make its cluster noise for that page's other links. Links past
    ``max_links`` are neither observed nor clustered: their block alone decides."""
    pairs = list(links)
    head = pairs[:max_links]
    for url, noisy in head:
        clusters.observe(url, noisy)
    out = [noisy or clusters.is_known_noise(url) for url, noisy in head]
    out.extend(noisy for _url, noisy in pairs[max_links:])
    return out
