"""``crawler.state.conn``: the sentinel:// form that broker and state share."""

from __future__ import annotations

import pytest

from crawler.celeryapp.config import brokers, sentinel_options
from crawler.config.brokers import redis_database_problem
from crawler.config.settings import SettingError, Settings
from crawler.state.conn import (
    SENTINEL_PORT,
    ClusterURL,
    SentinelURL,
    connect,
    is_cluster,
    is_sentinel,
    parse_cluster,
    parse_sentinel,
)

URL = "sentinel://:s3cret@10.0.0.1:26380;sentinel://10.0.0.2;sentinel://10.0.0.3:26381/2"


def test_the_kombu_form_gives_every_sentinel_the_database_and_the_password() -> None:
    assert parse_sentinel(URL) == SentinelURL((("10.0.0.1", 26380), ("10.0.0.2", SENTINEL_PORT), ("10.0.0.3", 26381)),
                                              db=2, password="s3cret")
    assert parse_sentinel("sentinel://h:1").db == 0
    assert is_sentinel(URL) and not is_sentinel("redis://h:6379/0")
    with pytest.raises(ValueError, match="not a sentinel"):
        parse_sentinel("sentinel://h:1;redis://h:2")
    with pytest.raises(ValueError, match="database must be a number"):
        parse_sentinel("sentinel://h:1;sentinel://h:2/abc")
    with pytest.raises(ValueError, match="sentinel 1 of the URL") as caught:
        parse_sentinel("sentinel://:Zx9/Kq7+tail@h:1/0")  # a password holding "/": the rest reads as a path
    assert "Kq7" not in str(caught.value) and "tail" not in str(caught.value)


def test_a_redis_urls_database_must_be_a_number_and_a_password_never_shows() -> None:
    for url in ("redis://h:6379/0", "redis://h:6379", "redis://h/", "rediss://:p@h/15?ssl_cert_reqs=none",
                "unix:///tmp/r.sock?db=2", "unix:///tmp/r.sock"):
        assert redis_database_problem(url) == "", url
    for url in ("redis://h:6379/abc", "redis://h/1?db=x", "unix:///tmp/r.sock?db=abc"):
        assert "must be a number" in redis_database_problem(url), url
    secret = "redis://:Zx9/Kq7+secretTail@127.0.0.1:1/0"
    for attempt in (lambda: Settings.from_env({"CRAWLER_REDIS_URL": secret}),
                    lambda: Settings.from_env({"CRAWLER_BROKER_URL": f"redis://h/0,{secret}"}),
                    lambda: connect(secret)):
        with pytest.raises(ValueError, match="percent-encoded") as caught:
            attempt()
        assert "Kq7" not in str(caught.value) and "secretTail" not in str(caught.value)


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


def test_the_cluster_form_names_its_nodes_and_their_password() -> None:
    assert parse_cluster("redis+cluster://:pw%40x@10.0.0.1:7000,10.0.0.2,10.0.0.3:7002/") == ClusterURL(
        (("10.0.0.1", 7000), ("10.0.0.2", 6379), ("10.0.0.3", 7002)), None, "pw@x")
    assert parse_cluster("redis+cluster://u:p@h:1").username == "u"
    assert is_cluster("redis+cluster://h:1") and not is_cluster("redis://h:1/0")
    with pytest.raises(ValueError, match="database 0 only"):
        parse_cluster("redis+cluster://h:1/3")
    with pytest.raises(ValueError, match="not a redis\\+cluster"):
        parse_cluster("redis://h:1")


def test_a_cluster_holds_state_only_so_it_needs_a_broker_of_its_own() -> None:
    with pytest.raises(SettingError, match="CRAWLER_BROKER_URL"):
        Settings.from_env({"CRAWLER_REDIS_URL": "redis+cluster://10.0.0.1:7000"})
    s = Settings.from_env({"CRAWLER_REDIS_URL": "redis+cluster://10.0.0.1:7000",
                           "CRAWLER_BROKER_URL": "redis://10.0.0.9:6379/0"})
    assert [b.url for b in brokers(s)] == ["redis://10.0.0.9:6379/0"]
