"""``Session``: what a spider's ``login`` hook gets to log in with.

Its requests go through the job's guarded HTTP client (the network guard, resolve map, timeouts
and body cap of every fetch), robots.txt and the job's scope are asked for each URL and redirect
hop, and the cookies the site sets are kept in the session's own jar, which becomes the job's
shared session when the hook returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol, TypeVar
from urllib.parse import urlencode, urlsplit, urlunsplit

from crawler.config.credentials import AuthRule, Secrets
from crawler.fetch.client import FetchConfig, FetchResult, HopCheck, Hops
from crawler.fetch.jar import CookieJar
from crawler.spiders.forms import form_values, merge
from crawler.spiders.page import Page

T = TypeVar("T")


class LoginFailed(Exception):
    """Raise from ``login`` to say the site did not let the spider in; counted
    ``login_failed:<reason>`` (default ``rejected``). The crawler raises it too, for a login
    request robots.txt or the job's scope refuses (``robots``, ``out_of_scope``) or one that
    got no answer (its fetch error)."""

    def __init__(self, message: str, reason: str = "rejected") -> None:
        super().__init__(message)
        self.reason = reason


class Requester(Protocol):
    async def request(self, method: str, url: str, config: FetchConfig, check: HopCheck | None = None,
                      headers: Sequence[tuple[str, str]] = (), hops: Hops | None = None,
                      body: bytes = b"") -> FetchResult:
        ...


class SessionHops:
    """Per hop: the session's default headers, its cookies for that URL and the credentials for
    that host only (a redirect to another host does not take them along); every response's
    Set-Cookie goes into the jar."""

    def __init__(self, jar: CookieJar, secrets: Secrets, auth: Sequence[AuthRule] = (),
                 default_headers: Sequence[tuple[str, str]] = ()) -> None:
        self.jar = jar
        self.secrets = secrets
        self.auth = auth
        self.default_headers = default_headers
        self.changed: list[Any] = []  # cookies set or deleted since created, for sharing

    def headers(self, url: str) -> list[tuple[str, str]]:
        out = list(self.default_headers)
        cookie = self.jar.header(url)
        if cookie:
            out.append(("Cookie", cookie))
        if self.auth:
            auth = self.secrets.auth_header(self.auth, urlsplit(url).hostname or "")
            if auth is not None:
                out.append(auth)
        return out

    def received(self, url: str, headers: Sequence[tuple[str, str]]) -> None:
        self.changed += self.jar.update(url, headers)


class Session:
    """``get``, ``post`` and ``submit_form`` return a ``Page``; ``secret(name)`` reads a secret
    from the worker; ``cookies`` shows what the site has set so far (read-only)."""

    def __init__(self, requester: Requester, config: FetchConfig, run: Callable[[Coroutine[Any, Any, T]], T],
                 hops: SessionHops, allowed: Callable[[str], Awaitable[str | None]] | None = None) -> None:
        self._requester = requester
        self._config = config
        self._run: Callable[[Coroutine[Any, Any, Any]], Any] = run
        self._hops = hops
        self._allowed = allowed
        self.requests = 0

    @property
    def jar(self) -> CookieJar:
        return self._hops.jar

    @property
    def cookies(self) -> Mapping[str, str]:
        return MappingProxyType({c.name: c.value for c in self._hops.jar})

    def secret(self, name: str) -> str:
        """The value of secret ``name`` on this worker (``CRAWLER_SECRET_<NAME>`` or the secrets
        file); MissingSecret, naming it, if it is not set. Never log or yield what it returns."""
        return self._hops.secrets.get(name)

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> Page:
        return self._request("GET", url, headers)

    def post(self, url: str, data: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
             headers: Mapping[str, str] | None = None) -> Page:
        """POST ``data`` form-encoded (application/x-www-form-urlencoded)."""
        extra = {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
        return self._request("POST", url, extra, urlencode(list(_pairs(data))).encode())

    def submit_form(self, page: Page, fields: Mapping[str, str] | None = None, form_css: str | None = None,
                    headers: Mapping[str, str] | None = None) -> Page:
        """Submit a form of ``page`` (the first, or the first ``form_css`` matches) as a browser
        would: its inputs with their values (hidden ones such as CSRF tokens included, checked
        boxes only, a select's selected option), ``fields`` replacing or adding, sent to its
        action (default: the page) with its method (default GET)."""
        forms = page.css(form_css or "form")
        if not forms:
            raise LoginFailed(f"no form {form_css or ''} on {page.final_url}".replace("  ", " "), "no_form")
        form = forms[0]
        values = merge(form_values(form), fields)
        action = page.urljoin(form.attrib.get("action", "") or page.final_url)
        method = form.attrib.get("method", "GET").strip().upper()
        if method == "POST":
            return self.post(action, values, headers)
        parts = urlsplit(action)
        return self.get(urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(values), "")), headers)

    def _request(self, method: str, url: str, headers: Mapping[str, str] | None, body: bytes = b"") -> Page:
        self.requests += 1
        # Messages name the URL without its query: a form sent by GET carries its fields there.
        shown = url.split("?", 1)[0]
        reason = self._run(self._check(url))
        if reason:
            raise LoginFailed(f"{method} {shown}: refused ({reason})", reason)
        r = self._run(self._requester.request(method, url, self._config, self._allowed,
                                              tuple((headers or {}).items()), self._hops, body))
        if r.status is None:
            raise LoginFailed(f"{method} {shown}: {r.error}", r.error or "error")
        return Page(url, final_url=r.final_url, status=r.status, headers=r.headers, body=r.body, error=r.error)


    async def _check(self, url: str) -> str | None:
        return await self._allowed(url) if self._allowed is not None else None


def _pairs(data: Mapping[str, str] | Sequence[tuple[str, str]] | None) -> list[tuple[str, str]]:
    if data is None:
        return []
    return list(data.items()) if isinstance(data, Mapping) else list(data)
