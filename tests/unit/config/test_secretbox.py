"""The secret box: Fernet keys from the worker's environment or key file, the first sealing and all
opening, and errors that name where a key should be, never a key."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.config.credentials import MissingSecret, Secrets, parse_auth
from crawler.config.secretbox import KEY_FILE_VAR, KEY_VAR, NoSessionKey, SecretBox, new_key, require_box, worker_box
from crawler.errors import ConfigError


def test_sealed_values_open_only_with_a_key_of_the_box() -> None:
    box = SecretBox([new_key()])
    token = box.seal(b'{"name":"sid","value":"s3cret-sid"}')
    assert b"s3cret-sid" not in token and box.open(token) == b'{"name":"sid","value":"s3cret-sid"}'
    assert SecretBox([new_key()]).open(token) is None  # another key
    tampered = token[:-4] + (b"AAAA" if not token.endswith(b"AAAA") else b"BBBB")
    assert box.open(tampered) is None and box.open(b"not a token") is None and box.open("") is None


def test_rotation_the_first_key_seals_every_key_opens() -> None:
    old, new = new_key(), new_key()
    sealed_old = SecretBox([old]).seal(b"a")
    rotated = SecretBox([new, old])
    assert rotated.open(sealed_old) == b"a"
    sealed_new = rotated.seal(b"b")
    assert SecretBox([new]).open(sealed_new) == b"b" and SecretBox([old]).open(sealed_new) is None


def test_keys_come_from_the_environment_or_a_private_file(tmp_path: Path) -> None:
    old, new = new_key(), new_key()
    assert worker_box({}) is None
    with pytest.raises(NoSessionKey, match=f"set {KEY_VAR} .* or {KEY_FILE_VAR}"):
        require_box({})
    token = SecretBox([old]).seal(b"x")
    from_env = worker_box({KEY_VAR: f"{new}, {old}"})
    assert from_env is not None and from_env.open(token) == b"x"
    f = tmp_path / "key"
    f.write_text(f"# rotated on Monday\n{new}\n{old}\n")
    f.chmod(0o644)
    with pytest.raises(NoSessionKey, match="readable by others: chmod 600"):
        worker_box({KEY_FILE_VAR: str(f)})
    f.chmod(0o600)
    from_file = worker_box({KEY_FILE_VAR: str(f)})
    assert from_file is not None and from_file.open(token) == b"x"
    assert SecretBox([new]).open(from_file.seal(b"y")) == b"y"  # the first line seals
    with pytest.raises(NoSessionKey, match="missing"):
        worker_box({KEY_FILE_VAR: str(tmp_path / "missing")})


def test_a_bad_key_is_named_by_place_never_shown() -> None:
    bad = "not-a-fernet-key-but-a-secret-anyway"
    with pytest.raises(NoSessionKey) as exc:
        worker_box({KEY_VAR: f"{new_key()},{bad}"})
    assert f"{KEY_VAR}: key 2 is not a Fernet key" in str(exc.value) and bad not in str(exc.value)
    assert "\n" not in str(exc.value)


def test_no_job_may_name_the_session_key_as_a_secret() -> None:
    key = new_key()
    env = {KEY_VAR: key, "CRAWLER_SECRET_KEY_FILE": "/etc/crawler/key"}
    for name in ("KEY", "KEY_FILE", "key"):
        with pytest.raises(MissingSecret, match="reserved"):
            Secrets(env).get(name)
    with pytest.raises(ConfigError, match="reserved"):
        parse_auth("evil.example=bearer:KEY")
