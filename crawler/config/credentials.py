"""Secrets a job's requests need, read by each worker from its own environment or secrets file.

A job names secrets, never carries them: ``auth`` entries are ``HOST=basic:NAME`` or
``HOST=bearer:NAME``, and a spider's login asks ``session.secret(NAME)``. The value of NAME is
``CRAWLER_SECRET_<NAME>`` in the worker's environment or, failing that, the ``NAME`` line of the
file ``CRAWLER_SECRETS_FILE`` names (``NAME=value`` lines, ``#`` comments; the file must not be
readable by group or others). So a secret never travels in a task message, never sits in Redis,
and every error names the secret, never its value. ``KEY`` and ``KEY_FILE`` are not secret names:
``CRAWLER_SECRET_KEY`` and ``CRAWLER_SECRET_KEY_FILE`` hold the workers' session key
(``crawler.config.secretbox``), which no job may have sent to a host.
"""

from __future__ import annotations

import base64
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from crawler.errors import ConfigError

ENV_PREFIX = "CRAWLER_SECRET_"
FILE_VAR = "CRAWLER_SECRETS_FILE"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
RESERVED = frozenset({"KEY", "KEY_FILE"})  # the workers' session key (crawler.config.secretbox)
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
_HEADER_VALUE = re.compile(r"[\x20-\x7e\t]*")


class MissingSecret(ConfigError):
    """A secret the job names is not set on this worker (the message names it, one line)."""


@dataclass(frozen=True)
class AuthRule:
    host: str  # lower case; sent to this host only, any port
    scheme: str  # basic | bearer
    secret: str  # the secret's name


def parse_auth(spec: str) -> AuthRule:
    """``HOST=basic:NAME`` or ``HOST=bearer:NAME``; ConfigError naming the bad part otherwise."""
    host, sep, rest = spec.partition("=")
    scheme, sep2, name = rest.partition(":")
    if not sep or not sep2 or not host or "/" in host:
        raise ConfigError(f"auth entries must be HOST=basic:NAME or HOST=bearer:NAME, got {spec[:80]!r}")
    if scheme not in ("basic", "bearer"):
        raise ConfigError(f"auth {host}: scheme must be basic or bearer, got {scheme[:20]!r}")
    if not _NAME.fullmatch(name):
        raise ConfigError(f"auth {host}: {name[:70]!r} is not a secret name (letters, digits, _)")
    if name.upper() in RESERVED:
        raise ConfigError(f"auth {host}: secret name {name} is reserved for the workers' session key")
    return AuthRule(host.lower(), scheme, name)


def parse_header(spec: str) -> tuple[str, str]:
    """``Name: value`` (a default request header); ConfigError otherwise. Authorization and
    Cookie are refused: a value given here would sit in Redis, where no secret may."""
    name, sep, value = spec.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not _HEADER_NAME.fullmatch(name) or not _HEADER_VALUE.fullmatch(value):
        raise ConfigError(f"headers must be 'Name: value' in printable ASCII, got {spec[:80]!r}")
    if name.lower() in ("authorization", "proxy-authorization", "cookie"):
        raise ConfigError(f"header {name} may hold a secret: use --auth HOST=basic:NAME or a spider's login")
    return name, value


class Secrets:
    """A worker's secrets: its environment first, then its secrets file (read again by every
    fetch task, so an operator may rotate a value without restarting workers)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = os.environ if env is None else env
        # Asked once per hop; an instance lives for one task, so a rotated value is read soon.
        self._known: dict[str, str] = {}

    def get(self, name: str) -> str:
        if name in self._known:
            return self._known[name]
        if not _NAME.fullmatch(name):
            raise MissingSecret(f"{name[:70]!r} is not a secret name (letters, digits, _)")
        if name.upper() in RESERVED:
            raise MissingSecret(f"secret name {name} is reserved for the workers' session key")
        value = self.env.get(ENV_PREFIX + name)
        if value is not None:
            self._known[name] = value
            return value
        path = self.env.get(FILE_VAR, "")
        if path:
            found = _from_file(Path(path), name)
            if found is not None:
                self._known[name] = found
                return found
        where = f"{ENV_PREFIX}{name} or {path}" if path else f"{ENV_PREFIX}{name} (or a {FILE_VAR} line)"
        raise MissingSecret(f"secret {name} is not set on this worker: set {where}")

    def auth_header(self, rules: Sequence[AuthRule], url_host: str) -> tuple[str, str] | None:
        """The Authorization header for a request to ``url_host``, if a rule names that host."""
        host = url_host.lower()
        for rule in rules:
            if rule.host == host:
                value = self.get(rule.secret)
                if rule.scheme == "bearer":
                    return "Authorization", f"Bearer {value}"
                return "Authorization", "Basic " + base64.b64encode(value.encode()).decode()
        return None


def read_private_file(path: Path, what: str = "secrets file") -> str:
    """The text of a file only its owner may read; MissingSecret (one line naming the file, never
    its content) if it cannot be read or group or others may read it."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MissingSecret(f"{what} {path}: {exc.strerror or exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise MissingSecret(f"{what} {path} is readable by others: chmod 600 it")
    return text


def _from_file(path: Path, name: str) -> str | None:
    text = read_private_file(path)
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.lstrip().startswith("#") and key.strip() == name:
            return value.strip()
    return None
