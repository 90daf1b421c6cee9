"""``crawler.state.conn``: the sentinel:// form that broker and state share."""

from __future__ import annotations

import pytest

from crawler.celeryapp.config import brokers, sentinel_options
from crawler.config.settings import SettingError, Settings
from crawler.state.conn import SENTINEL_PORT, SentinelURL, connect, is_sentinel, parse_sentinel

URL = "sentinel://:s3cret@10.0.0.1:26380;sentinel://10.0.0.2;sentinel://10.0.0.3:26381/2"


def test_the_kombu_form_gives_every_sentinel_the_database_and_the_password() -> None:
    assert parse_sentinel(URL) == SentinelURL((("10.0.0.1", 26380), ("10.0.0.2", SENTINEL_PORT), ("10.0.0.3", 26381)),
                                              db=2, password="s3cret")
    assert parse_sentinel("sentinel://h:1").db == 0
    assert is_sentinel(URL) and not is_sentinel("redis://h:6379/0")
    with pytest.raises(ValueError, match="not a sentinel"):
        parse_sentinel("sentinel://h:1;redis://h:2")


def test_a_sentinel_url_is_a_setting_and_gives_celery_the_master_name() -> None:
    s = Settings.from_env({"CRAWLER_REDIS_URL": URL, "CRAWLER_SENTINEL_MASTER": "crawl"})
    assert sentinel_options(brokers(s)[0]) == {"master_name": "crawl"}
    assert sentinel_options(brokers(Settings.from_env({"CRAWLER_REDIS_URL": "redis://h:6379/0"}))[0]) == {}
    with pytest.raises(SettingError, match="redis_url"):
        Settings.from_env({"CRAWLER_REDIS_URL": "sentinal://h:1"})


def test_a_client_of_a_sentinel_url_asks_the_sentinels_for_the_named_master() -> None:
    client = connect(URL, sentinel_master="crawl")
    pool = client.connection_pool
    assert pool.service_name == "crawl"  # type: ignore[attr-defined]
    sentinels = pool.sentinel_manager.sentinels  # type: ignore[attr-defined]
    assert [(c.connection_pool.connection_kwargs["host"], c.connection_pool.connection_kwargs["port"])
            for c in sentinels] == [("10.0.0.1", 26380), ("10.0.0.2", SENTINEL_PORT), ("10.0.0.3", 26381)]
    kw = pool.connection_kwargs
    assert kw["db"] == 2 and kw["password"] == "s3cret" and kw["socket_timeout"] == 10.0
