"""URL canonical form, registered domain and scope: pure functions, no I/O."""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import tldextract
from w3lib.url import canonicalize_url

from crawler.config.settings import process_limit
from crawler.errors import BadURL, shown
from crawler.lru import LRU, str_size

# The bundled public-suffix snapshot only: a crawler worker must never download the list.
_extract = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True)

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_RE = re.compile(r"^[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?\.?$")
# Whitespace and control characters never belong in a canonical URL: the frontier, the store and
# log lines all treat a URL as one token, so one that still holds such a character is refused.
_UNSAFE_RE = re.compile(r"[\x00-\x20\x7f-\x9f]|\s")
# Click-tracking parameters: they name the campaign a link came from, never a different page, so
# URLs differing only in them are one page (fetching each variant is a duplicate fetch).
TRACKING_PARAMS = frozenset({"gclid", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "yclid", "igshid",
                             "mc_cid", "mc_eid", "_ga", "_gl", "_hsenc", "_hsmi", "mkt_tok"})
# Session-id parameters (Heritrix's and Nutch's lists): a server that keeps its session in the URL
# names the same page anew for every visitor and every visit, so each link is a "new" URL and a
# crawl follows the same few pages for ever. Names that mean nothing else are stripped whatever
# their value; ``aspsessionid`` also with ASP's eight-letter suffix (``ASPSESSIONIDQSTRCBAD``).
SESSION_PARAMS = frozenset({"jsessionid", "phpsessid", "aspsessionid", "cfid", "cftoken", "oscsid", "zenid"})
# Names that also mean something else (``sid=42``: a story id; ``session_id=7``: a conference's
# session): stripped only when the value has a session id's shape, as Heritrix's rules check
# it: an opaque token (``is_token``), or 12+ letters, digits, ``-`` or ``_`` with a digit among
# them (a session counter, a random number).
SESSION_ID_PARAMS = frozenset({"sid", "sessionid", "session_id", "sessid"})
_SESSION_ID_RE = re.compile(r"(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{12,}")
_ASP_SESSION_RE = re.compile(r"aspsessionid[a-z]{8}")
# Java's and PHP's form in the path: /page;jsessionid=0123ABC?x=1
_PATH_SESSION_RE = re.compile(r";(?:jsessionid|phpsessid)=[^/?;]*", re.IGNORECASE)
# An opaque token: 16+ characters of the alphabets session ids, nonces and cache busters are
# written in: hex with letters and digits both (UUIDs too), or a string whose characters change
# class (lower case, upper case, digit) at least every fourth character, as random base64 does
# about every second one. Punctuation separates and a capital starting a lower-case word is no
# change, so a slug (``python-3-tutorial``), a date (``2021-02-03``) or a title in CamelCase
# (``MyFavoriteRecipe2024``) is no token; neither is anything that decodes to non-ASCII text.
_TOKEN_CHARS_RE = re.compile(r"^[A-Za-z0-9_\-.~+/=]{16,}$")
_HEX_RE = re.compile(r"^(?=.*[0-9])(?=.*[a-fA-F])[0-9a-fA-F-]+$")
_CHANGE_RE = re.compile(r"(?<=[a-z])(?=[A-Z0-9])|(?<=[A-Z])(?=[0-9])|(?<=[0-9])(?=[A-Za-z])|(?<=[A-Z]{2})(?=[a-z])")

# Navigation links repeat on every page of a site. Bounded by bytes too: a site of 2 KB URLs
# would otherwise hold 200k x 4 KB per worker.
_canonical_cache: LRU[str, str] = LRU(process_limit("canonical_cache_size"), process_limit("canonical_cache_bytes"),
                                      sizeof=str_size)


def canonicalize(url: str, max_length: int = 2048, drop: frozenset[str] = frozenset()) -> str:
    """Canonical form: lower-case scheme and host, no default port, no dot segments, sorted
    query, no fragment, percent-encoding normalised, no tracking or session-id parameters (and
    none named in ``drop``, lower-case: a job's own list). Raises BadURL for what cannot be
    fetched.
    """
    out = _canonical_cache.get(url)
    # A hit from a call with a larger limit is only good if it passes this one's checks.
    if out is None or len(out) > max_length or len(url) > max_length:
        out = _canonical(url, max_length)
        _canonical_cache.put(url, out)
    return strip_params(out, drop) if drop and "?" in out else out


