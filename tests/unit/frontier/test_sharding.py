import subprocess
import sys
from collections import Counter

import pytest

from crawler.frontier.sharding import queue_name, ranked_shards, shard_of_domain, shard_of_queue, shard_of_url

DOMAINS = [f"site{i}.example{i % 7}.com" for i in range(10_000)]


@pytest.mark.parametrize("shards", [2, 3, 4, 5, 8])
def test_load_is_even_within_5_percent(shards: int) -> None:
    counts = Counter(shard_of_domain(d, shards) for d in DOMAINS)
    fair = len(DOMAINS) / shards
    assert set(counts) == set(range(shards))
    for shard, n in counts.items():
        assert abs(n / fair - 1) <= 0.05, (shard, n / fair)


@pytest.mark.parametrize("before, after", [(2, 3), (3, 4), (4, 5), (8, 9), (3, 2)])
def test_changing_shard_count_moves_about_one_nth(before: int, after: int) -> None:
    moved = sum(shard_of_domain(d, before) != shard_of_domain(d, after) for d in DOMAINS)
    expected = abs(after - before) / max(before, after)
    assert abs(moved / len(DOMAINS) - expected) <= 0.02, moved / len(DOMAINS)
    # Only moves into the new shard (growing) or out of the removed one (shrinking).
    for d in DOMAINS:
        a, b = shard_of_domain(d, before), shard_of_domain(d, after)
        if a != b:
            assert (b == after - 1) if after > before else (a == before - 1)


def test_top_ranked_is_the_owner_and_runner_up_the_backup() -> None:
    for d in DOMAINS[:200]:
        ranks = ranked_shards(d, 5)
        assert sorted(ranks) == list(range(5))
        assert ranks[0] == shard_of_domain(d, 5)


def test_stable_across_processes() -> None:
    # Python's own hash() is salted per process; ours must not be.
    code = ("from crawler.frontier.sharding import shard_of_domain; "
            "print([shard_of_domain(f'd{i}.com', 7) for i in range(50)])")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert other.strip() == str([shard_of_domain(f"d{i}.com", 7) for i in range(50)])


def test_one_domain_one_shard_and_queue_names() -> None:
    assert shard_of_url("http://a.example.com/x", 4) == shard_of_url("https://b.example.com:8443/y", 4)
    assert queue_name(3) == "shard-3"
    assert shard_of_queue("shard-12") == 12
    assert shard_of_queue("celery") is None
