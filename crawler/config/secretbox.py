"""Session secrets sealed for Redis: ``SecretBox.seal`` on the way in, ``open`` on the way out,
with the Fernet key(s) of the worker's own environment.

The key is ``CRAWLER_SECRET_KEY`` (one Fernet key, or several comma-separated) in the worker's
environment or, failing that, the file ``CRAWLER_SECRET_KEY_FILE`` names (one key per line, ``#``
comments; like the secrets file it must not be readable by group or others). The first key
seals; every key opens (``MultiFernet``), so a key is rotated by putting a new one first on every
worker, old ones after it, and dropping the old ones once the jobs that sealed with them ended.
``crawler crawl`` makes a key per run for its own workers when none is set. The key never
travels in a task message, never sits in Redis and never appears in an error: errors name the
variable or file, never a value.

Fernet is AES-128-CBC with an HMAC-SHA256 over the whole token: a value sealed under a key the
worker lacks, or changed in Redis, does not open (``open`` returns None, never raises).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from crawler.config.credentials import read_private_file
from crawler.errors import ConfigError

KEY_VAR = "CRAWLER_SECRET_KEY"
KEY_FILE_VAR = "CRAWLER_SECRET_KEY_FILE"


class NoSessionKey(ConfigError):
    """This worker has no usable key to seal a job's session with: none set, a bad one, an
    unreadable key file (one line, saying where to set one, never a key)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message or f"no session key on this worker: set {KEY_VAR} (a Fernet key) or "
                                    f"{KEY_FILE_VAR}; session cookies are never kept in Redis in the clear")


class SecretBox:
    """Seals and opens values with Fernet keys; the first key seals, any of them opens."""

    def __init__(self, keys: Sequence[str | bytes]) -> None:
        if not keys:
            raise ConfigError("a secret box needs at least one key")
        self._fernet = MultiFernet([Fernet(k) for k in keys])

    def seal(self, data: bytes) -> bytes:
        return self._fernet.encrypt(data)

    def open(self, token: bytes | str) -> bytes | None:
        """The sealed bytes; None for a token no key of this box opens (another key, tampered)."""
        try:
            return self._fernet.decrypt(token)
        except (InvalidToken, TypeError, ValueError):
            return None


def new_key() -> str:
    return Fernet.generate_key().decode()


def parse_keys(text: str, where: str) -> SecretBox:
    """A box of the keys in ``text`` (separated by commas or lines, ``#`` comment lines skipped);
    NoSessionKey naming ``where`` and the entry's position, never its value."""
    entries = [k.strip() for line in text.splitlines() if not line.lstrip().startswith("#")
               for k in line.split(",") if k.strip()]
    if not entries:
        raise NoSessionKey(f"{where} holds no key")
    for i, key in enumerate(entries, start=1):
        try:
            Fernet(key)
        except (ValueError, TypeError):
            raise NoSessionKey(f"{where}: key {i} is not a Fernet key (32 url-safe base64-encoded bytes; "
                              f"make one with: python -c 'from cryptography.fernet import Fernet; "
                              f"print(Fernet.generate_key().decode())')") from None
    return SecretBox(entries)


_boxes: dict[str, SecretBox] = {}  # the last keys' text -> its box (a Fernet per key is built once)


def worker_box(env: Mapping[str, str] | None = None) -> SecretBox | None:
    """The box of this worker's keys (None if it has none), read again on every call so a rotated
    key takes effect without a restart; NoSessionKey for a bad key or an unreadable key file."""
    env = os.environ if env is None else env
    text, where = env.get(KEY_VAR, ""), KEY_VAR
    if not text.strip():
        path = env.get(KEY_FILE_VAR, "")
        if not path:
            return None
        try:
            text = read_private_file(Path(path), "key file")
        except ConfigError as exc:
            raise NoSessionKey(str(exc)) from None
        where = f"key file {path}"
    box = _boxes.get(text)
    if box is None:
        box = parse_keys(text, where)
        _boxes.clear()
        _boxes[text] = box
    return box


def require_box(env: Mapping[str, str] | None = None) -> SecretBox:
    """``worker_box``, or NoSessionKey if this worker has no key."""
    box = worker_box(env)
    if box is None:
        raise NoSessionKey()
    return box
