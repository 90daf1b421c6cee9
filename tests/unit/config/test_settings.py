import re
from pathlib import Path

import pytest

from crawler.config.settings import SettingError, Settings, parse_text, settings_table

DOCS = Path(__file__).resolve().parents[3] / "docs"


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
    ({"CRAWLER_SHARDS": "many"}, "setting shards: CRAWLER_SHARDS must be an integer, got 'many'"),
    ({"CRAWLER_SHARDS": "0"}, "setting shards: must be an integer >= 1"),
    ({"CRAWLER_DELAY": "-1"}, "setting delay: must be a finite number >= 0"),
    ({"CRAWLER_TASK_TIME_LIMIT": "900"}, "shorter than visibility_timeout"),
])
def test_bad_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Settings.from_env(env)


def test_job_settings_travel_and_process_settings_do_not() -> None:
    job = Settings.from_env({}).job_settings()
    assert "delay" in job and "max_pages" in job and "store" in job
    assert "redis_url" not in job and "visibility_timeout" not in job


def test_settings_page_table_matches_settings_module() -> None:
    assert settings_table() in (DOCS / "settings.md").read_text(), "regenerate with: make settings-table"


def test_reason_codes_page_documents_every_reason_code() -> None:
    from crawler.errors import REASONS

    text = (DOCS / "reasons.md").read_text()
    missing = [code for code in REASONS if f"| `{code}` |" not in text]
    assert not missing, missing


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("given, message", [
    # Numbers are finite and in range; timeouts are positive.
    ({"delay": NAN}, "setting delay: must be a finite number >= 0, got nan"),
    ({"delay": INF}, "setting delay: must be a finite number >= 0, got inf"),
    ({"max_delay": -INF}, "setting max_delay: must be a finite number >= 0"),
    ({"connect_timeout": 0.0}, "setting connect_timeout: must be a finite number > 0, got 0.0"),
    ({"read_timeout": -1.0}, "setting read_timeout: must be a finite number > 0"),
    ({"request_deadline": NAN}, "setting request_deadline: must be a finite number > 0"),
    ({"lease_timeout": 0}, "setting lease_timeout: must be a finite number > 0"),
    ({"per_host": 0}, "setting per_host: must be an integer >= 1, got 0"),
    ({"max_pages": -1}, "setting max_pages: must be an integer >= 0, got -1"),
    ({"shards": 10**9}, "setting shards: must be an integer >= 1 and <= 1024"),
    ({"bloom_error_rate": 1.0}, "setting bloom_error_rate: must be a finite number > 0 and <= 0.5"),
    ({"near_duplicate_distance": 65}, "setting near_duplicate_distance: must be an integer >= 0 and <= 64"),
    # Types, whatever the caller (a submitted job's JSON included) handed over.
    ({"shards": True}, "setting shards: must be an integer, got True"),
    ({"max_pages": 1.5}, "setting max_pages: must be an integer, got 1.5"),
    ({"delay": "1"}, "setting delay: must be a finite number, got '1'"),
    ({"obey_robots": "false"}, "setting obey_robots: must be true or false, got 'false'"),
    ({"allow_domains": "a.com"}, "setting allow_domains: must be a list"),
    # Strings: no control characters; header values printable ASCII.
    ({"user_agent": "bot\r\nX-Evil: 1"},
     r"setting user_agent: must be printable ASCII (no control characters or line breaks), got 'bot\r\nX-Evil: 1'"),
    ({"robots_user_agent": "bot\n"}, "setting robots_user_agent: must be printable ASCII"),
    ({"user_agent": "bøt"}, "setting user_agent: must be printable ASCII"),
    ({"warc_dir": "out\x00/warc"}, "setting warc_dir: must not hold control characters"),
    ({"allow_domains": ["a.com", "b .com"]}, "setting allow_domains: items must be non-empty strings"),
    ({"allow_domains": [""]}, "setting allow_domains: items must be non-empty strings"),
    # Enumerations, URLs, addresses.
    ({"dedup": "exact"}, "setting dedup: must be auto, bloom or set, got 'exact'"),
    ({"store": "ftp://host/x"}, "setting store: must be a sqlite:// or postgresql:// or postgres:// URL"),
    ({"store": "crawl.db"}, "setting store: has no scheme (try sqlite:///path/crawl.db), got 'crawl.db'"),
    ({"redis_url": "http://127.0.0.1:6379/0"},
     "setting redis_url: must be a redis:// or rediss:// or unix:// or sentinel:// or redis+cluster:// URL"),
    ({"resolve": ["a.com=notanip"]}, "setting resolve: a.com=... must name an IP address, got 'notanip'"),
    ({"resolve": ["a.com"]}, "setting resolve: entries must be HOST=IP, got 'a.com'"),
    ({"resolve": ["=127.0.0.1"]}, "setting resolve: entries must be HOST=IP"),
    ({"allow_networks": ["127.0.0.1/33"]}, "setting allow_networks: not a network: '127.0.0.1/33'"),
])
def test_every_rule_names_the_setting_and_the_value(given: dict[str, object], message: str) -> None:
    with pytest.raises(SettingError, match=re.escape(message)):
        Settings.from_env({}, **given)


