"""A deterministic shop catalogue: paginated listings of product pages with structured fields
(name, SKU, price, stock, rating, category, tags), for spiders that extract records.

``records`` says what a correct spider extracts from it, computed from the generated products,
not by parsing the pages, so a test can compare the two.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

    from crawler.testweb.server import TestWeb

_ADJECTIVES = ("Copper", "Walnut", "Linen", "Granite", "Amber", "Cobalt", "Maple", "Slate", "Ivory", "Juniper")
_NOUNS = ("Kettle", "Lamp", "Notebook", "Teapot", "Chair", "Clock", "Satchel", "Vase", "Blanket", "Pen")
CATEGORIES = ("kitchen", "lighting", "stationery", "furniture", "textiles")
_TAGS = ("handmade", "gift", "eco", "new", "sale", "limited", "classic")
_RATINGS = ("Zero", "One", "Two", "Three", "Four", "Five")


@dataclass(frozen=True)
class Product:
    sku: str
    name: str
    cents: int
    stock: int
    rating: int  # 1..5
    category: str
    tags: tuple[str, ...]

    @property
    def path(self) -> str:
        return f"/catalogue/{self.sku.lower()}.html"

    @property
    def price(self) -> str:
        return f"{self.cents // 100}.{self.cents % 100:02d}"


class Catalogue:
    """``products`` products, ``per_page`` to a listing page; the home page links to the first
    listing and to one page per category (which lists that category's products)."""

    def __init__(self, products: int = 45, per_page: int = 10, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.per_page = per_page
        self.products: list[Product] = []
        for i in range(products):
            name = f"{_ADJECTIVES[i % len(_ADJECTIVES)]} {_NOUNS[(i * 7 + i // len(_ADJECTIVES)) % len(_NOUNS)]}"
            self.products.append(Product(
                sku=f"SKU-{1000 + i}", name=f"{name} No. {i + 1}", cents=rng.randrange(199, 25_000),
                stock=0 if i % 9 == 4 else rng.randrange(1, 40), rating=rng.randrange(1, 6),
                category=CATEGORIES[i % len(CATEGORIES)],
                tags=tuple(sorted(rng.sample(_TAGS, rng.randrange(0, 4))))))
        self.pages = max(1, -(-products // per_page))

    # -- what a spider should find ---------------------------------------------------------
    def records(self, origin: str) -> list[dict[str, Any]]:
        """Every product as the example spider yields it."""
        return [{"sku": p.sku, "name": p.name, "price": float(p.price), "currency": "EUR", "stock": p.stock,
                 "in_stock": p.stock > 0, "rating": p.rating, "category": p.category, "tags": list(p.tags),
                 "url": origin + p.path} for p in self.products]

    def paths(self) -> list[str]:
        return (["/", *(self.listing_path(n) for n in range(1, self.pages + 1)),
                 *(f"/category/{c}/" for c in CATEGORIES), *(p.path for p in self.products)])

    @staticmethod
    def listing_path(n: int) -> str:
        return f"/catalogue/page-{n}.html"

    # -- pages -----------------------------------------------------------------------------
    def render(self, path: str) -> bytes | None:
        if path == "/":
            links = [f'<li><a href="{self.listing_path(1)}">All products</a></li>',
                     *(f'<li><a href="/category/{c}/">{c.title()}</a></li>' for c in CATEGORIES)]
            return _page("Example Shop", f"<h1>Example Shop</h1><ul class=nav>{''.join(links)}</ul>")
        for n in range(1, self.pages + 1):
            if path == self.listing_path(n):
                return self._listing(n)
        for c in CATEGORIES:
            if path == f"/category/{c}/":
                return self._category(c)
        for i, p in enumerate(self.products):
            if path == p.path:
                return self._product(i, p)
        return None

    def _cards(self, products: list[Product]) -> str:
        # Relative hrefs from /catalogue/ and /category/x/ differ: absolute paths keep it simple.
        return "".join(f'<article class=product_pod><h3><a href="{p.path}" title="{escape(p.name)}">'
                       f'{escape(p.name[:12])}...</a></h3><p class=price_color>&euro;{p.price}</p></article>'
                       for p in products)

    def _listing(self, n: int) -> bytes:
        chunk = self.products[(n - 1) * self.per_page: n * self.per_page]
        pager = []
        if n > 1:
            pager.append(f'<li class=previous><a href="page-{n - 1}.html">previous</a></li>')
        pager.append(f'<li class=current>Page {n} of {self.pages}</li>')
        if n < self.pages:
            pager.append(f'<li class=next><a href="page-{n + 1}.html">next</a></li>')
        body = f"<h1>All products</h1><section>{self._cards(chunk)}</section><ul class=pager>{''.join(pager)}</ul>"
        return _page(f"All products - page {n}", body)

    def _category(self, c: str) -> bytes:
        chunk = [p for p in self.products if p.category == c]
        return _page(f"{c.title()} | Example Shop", f"<h1>{c.title()}</h1><section>{self._cards(chunk)}</section>")

    def _product(self, i: int, p: Product) -> bytes:
        availability = f"In stock ({p.stock} available)" if p.stock else "Out of stock"
        tags = "".join(f"<li>{t}</li>" for t in p.tags)
        related = self.products[(i + 1) % len(self.products)]
        body = (
            f'<ul class=breadcrumb><li><a href="/">Home</a></li><li><a href="/category/{p.category}/">'
            f'{p.category.title()}</a></li><li class=active>{escape(p.name)}</li></ul>'
            f'<div class="product_main"><h1>{escape(p.name)}</h1>'
            f'<p class=price_color>&euro;{p.price}</p>'
            f'<p class="instock availability">\n    {availability}\n</p>'
            f'<p class="star-rating {_RATINGS[p.rating]}">rated</p></div>'
            f'<table class="table table-striped"><tr><th>SKU</th><td>{p.sku}</td></tr>'
            f'<tr><th>Category</th><td>{p.category}</td></tr></table>'
            f'<ul class=tags>{tags}</ul>'
            f'<aside><h2>You may also like</h2><a href="{related.path}">{escape(related.name)}</a></aside>')
        return _page(f"{p.name} | Example Shop", body)

    def mount(self, web: TestWeb, site: int) -> None:
        """Serve the catalogue on ``site`` of a TestWeb (its routes take precedence over the model)."""
        for path in self.paths():
            body = self.render(path)
            assert body is not None

            def serve(h: BaseHTTPRequestHandler, body: bytes = body) -> None:
                h._send(200, body)  # type: ignore[attr-defined]  # TestWeb's handler

            web.route(site, path, serve)


def _page(title: str, body: str) -> bytes:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title></head>"
            f"<body>{body}</body></html>").encode()