def redirect_target(url: str) -> str:
    """A redirect's Location as the next hop requests it: canonical, but with its session id
    kept. A server that puts the session in the URL (``/shop`` -> ``/shop;jsessionid=...`` for a
    client without cookies) serves the page only at the URL it named; the page is stored under
    its canonical URL all the same."""
    return _canonical(url, 2048, sessions=False)


def _canonical(url: str, max_length: int, sessions: bool = True) -> str:
    url = url.strip()
    if len(url) > max_length:
        raise BadURL(f"URL longer than {max_length} characters")
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise BadURL(f"scheme {shown(scheme) if scheme else '(none)'} is not http or https")
        host = parts.hostname
        port = parts.port
    except ValueError as exc:
        raise BadURL(str(exc)) from exc
    if not host:
        raise BadURL("URL has no host")
    if "[" in parts.netloc.rsplit("@", 1)[-1]:
        _check_ip_literal(host)
    if ":" not in host and not _HOST_RE.match(host):
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise BadURL(f"invalid host {shown(host)}") from exc
        if not _HOST_RE.match(host):
            raise BadURL(f"invalid host {shown(host)}")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    # Userinfo is dropped on purpose: credentials in links are never sent.
    rebuilt = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
    try:
        out = canonicalize_url(rebuilt, keep_fragments=False)
    except (ValueError, UnicodeError) as exc:
        raise BadURL(str(exc)) from exc
    if ";" in out and sessions:
        out = _PATH_SESSION_RE.sub("", out)
    if "?" in out:
        out = strip_tracking(out, sessions)
    if len(out) > max_length:
        raise BadURL(f"URL longer than {max_length} characters")
    bad = _UNSAFE_RE.search(out)
    if bad:
        raise BadURL(f"URL holds whitespace or a control character ({bad.group()!r})")
    return out


def _check_ip_literal(host: str) -> None:
    """A bracketed host must be a plain IPv6 address: an IPvFuture literal (``[v1.x]``) names
    nothing we can connect to and may hold any character, and a zone id (``%25eth0``) names an
    interface of whichever machine reads it."""
    if host[:1] in ("v", "V"):
        raise BadURL(f"IPvFuture host {shown(host, 60)} is not supported")
    if "%" in host:
        raise BadURL("IPv6 zone ids are not allowed in URLs")
    try:
        ipaddress.IPv6Address(host)
    except ValueError as exc:
        raise BadURL(f"invalid IPv6 host {shown(host, 60)}") from exc


def strip_tracking(url: str, sessions: bool = True) -> str:
    """Drop ``utm_*`` and other click-tracking parameters, and (with ``sessions``) session ids,
    from a canonical URL's query (its encoding and order untouched)."""
    head, query = url.split("?", 1)
    kept = [p for p in query.split("&") if not _is_tracking(p, sessions)]
    return f"{head}?{'&'.join(kept)}" if kept else head


def strip_params(url: str, names: frozenset[str]) -> str:
    """Drop the query parameters named in ``names`` (lower-case) from a canonical URL."""
    head, query = url.split("?", 1)
    kept = [p for p in query.split("&") if p.split("=", 1)[0].lower() not in names]
    return f"{head}?{'&'.join(kept)}" if kept else head


def _is_tracking(param: str, sessions: bool = True) -> bool:
    name, _, value = param.partition("=")
    name = name.lower()
    if name.startswith("utm_") or name in TRACKING_PARAMS:
        return True
    return sessions and (
        name in SESSION_PARAMS
        or (name in SESSION_ID_PARAMS and (_SESSION_ID_RE.fullmatch(value) is not None or is_token(value)))
        or (name.startswith("aspsessionid") and _ASP_SESSION_RE.fullmatch(name) is not None))


