"""A deterministic synthetic web: which pages exist and where they link.

Pages are named ``(site, path)``. Links are rendered as many equivalent hrefs (relative,
absolute, upper-case scheme and host, dot segments, fragments, reordered query strings) that a
correct crawler folds into one canonical URL. The reachable set is computed here, from the
model, independently of the crawler's own canonicalisation.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Link:
    site: int
    path: str  # canonical path and query
    nofollow: bool = False


@dataclass
class Page:
    site: int
    path: str
    links: list[Link] = field(default_factory=list)
    status: int = 200
    version: int = 0  # bumped when the page changes between crawl cycles


@dataclass
class WebModel:
    sites: int
    pages_per_site: int
    seed: int = 1
    cross_ratio: float = 0.15
    links_per_page: int = 8
    pages: dict[tuple[int, str], Page] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        paths = [self.page_path(i) for i in range(self.pages_per_site)]
        for s in range(self.sites):
            for i, path in enumerate(paths):
                page = Page(s, path)
                # A chain through every page keeps the whole site reachable from its index.
                if i + 1 < len(paths):
                    page.links.append(Link(s, paths[i + 1]))
                for _ in range(self.links_per_page):
                    if self.sites > 1 and rng.random() < self.cross_ratio:
                        other = rng.choice([x for x in range(self.sites) if x != s])
                        page.links.append(Link(other, rng.choice(paths)))
                    else:
                        page.links.append(Link(s, rng.choice(paths)))
                if i % 17 == 5:
                    page.links.append(Link(s, f"/missing/{i}.html"))
                if i % 13 == 3:
                    page.links.append(Link(s, f"/private/{i}.html", nofollow=True))
                self.pages[(s, path)] = page
            for i in range(self.pages_per_site):
                if i % 17 == 5:
                    self.pages[(s, f"/missing/{i}.html")] = Page(s, f"/missing/{i}.html", status=404)

    @staticmethod
    def page_path(i: int) -> str:
        if i == 0:
            return "/"
        if i % 10 == 7:
            return f"/list?page={i}&sort=asc"  # a page whose canonical URL has a sorted query
        return f"/p/{i}.html"

    def reachable(self, seeds: list[tuple[int, str]], max_depth: int | None = None,
                  sites: set[int] | None = None) -> dict[tuple[int, str], int]:
        """Every page reachable from the seeds by followed links, with its shortest depth."""
        depth: dict[tuple[int, str], int] = {}
        todo: deque[tuple[int, str]] = deque()
        for s in seeds:
            depth[s] = 0
            todo.append(s)
        while todo:
            key = todo.popleft()
            page = self.pages.get(key)
            if page is None or page.status != 200:
                continue
            if max_depth is not None and depth[key] >= max_depth:
                continue
            for link in page.links:
                target = (link.site, link.path)
                if link.nofollow or target in depth or (sites is not None and link.site not in sites):
                    continue
                depth[target] = depth[key] + 1
                todo.append(target)
        return depth

    # -- mutations between crawl cycles ------------------------------------------------------
    def add_page(self, site: int, path: str, linked_from: tuple[int, str]) -> None:
        """A new page, linked from an existing one (which changes with it)."""
        self.pages[(site, path)] = Page(site, path, links=[Link(site, "/")])
        self.pages[linked_from].links.append(Link(site, path))
        self.pages[linked_from].version += 1

    def change(self, site: int, path: str) -> None:
        self.pages[(site, path)].version += 1

    def remove(self, site: int, path: str) -> None:
        """The page answers 404 from now on; pages linking to it still do."""
        self.pages[(site, path)].status = 404
