import re
from pathlib import Path

import pytest

from crawler.settings import Settings, settings_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_defaults_env_then_overrides() -> None:
    s = Settings.from_env({})
    assert s.shards == 4 and s.per_host == 1 and s.delay == 0.0
    env = {"CRAWLER_SHARDS": "3", "CRAWLER_DELAY": "0.5", "CRAWLER_ALLOW_DOMAINS": "a.com, b.com",
           "CRAWLER_TASK_EVENTS": "0"}
    s = Settings.from_env(env)
    assert (s.shards, s.delay, s.allow_domains, s.task_events) == (3, 0.5, ["a.com", "b.com"], False)
    s = Settings.from_env(env, shards=5, delay=None)
    assert s.shards == 5 and s.delay == 0.5


@pytest.mark.parametrize("env, message", [
    ({"CRAWLER_SHARDS": "many"}, "CRAWLER_SHARDS='many': expected int"),
    ({"CRAWLER_SHARDS": "0"}, "shards must be >= 1"),
    ({"CRAWLER_DELAY": "-1"}, "delay must be >= 0"),
    ({"CRAWLER_TASK_TIME_LIMIT": "900"}, "shorter than visibility_timeout"),
])
def test_bad_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Settings.from_env(env)


def test_job_settings_travel_and_process_settings_do_not() -> None:
    job = Settings.from_env({}).job_settings()
    assert "delay" in job and "max_pages" in job and "store" in job
    assert "redis_url" not in job and "visibility_timeout" not in job


def test_readme_table_matches_settings_module() -> None:
    assert settings_table() in README.read_text(), "regenerate with: crawler settings"


def test_readme_documents_every_reason_code() -> None:
    from crawler.errors import REASONS

    text = README.read_text()
    missing = [code for code in REASONS if f"| `{code}` |" not in text]
    assert not missing, missing