def is_token(value: str) -> bool:
    """Whether a query value (as a canonical URL writes it) looks like an opaque token (a
    session id, a nonce, a cache buster) rather than a word, a slug, a date or a number."""
    if "%" in value:
        value = unquote(value)
        if not value.isascii():
            return False
    if _TOKEN_CHARS_RE.match(value) is None:
        return False
    if _HEX_RE.match(value):
        return True
    return len(_CHANGE_RE.findall(value)) * 4 >= len(value)


def token_shape(url: str) -> str | None:
    """A canonical URL's path and query with every token-like value replaced by ``*``
    (``/s?a=1&t=*``), or None if its query holds no token. Links that share a shape differ only
    in opaque values: the variants a session-id or nonce trap makes of one page."""
    if "?" not in url:
        return None
    head, query = url.split("?", 1)
    params = query.split("&")
    shaped = [(n + "=*") if is_token(v) else p for p in params for n, _, v in (p.partition("="),)]
    if shaped == params:
        return None
    return f"{head}?{'&'.join(shaped)}"


# An http(s) URL whose authority is plain printable ASCII (no brackets, no spaces or controls),
# ended by a path, query or fragment or by the URL's end: what canonical URLs are, and then its
# netloc is just that stretch of it, as urlsplit would find (which costs ten times as much).
_PLAIN_NETLOC = re.compile(r"https?://([!-\"$-.0->@-Z\\^-~]*)(?=[/?#]|\Z)")


def netloc_of(url: str) -> str:
    """``urlsplit(url).netloc``, quickly for the URLs a crawl asks it of by the thousand."""
    m = _PLAIN_NETLOC.match(url)
    return m.group(1) if m is not None else urlsplit(url).netloc


def host_key(url: str) -> str:
    """The politeness unit: host and explicit port of a canonical URL."""
    return netloc_of(url)


@lru_cache(maxsize=100_000)
def registered_domain(host: str) -> str:
    """Public-suffix-aware registered domain of a host (``a.b.example.co.uk`` ->
    ``example.co.uk``); an IP address or a single-label name is its own domain."""
    host = host.lower().rsplit("@", 1)[-1]
    if host.startswith("["):
        return host[: host.index("]") + 1]
    host = host.split(":", 1)[0]
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    rd = _extract(host).top_domain_under_public_suffix
    return rd or host


def domain_of(url: str) -> str:
    return registered_domain(netloc_of(url))


def repeated_segments(url: str) -> int:
    """How often the most repeated path segment occurs (``/a/b/a/b/a`` -> 3): the mark of a
    relative-link loop that makes ever-longer URLs for the same pages."""
    segments = [s for s in urlsplit(url).path.split("/") if s]
    return max((segments.count(s) for s in set(segments)), default=0)


def query_variant(url: str, of: str) -> bool:
    """True if two canonical URLs name the same scheme, host and path and differ only in their
    query (``/s?sid=1`` and ``/s?sid=2``, or ``/s`` and ``/s?sid=2``): the shape of a session-id
    or sort-order trap."""
    if url == of:
        return False
    a, b = url.split("?", 1)[0], of.split("?", 1)[0]
    return a == b


_PAGE_NUMBER_RE = re.compile(r"[0-9]{1,5}")  # a page or an offset; a numeric session id is longer


def paged_variant(url: str, of: str) -> bool:
    """True if two query variants (``query_variant``) differ in one parameter only, a small number
    on each side that has it (``/list?page=2`` and ``/list?page=1``, or ``/list`` and
    ``/list?page=2``): the shape of pagination, whose pages share a template and little else.
    A trap can take that shape too (an endless "next"): the caller caps how many it follows."""
    mine, theirs = _params(url), _params(of)
    differ = [n for n in mine.keys() | theirs.keys() if mine.get(n) != theirs.get(n)]
    return len(differ) == 1 and all(_PAGE_NUMBER_RE.fullmatch(v) for v in (*mine.get(differ[0], ()),
                                                                             *theirs.get(differ[0], ())))


def _params(url: str) -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        found.setdefault(name, []).append(value)
    return {n: tuple(v) for n, v in found.items()}


def in_scope(url: str, allowed: frozenset[str]) -> bool:
    """True if the URL's registered domain is one of ``allowed`` (empty: everything)."""
    return not allowed or domain_of(url) in allowed
