"""The crawler's exception tree and its stable reason codes.

``CrawlerError`` is the root of every error the crawler raises on purpose: ``crawler``'s
command line prints these as one line and lets anything else show as the bug it is. Below it:

- ``CrawlError``: one URL could not be crawled. Its ``reason`` (a ``Reason``) is what the
  ``error`` column and the ``error:<reason>`` counters hold. ``Retryable`` failures may succeed
  later (the frontier may try again); ``Permanent`` ones will not. Lower layers (httpx, lxml,
  sockets) are translated into these at the edge.
- ``ConfigError``: a setting, flag or argument cannot be used (also a ``ValueError``).
- ``JobNotFound``: no job has that id (also a ``KeyError``).
- ``StoreError``: the store's own failures (``crawler.store.base``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar


class Reason(StrEnum):
    """Why a URL failed, as stored and counted. The values are persisted (the ``error`` column,
    ``error:<reason>`` counters, the Lua scripts' counters): never change one."""

    # The abstract classes' codes; nothing raises these directly.
    ERROR = "error"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"

    DNS = "dns"
    CONNECT = "connect"
    TIMEOUT = "timeout"
    HTTP_5XX = "http_5xx"
    HTTP_429 = "http_429"
    PROTOCOL = "protocol"
    ROBOTS_UNAVAILABLE = "robots_unavailable"
    TLS = "tls"
    HTTP_4XX = "http_4xx"
    TOO_LARGE = "too_large"
    REDIRECT_LOOP = "redirect_loop"
    TOO_MANY_REDIRECTS = "too_many_redirects"
    BLOCKED_NETWORK = "blocked_network"
    OUT_OF_SCOPE = "out_of_scope"
    ROBOTS = "robots"
    NOT_HTML = "not_html"
    REFUSED_TYPE = "refused_type"
    LEASE_EXPIRED = "lease_expired"
    BAD_URL = "bad_url"
    DECODE = "decode"
    UNSUPPORTED_ENCODING = "unsupported_encoding"
    INTERNAL = "internal"


class CrawlerError(Exception):
    """An error the crawler raises on purpose, with a message fit to show an operator as is."""


class ConfigError(CrawlerError, ValueError):
    """A setting, flag or argument cannot be used; the message names it, in one line."""


class JobStateConflict(CrawlerError):
    """The job is not in a state the operation applies to (pausing a stopped job)."""


class JobNotFound(CrawlerError, KeyError):
    """No job has this id (in Redis, or in the store being recovered from). A ``KeyError`` too,
    so callers that catch that still do; ``args[0]`` is the one-line message."""


class StoreError(CrawlerError):
    """A store could not be opened, used or written: see ``crawler.store.base``."""


class CrawlError(CrawlerError):
    """One URL could not be crawled, for the reason ``reason``."""

    reason: ClassVar[Reason] = Reason.ERROR


class Retryable(CrawlError):
    """May succeed later: the frontier may try the URL again."""

    reason = Reason.RETRYABLE


class Permanent(CrawlError):
    """Will not succeed by trying again: the failure is final."""

    reason = Reason.PERMANENT


class DNSError(Retryable):
    """The host name did not resolve."""

    reason = Reason.DNS


class ConnectError(Retryable):
    """The connection was refused or reset."""

    reason = Reason.CONNECT


class FetchTimeout(Retryable):
    """A connect, read or total deadline passed."""

    reason = Reason.TIMEOUT


class HTTP5xx(Retryable):
    """The server answered 5xx."""

    reason = Reason.HTTP_5XX


class HTTP429(Retryable):
    """The server asked us to slow down."""

    reason = Reason.HTTP_429


class ProtocolError(Retryable):
    """The server broke the HTTP protocol."""

    reason = Reason.PROTOCOL


class RobotsUnavailable(Retryable):
    """robots.txt answered 5xx or not at all: the host is off limits until it answers."""

    reason = Reason.ROBOTS_UNAVAILABLE


class TLSError(Permanent):
    """The TLS handshake failed."""

    reason = Reason.TLS


class HTTP4xx(Permanent):
    """The server answered 4xx."""

    reason = Reason.HTTP_4XX


class TooLarge(Permanent):
    """The body passed the size cap; it was cut."""

    reason = Reason.TOO_LARGE


class RedirectLoop(Permanent):
    """A redirect came back to a URL already in its chain."""

    reason = Reason.REDIRECT_LOOP


class TooManyRedirects(Permanent):
    """The redirect chain passed the cap."""

    reason = Reason.TOO_MANY_REDIRECTS


class BlockedNetwork(Permanent):
    """The address is loopback, private, link-local, multicast or reserved."""

    reason = Reason.BLOCKED_NETWORK


class OutOfScope(Permanent):
    """A redirect left the job's allowed domains."""

    reason = Reason.OUT_OF_SCOPE


class RobotsDisallowed(Permanent):
    """robots.txt disallows the URL."""

    reason = Reason.ROBOTS


class NotHTML(Permanent):
    """Not HTML: stored as metadata, body not read or parsed."""

    reason = Reason.NOT_HTML


class RefusedType(Permanent):
    """A content type the job refuses (``refuse_types``): stored as metadata, body not read."""

    reason = Reason.REFUSED_TYPE


class LeaseExpired(Permanent):
    """Workers took the URL and never finished it, max_attempts times over."""

    reason = Reason.LEASE_EXPIRED


class BadURL(Permanent):
    """The URL cannot be fetched (scheme, syntax, length)."""

    reason = Reason.BAD_URL


class Decode(Permanent):
    """The body could not be decoded."""

    reason = Reason.DECODE


class UnsupportedEncoding(Permanent):
    """The body's Content-Encoding is not gzip, deflate or br (or is stacked too deep)."""

    reason = Reason.UNSUPPORTED_ENCODING


class Internal(Permanent):
    """The crawler itself failed on this URL (a bug, not the site's doing)."""

    reason = Reason.INTERNAL


# Every concrete code and its class, in the README's order; the abstract codes are not here.
REASONS: dict[str, type[CrawlError]] = {
    cls.reason: cls
    for cls in (DNSError, ConnectError, FetchTimeout, HTTP5xx, HTTP429, TLSError, HTTP4xx, TooLarge,
                RedirectLoop, TooManyRedirects, BadURL, Decode, UnsupportedEncoding, ProtocolError,
                BlockedNetwork, OutOfScope, RobotsDisallowed, NotHTML, RefusedType, LeaseExpired, RobotsUnavailable,
                Internal)
}


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for echoing what a user gave in an
    error line: a 2 MB argument must not become a 2 MB message."""
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, str):
        return f"{text[: limit - 20]}... ({len(value)} characters)"
    return f"{text[: limit - 3]}..."