def test_well_formed_values_still_pass() -> None:
    s = Settings.from_env({}, delay=0.0, max_delay=0, connect_timeout=0.5, resolve=["a.com=127.0.1.1", "b=::1"],
                          user_agent="Mozilla/5.0 (compatible; bot/1.0; +https://a.test/bot)", allow_domains=["a.com"],
                          store="postgresql://u:p@127.0.0.1:5432/db", redis_url="unix:///tmp/r.sock",
                          near_duplicate_distance=64, shards=1024, bloom_error_rate=0.01)
    assert s.resolve == ["a.com=127.0.1.1", "b=::1"]
    assert Settings.from_env({}).validated() == Settings()  # every default is valid


@pytest.mark.parametrize("text, value", [(t, True) for t in ("1", "true", "TRUE", " yes ", "on")]
                         + [(t, False) for t in ("0", "false", "No", "off")])
def test_booleans_take_the_usual_spellings(text: str, value: bool) -> None:
    assert Settings.from_env({"CRAWLER_OBEY_ROBOTS": text}).obey_robots is value


@pytest.mark.parametrize("env, message", [
    ({"CRAWLER_OBEY_ROBOTS": "treu"},
     "setting obey_robots: CRAWLER_OBEY_ROBOTS must be one of 1/0, true/false, yes/no, on/off, got 'treu'"),
    ({"CRAWLER_WARC": ""}, "setting warc: CRAWLER_WARC must be one of"),
    ({"CRAWLER_DELAY": "nan"}, "setting delay: must be a finite number >= 0, got 'nan'"),
    ({"CRAWLER_DELAY": "1e400"}, "setting delay: must be a finite number >= 0, got '1e400'"),
    ({"CRAWLER_CONNECT_TIMEOUT": "0"}, "setting connect_timeout: must be a finite number > 0, got '0'"),
    ({"CRAWLER_MAX_PAGES": "1e3"}, "setting max_pages: CRAWLER_MAX_PAGES must be an integer, got '1e3'"),
    ({"CRAWLER_RESOLVE": "a.com=1.2.3.4,b.com=999.1.1.1"}, "setting resolve: b.com=... must name an IP address"),
])
def test_environment_values_are_strict(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingError, match=re.escape(message)):
        Settings.from_env(env)


def test_an_explicit_value_replaces_a_bad_variable() -> None:
    assert Settings.from_env({"CRAWLER_DELAY": "nan"}, delay=1.0).delay == 1.0


def test_flags_are_read_as_the_environment_is() -> None:
    assert parse_text("delay", "0.25", "--delay") == 0.25
    with pytest.raises(SettingError, match=re.escape("setting per_host: must be an integer >= 1, got '0'")):
        parse_text("per_host", "0", "--per-host")
    with pytest.raises(SettingError, match=re.escape("setting shards: --shards must be an integer, got 'x'")):
        parse_text("shards", "x", "--shards")


def test_an_echoed_value_is_cut_to_a_readable_length() -> None:
    with pytest.raises(SettingError) as exc:
        Settings.from_env({}, user_agent="\x01" * 10_000)
    assert len(str(exc.value)) < 200 and "(10000 characters)" in str(exc.value)
    with pytest.raises(SettingError) as exc:
        Settings.from_env({"CRAWLER_SHARDS": "9" * 10_000})
    assert len(str(exc.value)) < 200


def test_seeds_are_checked_without_side_effects() -> None:
    from crawler.errors import BadURL
    from crawler.jobs import canonical_seeds

    assert canonical_seeds(["HTTP://A.test"], 2048) == ["http://a.test/"]
    with pytest.raises(BadURL, match=re.escape("seed 'http://[v1.a:b c]/': IPvFuture host")):
        canonical_seeds(["http://a.test/", "http://[v1.a:b c]/"], 2048)
    with pytest.raises(BadURL) as exc:
        canonical_seeds(["http://a.test/" + "x" * 5000], 2048)
    assert len(str(exc.value)) < 200
    with pytest.raises(BadURL, match="no seeds"):
        canonical_seeds([], 2048)


def test_a_job_on_a_redis_cluster_splits_its_frontier_unless_told_not_to() -> None:
    cluster = {"CRAWLER_REDIS_URL": "redis+cluster://127.0.0.1:7000", "CRAWLER_BROKER_URL": "redis://127.0.0.1:6380/0"}
    assert Settings.from_env(cluster).frontier_split
    assert not Settings.from_env({**cluster, "CRAWLER_FRONTIER_SPLIT": "0"}).frontier_split
    assert not Settings.from_env(cluster, frontier_split=False).frontier_split
    assert not Settings.from_env({}).frontier_split  # one Redis
    assert not Settings.from_env({"CRAWLER_REDIS_URL": "redis://127.0.0.1:6379/0"}).frontier_split
    assert Settings.from_env({}, redis_url=cluster["CRAWLER_REDIS_URL"], broker_url="redis://127.0.0.1:6380/0",
                             ).frontier_split
