"""One exception tree with stable reason codes, used in counters and the ``error`` column.

``Retryable`` failures may succeed later (the frontier may try again); ``Permanent`` ones will
not. Lower layers (httpx, lxml, sockets) are translated into these at the edge.
"""

from __future__ import annotations


class CrawlError(Exception):
    reason = "error"


class Retryable(CrawlError):
    reason = "retryable"


class Permanent(CrawlError):
    reason = "permanent"


def _define(name: str, base: type[CrawlError], reason: str, doc: str) -> type[CrawlError]:
    return type(name, (base,), {"reason": reason, "__doc__": doc})


DNSError = _define("DNSError", Retryable, "dns", "The host name did not resolve.")
ConnectError = _define("ConnectError", Retryable, "connect", "The connection was refused or reset.")
TimeoutError_ = _define("TimeoutError_", Retryable, "timeout",
                        "A connect, read or total deadline passed.")
HTTP5xx = _define("HTTP5xx", Retryable, "http_5xx", "The server answered 5xx.")
HTTP429 = _define("HTTP429", Retryable, "http_429", "The server asked us to slow down.")
TLSError = _define("TLSError", Permanent, "tls", "The TLS handshake failed.")
HTTP4xx = _define("HTTP4xx", Permanent, "http_4xx", "The server answered 4xx.")
TooLarge = _define("TooLarge", Permanent, "too_large", "The body passed the size cap; it was cut.")
RedirectLoop = _define("RedirectLoop", Permanent, "redirect_loop",
                       "A redirect came back to a URL already in its chain.")
TooManyRedirects = _define("TooManyRedirects", Permanent, "too_many_redirects", "The redirect chain passed the cap.")
BlockedNetwork = _define("BlockedNetwork", Permanent, "blocked_network",
                         "The address is loopback, private, link-local, multicast or reserved.")
OutOfScope = _define("OutOfScope", Permanent, "out_of_scope", "A redirect left the job's allowed domains.")
RobotsDisallowed = _define("RobotsDisallowed", Permanent, "robots", "robots.txt disallows the URL.")
NotHTML = _define("NotHTML", Permanent, "not_html", "Not HTML: stored as metadata, body not read or parsed.")
LeaseExpired = _define("LeaseExpired", Permanent, "lease_expired",
                       "Workers took the URL and never finished it, max_attempts times over.")
BadURL = _define("BadURL", Permanent, "bad_url", "The URL cannot be fetched (scheme, syntax, length).")
Decode = _define("Decode", Permanent, "decode", "The body could not be decoded.")
UnsupportedEncoding = _define("UnsupportedEncoding", Permanent, "unsupported_encoding",
                              "The body's Content-Encoding is not gzip, deflate or br (or is stacked too deep).")
RobotsUnavailable = _define("RobotsUnavailable", Retryable, "robots_unavailable",
                            "robots.txt answered 5xx or not at all: the host is off limits until it answers.")
ProtocolError = _define("ProtocolError", Retryable, "protocol", "The server broke the HTTP protocol.")

REASONS: dict[str, type[CrawlError]] = {
    cls.reason: cls
    for cls in (DNSError, ConnectError, TimeoutError_, HTTP5xx, HTTP429, TLSError, HTTP4xx, TooLarge,
                RedirectLoop, TooManyRedirects, BadURL, Decode, ProtocolError, BlockedNetwork, OutOfScope,
                RobotsDisallowed, NotHTML, LeaseExpired, RobotsUnavailable,
                UnsupportedEncoding)
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
