"""A login-protected section for the loopback test web: a form login (with a CSRF token) that
sets a session cookie, member pages that redirect to the form without it, and structured records
on those pages for a spider to extract.

``records`` says what a correct spider extracts, from the generated data, not from the pages;
``logins`` counts successful logins and ``expire_all`` ends every session, as a site does when
its sessions time out, so tests can see a crawl log in again.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote, urlsplit

from crawler.testweb.server import request_cookie

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

    from crawler.testweb.server import TestWeb

SESSION_COOKIE = "sid"
_OWNERS = ("ada", "grace", "edsger", "barbara", "donald", "frances", "ken", "radia")


class LoginSite:
    """``records`` member pages behind a form login for ``user``/``password``."""

    def __init__(self, user: str = "reader", password: str = "", records: int = 24, seed: int = 5,
                 login_delay: float = 0.0) -> None:
        self.user = user
        self.login_delay = login_delay  # seconds a login POST takes: others have to wait for it
        self.password = password or "pw-" + secrets.token_hex(12)
        rng = random.Random(seed)
        self.rows: list[dict[str, Any]] = [
            {"id": f"R-{1000 + i}", "title": f"Member note {i + 1}", "owner": _OWNERS[i % len(_OWNERS)],
             "amount": round(rng.uniform(1, 500), 2)} for i in range(records)]
        self.logins = 0  # successful login POSTs
        self.failed_logins = 0
        self.protected_served = 0  # member pages answered with their content
        self._sessions: set[str] = set()
        self.issued: list[str] = []  # every session id handed out, for tests to look for
        self._tokens: set[str] = set()
        self._lock = threading.Lock()

    # -- what a spider should find ---------------------------------------------------------
    @staticmethod
    def record_path(i: int) -> str:
        return f"/members/record-{i + 1}.html"

    def records(self, origin: str) -> list[dict[str, Any]]:
        return [{**row, "url": origin + self.record_path(i)} for i, row in enumerate(self.rows)]

    def protected_paths(self) -> list[str]:
        return ["/members/", *(self.record_path(i) for i in range(len(self.rows)))]

    def expire_all(self) -> None:
        with self._lock:
            self._sessions.clear()

    # -- serving ---------------------------------------------------------------------------
    def mount(self, web: TestWeb, site: int) -> None:
        web.route(site, "/", lambda h: _send(h, 200, _page("Welcome", '<p><a href="/members/">Members</a></p>')))
        web.route(site, "/login", self._form, any_query=True)
        web.route(site, "/login", self._post, method="POST")
        web.route(site, "/members/", lambda h: self._protected(h, "/members/", self._index()))
        for i in range(len(self.rows)):
            web.route(site, self.record_path(i),
                      lambda h, i=i: self._protected(h, self.record_path(i), self._record(i)))  # type: ignore[misc]

    def _form(self, h: BaseHTTPRequestHandler, error: str = "") -> None:
        token = secrets.token_hex(16)
        with self._lock:
            self._tokens.add(token)
        nxt = dict(parse_qsl(urlsplit(h.path).query)).get("next", "/members/")
        err = f"<p class=error>{escape(error)}</p>" if error else ""
        form = (f'{err}<form id=login action="/login" method="post">'
                f'<input type=hidden name=csrf value="{token}"><input type=hidden name=next value="{escape(nxt)}">'
                f'<input name=username><input type=password name=password>'
                f'<input type=checkbox name=remember value=yes><button type=submit>Sign in</button></form>')
        _send(h, 200, _page("Sign in", form))

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
        form = dict(parse_qsl(raw, keep_blank_values=True))
        if self.login_delay:
            time.sleep(self.login_delay)
        with self._lock:
            token_ok = form.get("csrf", "") in self._tokens
            self._tokens.discard(form.get("csrf", ""))
            ok = token_ok and form.get("username") == self.user and form.get("password") == self.password
            if not ok:
                self.failed_logins += 1
            else:
                self.logins += 1
                sid = secrets.token_hex(16)
                self._sessions.add(sid)
                self.issued.append(sid)
        if not ok:
            _send(h, 200, _page("Sign in", "<p class=error>wrong user name, password or form token</p>"
                                           '<form id=login action="/login" method="post"></form>'))
            return
        nxt = form.get("next", "/members/")
        location = nxt if nxt.startswith("/") and not nxt.startswith("//") else "/members/"
        _send(h, 302, b"", [("Location", location),
                             ("Set-Cookie", f"{SESSION_COOKIE}={sid}; Path=/; HttpOnly; SameSite=Lax")])

    def _protected(self, h: BaseHTTPRequestHandler, path: str, body: bytes) -> None:
        with self._lock:
            valid = request_cookie(h, SESSION_COOKIE) in self._sessions
            if valid:
                self.protected_served += 1
        if not valid:
            _send(h, 302, b"", [("Location", "/login?next=" + quote(path, safe=""))])
            return
        # A preference cookie set by a crawled page: the session's jar must keep it too.
        _send(h, 200, body, [("Set-Cookie", "view=compact; Path=/members/")] if path == "/members/" else [])

    def _index(self) -> bytes:
        links = "".join(f'<li><a href="{self.record_path(i)}">{escape(r["title"])}</a></li>'
                        for i, r in enumerate(self.rows[: len(self.rows) // 2]))
        return _page("Members", f"<h1>Members</h1><ul>{links}</ul>")

    def _record(self, i: int) -> bytes:
        r = self.rows[i]
        nxt = f'<a rel=next href="record-{i + 2}.html">next</a>' if i + 1 < len(self.rows) else ""
        return _page(r["title"], f'<div class=record data-id="{r["id"]}"><h1>{escape(r["title"])}</h1>'
                                 f'<dl><dt>Owner</dt><dd class=owner>{r["owner"]}</dd>'
                                 f'<dt>Amount</dt><dd class=amount>{r["amount"]:.2f}</dd></dl></div>{nxt}')


def _send(h: BaseHTTPRequestHandler, status: int, body: bytes, headers: list[tuple[str, str]] | None = None) -> None:
    h._send(status, body, headers=headers)  # type: ignore[attr-defined]  # TestWeb's handler


def _page(title: str, body: str) -> bytes:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title></head>"
            f"<body>{body}</body></html>").encode()
