"""A quotes site shaped like quotes.toscrape.com, the sandbox Scrapy's tutorial crawls: paged
quotes (``/page/N/``, ten a page, a "Next" link) each with its text, author, a link to the
author's page and tags; author pages (name, birth date and place, bio); tag pages
(``/tag/x/page/N/``); a paged JSON API (``/api/quotes?page=N``); a form login with a hidden CSRF
token that sets a session cookie, and a page (``/favourites/``) shown only to a logged-in reader.

The data are generated from a seed, and ``quotes``/``authors``/``favourites`` say what a correct
spider extracts, computed from the data, not from the pages, so a test can compare the two.
"""

from __future__ import annotations

import json
import random
import secrets
import threading
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from crawler.testweb.server import request_cookie

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

    from crawler.testweb.server import TestWeb

SESSION_COOKIE = "session"
USER = "reader"
PASSWORD = "quotes-pw"  # a test site's fixed password: the example spiders log in with it
PER_PAGE = 10

_FIRST = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Margaret")
_LAST = ("Lovelace", "Hopper", "Turing", "Dijkstra", "Liskov")
_PLACES = ("London, England", "New York, USA", "Rotterdam, The Netherlands", "Kyoto, Japan",
           "Lyon, France", "Porto, Portugal", "Cork, Ireland")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")
_TAGS = ("change", "life", "love", "humor", "books", "truth", "simplicity", "friendship", "courage",
         "science", "inspirational", "reading")
_OPENINGS = ("The world as we have created it", "A day without laughter", "It is our choices",
             "There are only two ways to live your life", "Imperfection is beauty",
             "Try not to become a person of success", "Good friends, good books",
             "The person, be it gentleman or lady", "A reader lives a thousand lives",
             "Simplicity is prerequisite for reliability")
_ENDINGS = ("is a process of our thinking.", "is a day wasted.", "show what we truly are.",
            "& the rest is a miracle.", "is better than boring.", "but rather of value.",
            "and a sleepy conscience: that's the ideal life.", "must take pleasure in a good novel.",
            "the man who never reads lives only one.", "<as everyone knows> - or should.")


@dataclass(frozen=True)
class Author:
    name: str
    born_date: str
    born_location: str  # as the page shows it: "in Place"
    bio: str

    @property
    def slug(self) -> str:
        return self.name.replace(" ", "-")

    @property
    def path(self) -> str:
        return f"/author/{self.slug}/"


@dataclass(frozen=True)
class Quote:
    text: str  # with the typographic quotes the page shows
    author: Author
    tags: tuple[str, ...]


