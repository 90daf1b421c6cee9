"""``Request``: what a spider yields to have a page fetched, and what to do with it.

A request names its ``callback`` (a method of the spider; default ``parse``) and ``errback``
(default ``on_error``) by name, as Scrapy's own persistence does, so it can travel between
workers and survive in Redis and the store. ``cb_kwargs`` and ``meta`` must be JSON-able.

In the frontier a request is a *key* (``request_key``): for a plain GET without a body the
canonical URL itself, so it deduplicates against the links the crawler extracts; for another
method or a body ``canonical_url + "#~" + fingerprint`` (canonical URLs never carry a fragment,
so no link has one); for ``dont_filter`` ``URL#~u<hash>`` of the request's origin (the page
and fetch that yielded it, its position among what that callback yielded) and fingerprint: unique
among the requests a crawl makes, so it passes dedup, yet the same when the same fetch is parsed
again (a redelivered message, an expired lease), so a repeat parse adds nothing. Its *spec*
(everything but the URL, only the fields that differ from the defaults, as compact JSON) is kept
beside it (``to_spec``/``from_spec``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: What separates a request key's URL from its marker. Canonical URLs have no fragment.
MARK = "#~"


def _name(fn: Any) -> str | None:
    """A callback given as a name, a bound method or a function: stored by its name."""
    if fn is None or fn == "":
        return None
    if isinstance(fn, str):
        return fn
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(f"a callback must be a method of the spider or its name, not {type(fn).__name__}")
    return name


def _headers(headers: Any) -> dict[str, str]:
    if not headers:
        return {}
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    out: dict[str, str] = {}
    for k, v in pairs:
        if isinstance(k, bytes):
            k = k.decode("latin-1")
        if isinstance(v, (list, tuple)):  # Scrapy's Headers hold lists of values
            v = ", ".join(x.decode("latin-1") if isinstance(x, bytes) else str(x) for x in v)
        elif isinstance(v, bytes):
            v = v.decode("latin-1")
        out[str(k)] = str(v)
    return out


@dataclass(frozen=True)
class Request:
    """A page to fetch and the spider method (by name) that gets it.

    ``Request(url, callback="parse_author", cb_kwargs={...}, meta={...}, method="POST",
    headers={...}, body=b"...", priority=0, dont_filter=False, errback="on_fail")``. A callback
    or errback given as a bound method is stored by its name; a ``str`` body is encoded UTF-8;
    ``cb_kwargs`` and ``meta`` must be JSON-able, tuples and non-string keys included, which
    arrive as given (else the request is a counted ``spider_error:request_not_json``).
    ``page.follow(href, ...)`` builds one resolved against the page."""

    url: str
    callback: str | None = None
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    cb_kwargs: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)
    priority: int = 0
    dont_filter: bool = False
    errback: str | None = None

    def __post_init__(self) -> None:
        # Accept what users write (bound methods, str bodies, lower-case methods, header pairs)
        # and keep one normal form, so equal requests compare equal.
        if not isinstance(self.url, str):
            raise TypeError(f"Request url must be a str, not {type(self.url).__name__}")
        put = object.__setattr__
        if self.callback is not None and not isinstance(self.callback, str):
            put(self, "callback", _name(self.callback))
        if self.errback is not None and not isinstance(self.errback, str):
            put(self, "errback", _name(self.errback))
        if self.method != "GET":
            put(self, "method", str(self.method).upper())
        if isinstance(self.body, str):
            put(self, "body", self.body.encode())
        elif not isinstance(self.body, bytes):
            put(self, "body", bytes(self.body or b""))
        if self.headers and not (isinstance(self.headers, dict)
                                 and all(type(k) is str and type(v) is str for k, v in self.headers.items())):
            put(self, "headers", _headers(self.headers))
        if self.cb_kwargs is None:
            put(self, "cb_kwargs", {})
        if self.meta is None:
            put(self, "meta", {})
        if not isinstance(self.priority, int):
            put(self, "priority", int(self.priority))

    def __hash__(self) -> int:
        return hash((self.url, self.callback, self.method, self.body, self.dont_filter))

    @property
    def plain(self) -> bool:
        """Is this just a link: a GET of the URL with nothing else to carry?"""
        return self == Request(self.url)

    def replace(self, **changes: Any) -> Request:
        """A copy with some fields changed (as Scrapy's ``Request.replace``)."""
        values = {f: getattr(self, f) for f in FIELDS}
        values.update(changes)
        return Request(**values)


#: The old name: ``Follow(url)`` is a plain request of ``url``.
Follow = Request

FIELDS = ("url", "callback", "method", "headers", "body", "cb_kwargs", "meta", "priority",
          "dont_filter", "errback")


def request(url: str, callback: Any = None, *, method: str = "GET", headers: Any = None,
            body: bytes | str | None = None, cb_kwargs: Mapping[str, Any] | None = None,
            meta: Mapping[str, Any] | None = None, priority: int = 0, dont_filter: bool = False,
            errback: Any = None) -> Request:
    """A ``Request`` from user values: bound methods become names, a ``str`` body UTF-8 bytes,
    ``None`` the defaults."""
    data = body.encode() if isinstance(body, str) else bytes(body or b"")
    return Request(url, _name(callback), method or "GET", _headers(headers), data,
                   dict(cb_kwargs or {}), dict(meta or {}), int(priority or 0), bool(dont_filter),
                   _name(errback))


# --- the spec: what travels beside the frontier's key ---

def to_spec(req: Request, *, with_url: bool = False) -> str:
    """The request as compact JSON, only the fields that differ from the defaults (``"{}"`` for a
    plain GET). Raises ``TypeError``/``ValueError`` when ``cb_kwargs`` or ``meta``
    is not JSON-able."""
    return json.dumps(spec_dict(req, with_url=with_url), separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def spec_dict(req: Request, *, with_url: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if with_url:
        d["u"] = req.url
    if req.callback:
        d["cb"] = req.callback
    if req.errback:
        d["eb"] = req.errback
    if req.method != "GET":
        d["m"] = req.method
    if req.headers:
        d["h"] = dict(req.headers)
    if req.body:
        try:
            d["b"] = req.body.decode()
        except UnicodeDecodeError:
            d["b64"] = base64.b64encode(req.body).decode()
    if req.cb_kwargs:
        d["kw"] = _tagged(dict(req.cb_kwargs))
    if req.meta:
        d["meta"] = _tagged(dict(req.meta))
    if req.priority:
        d["p"] = req.priority
    if req.dont_filter:
        d["df"] = 1
    return d


def from_spec(spec: str | bytes | Mapping[str, Any] | None, url: str | None = None) -> Request:
    """The ``Request`` a spec describes; ``url`` when the spec does not carry one (the frontier's
    key carries it). A key's marker (``#~...``) is cut off the URL."""
    if spec is None or spec == "" or spec == b"":
        d: Mapping[str, Any] = {}
    elif isinstance(spec, (str, bytes)):
        d = json.loads(spec)
    else:
        d = spec
    u = d.get("u", url)
    if u is None:
        raise ValueError("a request spec without a URL")
    body: bytes = b""
    if "b" in d:
        body = str(d["b"]).encode()
    elif "b64" in d:
        body = base64.b64decode(d["b64"])
    return Request(strip_mark(u), d.get("cb"), d.get("m", "GET"), d.get("h") or {}, body,
                   _untagged(d.get("kw") or {}), _untagged(d.get("meta") or {}), int(d.get("p", 0)),
                   bool(d.get("df", 0)), d.get("eb"))


# What JSON alone would change on the way (Scrapy hands a callback its cb_kwargs as they were
# given): a tuple arrives a tuple, and a dict whose keys are not all strings keeps its keys.
_TUPLE, _PAIRS = "__tuple__", "__pairs__"


def _tagged(v: Any, within: frozenset[int] = frozenset()) -> Any:
    """``v`` with its tuples and non-string-keyed dicts tagged; ValueError, as ``json.dumps``
    gives, for a container inside itself."""
    if not isinstance(v, (tuple, list, dict)):
        return v
    if id(v) in within:
        raise ValueError("Circular reference detected")
    inner = within | {id(v)}
    if isinstance(v, tuple):
        return {_TUPLE: [_tagged(x, inner) for x in v]}
    if isinstance(v, list):
        return [_tagged(x, inner) for x in v]
    if all(isinstance(k, str) for k in v) and _TUPLE not in v and _PAIRS not in v:
        return {k: _tagged(x, inner) for k, x in v.items()}
    return {_PAIRS: [[_tagged(k, inner), _tagged(x, inner)] for k, x in v.items()]}


def _untagged(v: Any) -> Any:
    if isinstance(v, list):
        return [_untagged(x) for x in v]
    if isinstance(v, dict):
        if len(v) == 1 and _TUPLE in v and isinstance(v[_TUPLE], list):
            return tuple(_untagged(x) for x in v[_TUPLE])
        if len(v) == 1 and _PAIRS in v and isinstance(v[_PAIRS], list):
            return {_untagged(k): _untagged(x) for k, x in v[_PAIRS]}
        return {k: _untagged(x) for k, x in v.items()}
    return v


# --- keys: how the frontier and dedup see a request ---

def fingerprint(method: str, canonical_url: str, body: bytes = b"") -> str:
    """Scrapy's request fingerprint in spirit: method, canonical URL and body (sha1, 16 hex)."""
    h = hashlib.sha1()
    h.update(method.upper().encode())
    h.update(b"\0")
    h.update(canonical_url.encode())
    h.update(b"\0")
    h.update(body)
    return h.hexdigest()[:16]


def request_key(req: Request, canonical_url: str, origin: str = "") -> str:
    """The frontier's and dedup's key for ``req`` whose URL canonicalizes to ``canonical_url``:
    the URL itself for a GET without a body; ``URL#~<fingerprint>`` for another method or a
    body; ``URL#~u<hash>`` for ``dont_filter``, the hash of ``origin`` and the fingerprint.
    ``origin`` says where the request came from, deterministically: the parent page's key, its
    fetch (the cycle) and the request's position among what the callback yielded (``origin_of``),
    or ``start:<n>`` for the n-th start request. A repeat parse of the same fetch gives the same
    keys (dedup drops them); the next fetch of the parent gives new ones."""
    if req.dont_filter:
        fp = fingerprint(req.method, canonical_url, req.body)
        h = hashlib.sha1(f"{origin}\0{fp}".encode(errors="surrogatepass")).hexdigest()[:16]
        return f"{canonical_url}{MARK}u{h}"
    if req.method == "GET" and not req.body:
        return canonical_url
    return f"{canonical_url}{MARK}{fingerprint(req.method, canonical_url, req.body)}"


def origin_of(parent_key: str, cycle: int, position: int) -> str:
    """A yielded request's origin for ``request_key``: the page that yielded it (its frontier
    key), which fetch of it (the periodic cycle: a revisit yields new ``dont_filter`` keys) and
    where among the callback's requests it came."""
    return f"{parent_key}\0{cycle}\0{position}"


# --- headers: what a request may send ---

#: An HTTP field name (RFC 9110 token).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: Control characters a field value must not hold (a tab is allowed): CR/LF would split the
#: request, NUL is refused by servers and clients alike.
_CTL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
#: The client frames the body itself: a request may not say otherwise.
_FRAMING = frozenset({"content-length", "transfer-encoding"})
MAX_HEADERS = 64
MAX_HEADER_BYTES = 8192  # one field's name and value: servers refuse longer lines (Apache, nginx: 8 KiB)


def bad_header(headers: Mapping[str, str]) -> str | None:
    """Why these request headers cannot be sent (naming the field), or None when they can: a
    name that is not an HTTP token, a value holding CR, LF, NUL or another control character, a
    field over ``MAX_HEADER_BYTES``, more than ``MAX_HEADERS`` fields, or ``Content-Length`` /
    ``Transfer-Encoding`` (the client frames the body). Values are sent UTF-8, as Scrapy does."""
    if len(headers) > MAX_HEADERS:
        return f"{len(headers)} headers, over {MAX_HEADERS}"
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name):
            return f"header name {name!r} is not an HTTP token"
        if name.lower() in _FRAMING:
            return f"header {name!r} is set by the client"
        if _CTL.search(value):
            return f"header {name!r} holds a control character (CR, LF, NUL...)"
        if len(name) + len(value.encode(errors="surrogatepass")) > MAX_HEADER_BYTES:
            return f"header {name!r} is over {MAX_HEADER_BYTES} bytes"
    return None


def is_marked(key: str) -> bool:
    """Does this frontier key carry a request marker (a non-GET, a body or ``dont_filter``)?"""
    return MARK in key


def strip_mark(key: str) -> str:
    """The URL of a frontier key (the key itself when it has no marker)."""
    i = key.find(MARK)
    return key if i < 0 else key[:i]


def is_unfiltered(key: str) -> bool:
    """A ``dont_filter`` key: passes dedup however often it is seen."""
    i = key.find(MARK)
    return i >= 0 and key[i + len(MARK):i + len(MARK) + 1] == "u"


def urgent_spec(spec: str) -> bool:
    """Does this spec ask for a priority above 0 (the head of its host's queue)?"""
    if '"p":' not in spec:
        return False
    try:
        return int(json.loads(spec).get("p", 0)) > 0
    except (ValueError, TypeError, AttributeError):
        return False


def as_request(value: Any) -> Request | None:
    """A yielded value as a Request (ours, or anything shaped like Scrapy's: ``url``, ``method``,
    ``callback``...), else None."""
    if isinstance(value, Request):
        return value
    return None


def spec_pairs(headers: Sequence[tuple[str, str]] | Mapping[str, str]) -> list[tuple[str, str]]:
    """Headers as a list of pairs (the fetch client's form)."""
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)
