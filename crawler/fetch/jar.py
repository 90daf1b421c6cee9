"""A bounded cookie jar for one job's session: which cookies a response sets, which a request
sends (domain, path, expiry and secure matching, RFC 6265), and nothing past its bounds.

Pure logic: the fetch stage keeps a job's cookies in Redis (``crawler.spiders.sessionstate``,
each ``Cookie.encode`` sealed with the workers' key, never in the clear) so every worker shares
one login, and builds a jar from them per task. The shared HTTP client keeps no cookies at all
(``crawler.fetch.cookies``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

MAX_COOKIES = 64  # per job: a site setting a new cookie per page cannot grow the jar
MAX_COOKIE_BYTES = 4096  # name + value, the size browsers keep at least (RFC 6265 6.1)


@dataclass(frozen=True)
class Cookie:
    name: str
    value: str
    domain: str  # lower case, no leading dot
    path: str = "/"
    host_only: bool = True  # no Domain attribute: sent to exactly this host
    secure: bool = False
    expires: float = 0.0  # 0: until the session ends (the job's, here)

    @property
    def key(self) -> str:
        """What identifies the cookie: a later one with the same key replaces it."""
        return f"{self.domain}\t{self.path}\t{self.name}"

    def encode(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str | bytes) -> Cookie | None:
        try:
            return cls(**json.loads(raw))
        except (ValueError, TypeError):
            return None

    def expired(self, now: float) -> bool:
        return bool(self.expires) and self.expires <= now

    def matches(self, url: str, now: float) -> bool:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if self.expired(now) or (self.secure and parts.scheme != "https"):
            return False
        if self.host_only:
            if host != self.domain:
                return False
        elif not domain_match(host, self.domain):
            return False
        return path_match(parts.path or "/", self.path)


def domain_match(host: str, domain: str) -> bool:
    if host == domain:
        return True
    # An IP address matches only itself: "1.1" must not match "127.0.1.1".
    return host.endswith("." + domain) and not host.replace(".", "").isdigit()


def path_match(path: str, cookie_path: str) -> bool:
    if path == cookie_path:
        return True
    if not path.startswith(cookie_path):
        return False
    return cookie_path.endswith("/") or path[len(cookie_path)] == "/"


def default_path(path: str) -> str:
    if not path.startswith("/") or path.count("/") == 1:
        return "/"
    return path[: path.rfind("/")]


def parse_set_cookie(header: str, url: str, now: float | None = None) -> Cookie | None:
    """The cookie a ``Set-Cookie`` header on a response from ``url`` sets, or None for one a
    browser would ignore (no name, a Domain the host is not in, too big). An expired one (a
    deletion) comes back with its past expiry."""
    now = time.time() if now is None else now
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    pair, *attrs = header.split(";")
    name, sep, value = pair.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not host or len(name) + len(value) > MAX_COOKIE_BYTES:
        return None
    domain, host_only, path, secure, expires = host, True, "", False, 0.0
    max_age: float | None = None
    for attr in attrs:
        key, _, val = attr.partition("=")
        key, val = key.strip().lower(), val.strip()
        if key == "domain" and val:
            d = val.lstrip(".").lower()
            if not domain_match(host, d):
                return None
            domain, host_only = d, d == host and host.replace(".", "").isdigit()
        elif key == "path" and val.startswith("/"):
            path = val
        elif key == "secure":
            secure = True
        elif key == "max-age":
            try:
                max_age = float(int(val))
            except ValueError:
                continue
        elif key == "expires" and val:
            try:
                expires = parsedate_to_datetime(val).timestamp()
            except (TypeError, ValueError):
                continue
    if max_age is not None:  # Max-Age wins over Expires
        expires = now + max_age if max_age > 0 else now - 1
    return Cookie(name, value, domain, path or default_path(parts.path), host_only, secure, expires)


class CookieJar:
    """At most ``max_cookies`` cookies; past that, new ones are dropped and counted in
    ``overflow`` (cookies already held keep being updated)."""

    def __init__(self, cookies: Iterable[Cookie] = (), max_cookies: int = MAX_COOKIES) -> None:
        self.max_cookies = max_cookies
        self.overflow = 0
        self._cookies: dict[str, Cookie] = {}
        for c in cookies:
            self.set(c)

    def __iter__(self) -> Iterator[Cookie]:
        return iter(list(self._cookies.values()))

    def __len__(self) -> int:
        return len(self._cookies)

    def set(self, cookie: Cookie, now: float | None = None) -> bool:
        """Keep (or, expired, delete) ``cookie``; False if it was dropped for the bound."""
        if cookie.expired(time.time() if now is None else now):
            self._cookies.pop(cookie.key, None)
            return True
        if cookie.key not in self._cookies and len(self._cookies) >= self.max_cookies:
            self.overflow += 1
            return False
        self._cookies[cookie.key] = cookie
        return True

    def update(self, url: str, headers: Iterable[tuple[str, str]], now: float | None = None) -> list[Cookie]:
        """Take the ``Set-Cookie`` headers of a response from ``url``; returns the cookies they
        set or deleted (for the caller to share)."""
        now = time.time() if now is None else now
        changed = []
        for name, value in headers:
            if name.lower() != "set-cookie":
                continue
            cookie = parse_set_cookie(value, url, now)
            if cookie is not None and self.set(cookie, now):
                changed.append(cookie)
        return changed

    def header(self, url: str, now: float | None = None) -> str:
        """The ``Cookie`` header for a request to ``url`` ("" if none): longer paths first."""
        now = time.time() if now is None else now
        sent = sorted((c for c in self._cookies.values() if c.matches(url, now)), key=lambda c: -len(c.path))
        return "; ".join(f"{c.name}={c.value}" for c in sent)