class QuotesSite:
    """``quotes`` quotes by ``authors`` authors (each has at least one), ``PER_PAGE`` a page."""

    def __init__(self, quotes: int = 100, authors: int = 50, seed: int = 11) -> None:
        rng = random.Random(seed)
        self.authors: list[Author] = []
        for i in range(authors):
            name = f"{_FIRST[i % len(_FIRST)]} {_LAST[(i // len(_FIRST)) % len(_LAST)]}"
            if i >= len(_FIRST) * len(_LAST):
                name += f" {i}"
            born = f"{_MONTHS[rng.randrange(12)]} {rng.randrange(1, 29):02d}, {rng.randrange(1800, 1990)}"
            place = f"in {_PLACES[rng.randrange(len(_PLACES))]}"
            bio = (f"{name} was born {place[3:]} and wrote about {rng.choice(_TAGS)} & "
                   f"{rng.choice(_TAGS)} for {rng.randrange(10, 60)} years.")
            self.authors.append(Author(name, born, place, bio))
        self.quotes_: list[Quote] = []
        for i in range(quotes):
            author = self.authors[i % authors] if i < authors else self.authors[rng.randrange(authors)]
            words = f"{_OPENINGS[i % len(_OPENINGS)]} {_ENDINGS[(i * 3 + i // 10) % len(_ENDINGS)]} ({i + 1})"
            text = f"\u201c{words}\u201d"
            tags = tuple(sorted(rng.sample(_TAGS, rng.randrange(0, 4))))
            self.quotes_.append(Quote(text, author, tags))
        self.pages = max(1, -(-quotes // PER_PAGE))
        self.user, self.password = USER, PASSWORD
        self.logins = 0  # successful login POSTs
        self.refused_logins = 0
        self._tokens: set[str] = set()
        self._sessions: set[str] = set()
        self._lock = threading.Lock()

    # -- what a spider should find ---------------------------------------------------------
    def quotes(self) -> list[dict[str, Any]]:
        """Every quote as the tutorial's spider yields it: text, author, tags."""
        return [{"text": q.text, "author": q.author.name, "tags": list(q.tags)} for q in self.quotes_]

    def author_records(self) -> list[dict[str, Any]]:
        """Every author who has a quote, as an author page shows them."""
        return [{"name": a.name, "born_date": a.born_date, "born_location": a.born_location, "bio": a.bio}
                for a in self.authors]

    def favourites(self) -> list[dict[str, Any]]:
        """What ``/favourites/`` lists to the logged-in reader."""
        return [{"text": q.text, "author": q.author.name} for i, q in enumerate(self.quotes_) if i % 7 == 3]

    def tag_paths(self) -> list[str]:
        return [f"/tag/{t}/page/{n}/" for t in _TAGS
                for n in range(1, max(1, -(-len(self._tagged(t)) // PER_PAGE)) + 1)]

    # -- serving ---------------------------------------------------------------------------
    def mount(self, web: TestWeb, site: int) -> None:
        """Serve the site on ``site`` of a TestWeb (its routes take precedence over the model)."""
        web.route(site, "/robots.txt", lambda h: _send(h, 200, b"User-agent: *\nDisallow: /private/\n",
                                                       ctype="text/plain"))
        web.route(site, "/", lambda h: self._listing(h, self.quotes_, 1, "/page/{}/"))
        for n in range(1, self.pages + 1):
            web.route(site, f"/page/{n}/", lambda h, n=n: self._listing(h, self.quotes_, n, "/page/{}/"))  # type: ignore[misc]
        for tag in _TAGS:
            tagged = self._tagged(tag)
            for n in range(1, max(1, -(-len(tagged) // PER_PAGE)) + 1):
                web.route(site, f"/tag/{tag}/page/{n}/",
                          lambda h, tagged=tagged, n=n, tag=tag: self._listing(  # type: ignore[misc]
                              h, tagged, n, f"/tag/{tag}/page/{{}}/", heading=f"Viewing tag: {tag}"))
        for author in self.authors:
            web.route(site, author.path, lambda h, a=author: self._author(h, a))  # type: ignore[misc]
        web.route(site, "/api/quotes", self._api, any_query=True)
        web.route(site, "/login", self._form)
        web.route(site, "/login", self._post, method="POST")
        web.route(site, "/favourites/", self._favourites)

    def _tagged(self, tag: str) -> list[Quote]:
        return [q for q in self.quotes_ if tag in q.tags]

    def _logged_in(self, h: BaseHTTPRequestHandler) -> bool:
        with self._lock:
            return request_cookie(h, SESSION_COOKIE) in self._sessions

    def _listing(self, h: BaseHTTPRequestHandler, quotes: list[Quote], n: int, pattern: str,
                 heading: str = "") -> None:
        chunk = quotes[(n - 1) * PER_PAGE: n * PER_PAGE]
        cards = []
        for q in chunk:
            tags = "".join(f'<a class="tag" href="/tag/{t}/page/1/">{t}</a>' for t in q.tags)
            cards.append(
                f'<div class="quote" itemscope itemtype="http://schema.org/CreativeWork">'
                f'<span class="text" itemprop="text">{escape(q.text)}</span>'
                f'<span>by <small class="author" itemprop="author">{escape(q.author.name)}</small>\n'
                f'<a href="{q.author.path}">(about)</a></span>'
                f'<div class="tags">Tags: <meta class="keywords" itemprop="keywords" content="{",".join(q.tags)}">'
                f'{tags}</div></div>')
        pager = []
        if n > 1:
            pager.append(f'<li class="previous"><a href="{pattern.format(n - 1)}">&larr; Previous</a></li>')
        if n * PER_PAGE < len(quotes):
            pager.append(f'<li class="next"><a href="{pattern.format(n + 1)}">Next <span>&rarr;</span></a></li>')
        top = "".join(f'<span class="tag-item"><a class="tag" href="/tag/{t}/page/1/">{t}</a></span>' for t in _TAGS)
        title = f"<h3>{escape(heading)}</h3>" if heading else ""
        body = (f'{title}<div class="col-md-8">{"".join(cards)}<nav><ul class="pager">{"".join(pager)}</ul></nav></div>'
                f'<div class="col-md-4 tags-box"><h2>Top Ten tags</h2>{top}</div>')
        _send(h, 200, self._page("Quotes to Scrape", body, self._logged_in(h)))

    def _author(self, h: BaseHTTPRequestHandler, a: Author) -> None:
        body = (f'<div class="author-details"><h3 class="author-title">{escape(a.name)}</h3>'
                f'<p><strong>Born:</strong> <span class="author-born-date">{escape(a.born_date)}</span> '
                f'<span class="author-born-location">{escape(a.born_location)}</span></p>'
                f'<strong>Description:</strong>\n<div class="author-description">\n        {escape(a.bio)}\n    </div>'
                '</div>')
        _send(h, 200, self._page(f"{a.name} | Quotes to Scrape", body, self._logged_in(h)))

    def _api(self, h: BaseHTTPRequestHandler) -> None:
        query = dict(parse_qsl(urlsplit(h.path).query))
        try:
            n = int(query.get("page", "1"))
        except ValueError:
            n = 0
        if n < 1:
            _send(h, 400, b'{"error": "page must be a positive integer"}', ctype="application/json")
            return
        chunk = self.quotes_[(n - 1) * PER_PAGE: n * PER_PAGE]
        doc = {"page": n, "has_next": n * PER_PAGE < len(self.quotes_), "tag": None,
               "quotes": [{"text": q.text, "tags": list(q.tags),
                           "author": {"name": q.author.name, "slug": q.author.slug}} for q in chunk]}
        _send(h, 200, json.dumps(doc).encode(), ctype="application/json")

    def _form(self, h: BaseHTTPRequestHandler) -> None:
        token = secrets.token_hex(16)
        with self._lock:
            self._tokens.add(token)
        form = (f'<form action="/login" method="post" accept-charset="utf-8">'
                f'<input type="hidden" name="csrf_token" value="{token}">'
                f'<div class="form-group"><label for="username">Username</label>'
                f'<input type="text" class="form-control" id="username" name="username"></div>'
                f'<div class="form-group"><label for="password">Password</label>'
                f'<input type="password" class="form-control" id="password" name="password"></div>'
                f'<input type="submit" value="Login" class="btn btn-primary"></form>')
        _send(h, 200, self._page("Login | Quotes to Scrape", form, self._logged_in(h)))

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
        form = dict(parse_qsl(raw, keep_blank_values=True))
        with self._lock:
            token = form.get("csrf_token", "")
            ok = token in self._tokens and form.get("username") == self.user and form.get("password") == self.password
            self._tokens.discard(token)  # a token serves once, right or wrong
            sid = ""
            if ok:
                self.logins += 1
                sid = secrets.token_hex(16)
                self._sessions.add(sid)
            else:
                self.refused_logins += 1
        if not ok:
            refused = '<p class="error">Error while logging in: wrong credentials or form token.</p>'
            _send(h, 200, self._page("Login | Quotes to Scrape", refused, False))
            return
        _send(h, 302, b"", headers=[("Location", "/"), ("Set-Cookie", f"{SESSION_COOKIE}={sid}; Path=/; HttpOnly")])

    def _favourites(self, h: BaseHTTPRequestHandler) -> None:
        if not self._logged_in(h):
            _send(h, 302, b"", headers=[("Location", "/login")])
            return
        rows = "".join(f'<li class="favourite"><span class="text">{escape(f["text"])}</span> '
                       f'<small class="author">{escape(f["author"])}</small></li>' for f in self.favourites())
        body = f'<h2>Favourites of <span class="user">{self.user}</span></h2><ul>{rows}</ul>'
        _send(h, 200, self._page("Favourites | Quotes to Scrape", body, True))

    @staticmethod
    def _page(title: str, body: str, logged_in: bool) -> bytes:
        account = '<a href="/favourites/">Favourites</a>' if logged_in \
            else '<a href="/login">Login</a>'
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="UTF-8"><title>{escape(title)}</title></head>'
                f'<body><div class="container"><div class="header-box row"><h1><a href="/">Quotes to Scrape</a></h1>'
                f'<p>{account}</p></div>{body}</div></body></html>').encode()


def _send(h: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str = "text/html; charset=utf-8",
          headers: list[tuple[str, str]] | None = None) -> None:
    h._send(status, body, ctype, headers=headers)  # type: ignore[attr-defined]  # TestWeb's handler
