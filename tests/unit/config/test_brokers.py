"""``crawler.config.brokers``: the broker setting read as one or several brokers, where each queue
lives, and which broker a worker reads from."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.celeryapp.config import brokers, sentinel_options
from crawler.config.brokers import Broker, BrokerError, broker_of_queue, broker_of_shard, parse_brokers, worker_broker
from crawler.config.settings import SettingError, Settings

STATE = "redis://10.0.0.9:6379/0"
TWO = "redis://10.0.0.1:6379/0,redis://10.0.0.2:6379/0"
SENTINELS = "sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26379/1"


def test_without_a_broker_setting_the_crawlers_redis_is_the_broker() -> None:
    assert parse_brokers("", STATE) == (Broker(STATE),)
    assert brokers(Settings.from_env({"CRAWLER_REDIS_URL": STATE})) == (Broker(STATE),)
    # Nothing set at all: the local default, as before.
    assert brokers(Settings.from_env({})) == (Broker("redis://127.0.0.1:6379/0"),)


def test_one_broker_apart_and_several_in_order() -> None:
    assert parse_brokers("redis://10.0.0.1:6379/3", STATE) == (Broker("redis://10.0.0.1:6379/3"),)
    assert parse_brokers(f" {TWO.replace(',', ' , ')} ", STATE) == (
        Broker("redis://10.0.0.1:6379/0"), Broker("redis://10.0.0.2:6379/0"))
    s = Settings.from_env({"CRAWLER_REDIS_URL": STATE, "CRAWLER_BROKER_URL": TWO})
    assert [b.url for b in brokers(s)] == TWO.split(",")


def test_a_sentinel_broker_takes_its_master_name_from_its_url_or_the_setting() -> None:
    named, default = parse_brokers(f"{SENTINELS}#broker-a,sentinel://10.0.0.3:26379", STATE, "crawl")
    assert named == Broker(SENTINELS, "broker-a") and named.sentinel
    assert default == Broker("sentinel://10.0.0.3:26379", "crawl")
    assert sentinel_options(named) == {"master_name": "broker-a"}
    assert sentinel_options(Broker("redis://h:6379/0")) == {}
    s = Settings.from_env({"CRAWLER_REDIS_URL": STATE, "CRAWLER_BROKER_URL": SENTINELS, "CRAWLER_SENTINEL_MASTER": "m"})
    assert brokers(s) == (Broker(SENTINELS, "m"),)


@pytest.mark.parametrize(("spec", "says"), [
    ("10.0.0.1:6379", "has no scheme"),
    ("http://10.0.0.1/", "must be a redis:// or rediss:// or unix:// or sentinel:// URL"),
    ("redis://a:1/0,,redis://b:1/0", "has an empty entry"),
    ("redis://a:1/0,redis://a:1/0", "is named twice"),
    ("redis://a:1/0#name", "only a sentinel:// broker takes a #master-name"),
    ("sentinel://a:1;redis://b:2/0", "is not a sentinel://host:port URL"),
    ("sentinel://a:1#", "without a master name"),
])
def test_a_bad_broker_setting_is_one_line_naming_it(spec: str, says: str) -> None:
    with pytest.raises(BrokerError, match=says) as got:
        parse_brokers(spec, STATE)
    assert "\n" not in str(got.value)
    with pytest.raises(SettingError, match=f"^setting broker_url: .*{says}"):
        Settings.from_env({"CRAWLER_BROKER_URL": spec})


def test_a_password_in_a_bad_broker_setting_is_not_shown() -> None:
    with pytest.raises(SettingError) as got:
        Settings.from_env({"CRAWLER_BROKER_URL": "redis://:hunter2secret@a:1/0,redis://:hunter2secret@a:1/0"})
    assert "hunter2secret" not in str(got.value) and "***" in str(got.value)


def test_shard_n_is_on_broker_n_mod_k_and_shared_stays_with_its_sender() -> None:
    assert [broker_of_shard(n, 3) for n in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert [broker_of_queue(f"shard-{n}", 2, own=1) for n in range(4)] == [0, 1, 0, 1]
    assert broker_of_queue("shared", 2, own=1) == 1 and broker_of_queue("shared", 2, own=0) == 0
    assert broker_of_queue("render", 2, own=1) == 0  # any other queue: the first broker
    assert broker_of_queue("shard-5", 1, own=0) == 0


def test_a_worker_reads_from_its_shard_queues_broker() -> None:
    two = parse_brokers(TWO, STATE)
    assert worker_broker(["shard-1", "shard-3", "shared"], two) == 1
    assert worker_broker(["shard-2"], two) == 0
    assert worker_broker(["render"], two) == 0
    assert worker_broker(["shared"], two) == 0
    assert worker_broker(["shard-0", "shard-1"], parse_brokers("", STATE)) == 0  # one broker: anything goes


def test_a_worker_of_shards_on_two_brokers_is_one_line_naming_both() -> None:
    two = parse_brokers("redis://:pw-of-b0@10.0.0.1:6379/0,redis://10.0.0.2:6379/0", STATE)
    with pytest.raises(BrokerError) as got:
        worker_broker(["shard-0", "shard-1", "shard-2"], two)
    msg = str(got.value)
    assert "\n" not in msg and "pw-of-b0" not in msg
    assert "broker N mod 2" in msg and "shard-0,shard-2" in msg and "broker 1 (redis://10.0.0.2:6379/0): shard-1" in msg
    with pytest.raises(BrokerError, match="queue render is on the first broker"):
        worker_broker(["shard-1", "render"], two)


def test_the_compose_brokers_profile_gives_each_broker_its_shards_workers() -> None:
    import yaml

    from tests.unit.test_compose import _subst

    compose = yaml.safe_load((Path(__file__).resolve().parents[3] / "docker-compose.yml").read_text())
    split = {n: s for n, s in compose["services"].items() if n.startswith("split-")}
    every = parse_brokers(_subst(compose["x-crawler-split"]["environment"]["CRAWLER_BROKER_URL"]), STATE)
    assert len(every) == 2 and {b.url.rsplit("@", 1)[1] for b in every} == {"broker-0:6379/0", "broker-1:6379/0"}
    read = {}
    for name, service in split.items():
        cmd = service["command"]
        if "worker" in cmd:
            read[name] = worker_broker(cmd[cmd.index("-Q") + 1].split(","), every)
    assert read == {"split-shard-0": 0, "split-shard-1": 1, "split-render": 0}
    assert "split-beat" in split
