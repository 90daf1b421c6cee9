"""The HTTP client's cookie jar, which keeps nothing.

One client serves every job in a worker process, so a jar on it would carry job A's cookies into
job B's requests (and WARC records), and grow with every Set-Cookie a host sends: a host setting
a new cookie per page got back thousands in one header and answered 431. So the client has no jar
at all: a job that keeps a session has a bounded jar of its own (``crawler.fetch.jar``, shared
through Redis sealed with the workers' key by ``crawler.spiders.sessionstate``), whose Cookie
header goes through the fetcher's per-hop request headers, never through the client.
"""

from __future__ import annotations

from http.cookiejar import Cookie, CookieJar
from typing import Any


class NoCookies(CookieJar):
    """A jar that stores nothing: Set-Cookie is not even parsed, so no Cookie header is sent."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        pass

    def set_cookie(self, cookie: Cookie) -> None:
        pass

    def set_cookie_if_ok(self, cookie: Cookie, request: Any) -> None:
        pass
