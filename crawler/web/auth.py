"""Who may use the console, and which requests may change anything.

Authentication: a bearer token (``CRAWLER_WEB_TOKEN``) or basic auth (``CRAWLER_WEB_USER`` and
``CRAWLER_WEB_PASSWORD``) from the server's environment. Without either the console is open, and
so may listen on loopback addresses only (``check_listen``).

Cross-site requests: a state-changing call (POST, PUT, PATCH, DELETE) must carry a JSON content
type and, when the browser says where it comes from, come from the console's own origin. A page
on another site can send a form POST or a "simple" fetch without asking, but neither may have
``Content-Type: application/json``: that needs a CORS preflight, which this app never answers
with permission. Basic auth credentials the browser remembers are therefore no use to another
site, and the ``Origin`` / ``Sec-Fetch-Site`` check refuses the rest (a same-site subdomain, an
old browser) in one more place. A JSON content type rather than a custom header keeps ``curl``
use plain (``-H 'Content-Type: application/json'``), which any JSON client sends anyway.

Host names (DNS rebinding): a page on ``evil.example`` whose name the attacker re-points at
127.0.0.1 is, to the browser, the same origin as the console it now reaches, so the ``Origin``
check passes and its scripts read every answer. The browser still sends ``Host: evil.example``:
the console answers only the names it serves (``Hosts``), loopback ones, the address it listens
on, and ``CRAWLER_WEB_ALLOWED_HOSTS``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from crawler.errors import ConfigError

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Auth:
    """Credentials the console accepts: a token, or a user and password (either may be unset)."""

    token: str = ""
    user: str = ""
    password: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Auth | None:
        """The credentials the environment gives, or None for none; ConfigError for half a pair."""
        env = os.environ if env is None else env
        token = env.get("CRAWLER_WEB_TOKEN", "")
        user, password = env.get("CRAWLER_WEB_USER", ""), env.get("CRAWLER_WEB_PASSWORD", "")
        if bool(user) != bool(password):
            raise ConfigError("set both CRAWLER_WEB_USER and CRAWLER_WEB_PASSWORD, or neither")
        if not token and not user:
            return None
        return cls(token, user, password)

    @property
    def scheme(self) -> str:
        """The challenge a 401 carries: Basic lets a browser ask for the password itself."""
        return "Basic" if self.user else "Bearer"

    def allows(self, authorization: str) -> bool:
        """Whether an ``Authorization`` header value carries the right credentials."""
        kind, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if kind.lower() == "bearer" and self.token:
            return hmac.compare_digest(value.encode(), self.token.encode())
        if kind.lower() == "basic" and self.user:
            try:
                user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            # Both compared, always: the time taken tells nothing about which one was wrong.
            ok_user = hmac.compare_digest(user.encode(), self.user.encode())
            ok_password = hmac.compare_digest(password.encode(), self.password.encode())
            return ok_user and ok_password
        return False


def is_loopback(host: str) -> bool:
    """Whether a listen address is a loopback one (``localhost`` by name, never looked up)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_listen(hosts: list[str], auth: Auth | None) -> None:
    """ConfigError unless the console is protected or every address it listens on is loopback."""
    exposed = [h for h in hosts if not is_loopback(h)]
    if exposed and auth is None:
        raise ConfigError(f"crawler web listens on {exposed[0]}, not only on loopback: set CRAWLER_WEB_TOKEN, "
                          "or CRAWLER_WEB_USER and CRAWLER_WEB_PASSWORD, first")


def allowed_origins(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """Origins besides the console's own that may change things: ``CRAWLER_WEB_ORIGINS``
    (comma-separated), for a console behind a TLS proxy (https://console.example)."""
    raw = (os.environ if env is None else env).get("CRAWLER_WEB_ORIGINS", "")
    return frozenset(o.strip().rstrip("/").lower() for o in raw.split(",") if o.strip())


def allowed_hosts(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """Host names besides loopback ones and the listen address that the console answers to:
    ``CRAWLER_WEB_ALLOWED_HOSTS`` (comma-separated; ``name`` for any port, ``name:port`` for one),
    for a reverse proxy that passes the client's ``Host`` on (console.example)."""
    raw = (os.environ if env is None else env).get("CRAWLER_WEB_ALLOWED_HOSTS", "")
    return frozenset(h.strip().lower() for h in raw.split(",") if h.strip())


_HOST = re.compile(r"(?P<name>[a-z0-9_.-]+|\[[0-9a-f:.]+\])(?::(?P<port>[0-9]{1,5}))?")
_WILDCARDS = ("", "0.0.0.0", "::")


def split_host(value: str) -> tuple[str, str] | None:
    """A ``Host`` header as (name, port), brackets kept on an IPv6 address and the port "" when
    absent; None for anything a browser would not send."""
    m = _HOST.fullmatch(value.strip().lower())
    return (m["name"], m["port"] or "") if m else None


def _local_addresses() -> list[str]:
    # Every address of every interface: what a console listening on all of them serves. No DNS.
    import psutil

    return [a.address.split("%", 1)[0] for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)]


@dataclass(frozen=True)
class Hosts:
    """The ``Host`` values the console answers: loopback names (localhost, 127.x, [::1]) always,
    ``names`` on any port, ``exact`` (name:port) on that port only."""

    names: frozenset[str] = frozenset()
    exact: frozenset[str] = frozenset()

    @classmethod
    def serving(cls, listen: str | None = None, allowed: Iterable[str] = ()) -> Hosts:
        """The hosts of a console listening on ``listen`` (None: loopback only; a wildcard such
        as 0.0.0.0: every local interface's address), plus ``allowed`` (``allowed_hosts``)."""
        names: set[str] = set()
        exact: set[str] = set()
        listens = [] if listen is None else _local_addresses() if listen.strip() in _WILDCARDS else [listen]
        for address in listens:
            bare = address.strip().strip("[]").lower()
            names.add(f"[{bare}]" if ":" in bare else bare)
        for entry in allowed:
            parts = split_host(entry)
            if parts is None:
                raise ConfigError(f"CRAWLER_WEB_ALLOWED_HOSTS: {entry[:100]!r} is not a host name (name or name:port)")
            name, port = parts
            if port:
                exact.add(f"{name}:{port}")
            else:
                names.add(name)
        return cls(frozenset(names), frozenset(exact))

    def allows(self, host: str) -> bool:
        """Whether a request's ``Host`` header value names this console ("" never does)."""
        parts = split_host(host)
        if parts is None:
            return False
        name, port = parts
        return is_loopback(name) or name in self.names or f"{name}:{port}" in self.exact


def cross_site_refusal(method: str, headers: Mapping[str, str], scheme: str, host: str,
                       allowed: frozenset[str] = frozenset()) -> str:
    """Why a request may not change anything ("" if it may). ``headers`` lower-case keyed;
    ``scheme`` and ``host`` (the Host header) make the console's own origin; ``allowed``: more."""
    if method.upper() not in UNSAFE_METHODS:
        return ""
    fetch_site = headers.get("sec-fetch-site", "")
    if fetch_site and fetch_site not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {fetch_site[:40]})"
    origin = headers.get("origin", "")
    own = origin.rstrip("/").lower()
    if origin and origin != "null" and own != f"{scheme}://{host}".lower() and own not in allowed:
        return f"cross-site request refused (Origin {origin[:100]} is not this console's)"
    if origin == "null":
        return "cross-site request refused (Origin: null)"
    kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/json":
        return "a request that changes something must have Content-Type: application/json"
    return ""
