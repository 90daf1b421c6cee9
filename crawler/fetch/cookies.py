"""The HTTP client's cookie jar, which keeps nothing.

One client serves every job in a worker process, so a jar on it would carry job A's cookies into
job B's requests (and WARC records), and grow with every Set-Cookie a host sends: a host setting
a new cookie per page got back thousands in one header and answered 431. No job wants a session
today, so there is no jar at all; a later sessions feature should keep a bounded jar per job and
send its Cookie header through the fetcher's per-URL request headers, never through the client.
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
