"""Secrets named by jobs, read from the worker's environment or secrets file; errors name the
secret, never its value."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from crawler.config.credentials import MissingSecret, Secrets, parse_auth, parse_header
from crawler.config.settings import SettingError, Settings
from crawler.errors import ConfigError


def test_auth_specs() -> None:
    rule = parse_auth("API.example.org=bearer:API_TOKEN")
    assert (rule.host, rule.scheme, rule.secret) == ("api.example.org", "bearer", "API_TOKEN")
    for bad in ("example.org", "example.org=digest:X", "example.org=basic:has-dash", "=basic:X"):
        with pytest.raises(ConfigError):
            parse_auth(bad)


def test_settings_refuse_bad_auth_and_secret_headers() -> None:
    s = Settings.from_env({}, auth=["127.0.1.1=basic:SITE"], session_headers=["Accept-Language: en, de"])
    assert s.session_headers == ["Accept-Language: en, de"]
    with pytest.raises(SettingError, match="setting auth"):
        Settings.from_env({}, auth=["127.0.1.1=basic:pa ss"])
    with pytest.raises(SettingError, match="Authorization"):
        Settings.from_env({}, session_headers=["Authorization: Bearer xyz"])
    with pytest.raises(ConfigError):
        parse_header("Cookie: sid=1")
    with pytest.raises(ConfigError):
        parse_header("X-Bad\x01: v")


def test_environment_first_then_file(tmp_path: Path) -> None:
    f = tmp_path / "secrets"
    f.write_text("# comment\nSITE=user:from-file\nOTHER=o\n")
    f.chmod(0o600)
    env = {"CRAWLER_SECRET_SITE": "user:from-env", "CRAWLER_SECRETS_FILE": str(f)}
    assert Secrets(env).get("SITE") == "user:from-env"
    assert Secrets(env).get("OTHER") == "o"
    header = Secrets(env).auth_header([parse_auth("127.0.1.1=basic:SITE")], "127.0.1.1")
    assert header == ("Authorization", "Basic " + base64.b64encode(b"user:from-env").decode())
    assert Secrets(env).auth_header([parse_auth("127.0.1.1=basic:SITE")], "127.0.1.2") is None
    assert Secrets(env).auth_header([parse_auth("h=bearer:OTHER")], "H") == ("Authorization", "Bearer o")


def test_missing_secret_names_it_and_a_loose_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "secrets"
    f.write_text("SITE=hunter2\n")
    f.chmod(0o644)
    with pytest.raises(MissingSecret, match="readable by others") as info:
        Secrets({"CRAWLER_SECRETS_FILE": str(f)}).get("SITE")
    assert "hunter2" not in str(info.value)
    f.chmod(0o600)
    with pytest.raises(MissingSecret, match="secret NOPE is not set") as info:
        Secrets({"CRAWLER_SECRETS_FILE": str(f)}).get("NOPE")
    assert "hunter2" not in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(MissingSecret, match="CRAWLER_SECRET_NOPE"):
        Secrets({}).get("NOPE")
