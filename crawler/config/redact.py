"""Credentials out of sight: ``redact`` for what is printed or logged, ``strip_password`` for
what is kept where others can read it (a job's settings in Redis and in its store).

A store or Redis URL may carry a password in its userinfo (``postgresql://user:pw@host/db``,
``redis://:pw@host:6379/0``) or, for libpq, in a ``password=`` query parameter. Workers take
store passwords from their own environment instead (``PGPASSWORD``, ``~/.pgpass``).
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

MASK = "***"
# scheme://user:password@ anywhere in a text; the password may not contain "@", "/" or blanks
# (a URL needs them percent-encoded anyway).
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@]*):(?P<pw>[^\s/@]*)@")
_QUERY_PW = re.compile(r"(?P<head>[?&]password=)(?P<pw>[^&\s#'\"]*)", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every URL password replaced by ``***`` (``user:***@host``); text without
    one comes back unchanged."""
    if "://" not in text and "password=" not in text.lower():
        return text
    text = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@" if m["pw"] else m[0], text)
    return _QUERY_PW.sub(lambda m: m["head"] + MASK if m["pw"] else m[0], text)


def has_password(url: str) -> bool:
    return redact(url) != url


def strip_password(url: str) -> str:
    """``url`` without its password (userinfo and ``password=`` parameter); the user name stays,
    so a worker's ``PGPASSWORD`` or ``~/.pgpass`` entry for it applies."""
    if not has_password(url):
        return url
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}@{host}" if user else host
    # Other parameters stay byte for byte: re-encoding them could change what libpq reads.
    query = "&".join(p for p in parts.query.split("&") if p.split("=", 1)[0].lower() != "password")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def password_of(url: str) -> str:
    """The password a URL carries ("" if none), for handing to a process's environment."""
    parts = urlsplit(url)
    if parts.password:
        return unquote(parts.password)
    return next((v for k, v in parse_qsl(parts.query) if k.lower() == "password"), "")


def redact_settings(values: dict[str, Any]) -> dict[str, Any]:
    """A copy of a settings mapping with every string value redacted."""
    return {k: redact(v) if isinstance(v, str) else v for k, v in values.items()}


def redact_settings_json(raw: str) -> str:
    """The same for settings kept as JSON (a job's ``settings`` field in Redis)."""
    try:
        values = json.loads(raw)
    except ValueError:
        return redact(raw)
    return json.dumps(redact_settings(values)) if isinstance(values, dict) else redact(raw)


# Request headers that carry credentials or a session, and the response header that sets one.
SECRET_REQUEST_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def redact_request_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Request headers as they may be kept (messages, WARC, exports): credentials and cookies
    masked, their names kept so a reader sees that they were sent."""
    return [(k, MASK) if k.lower() in SECRET_REQUEST_HEADERS else (k, v) for k, v in headers]


def redact_response_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Response headers with each ``Set-Cookie`` value masked (name and attributes kept)."""
    out = []
    for k, v in headers:
        if k.lower() == "set-cookie":
            pair, sep, attrs = v.partition(";")
            v = f"{pair.partition('=')[0]}={MASK}{sep}{attrs}"
        out.append((k, v))
    return out
