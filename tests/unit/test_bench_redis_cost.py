"""The Redis cost benchmark's MONITOR breakdown: commands put down to the right script and key."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from bench.redis_cost import _key_kind, _script_names, print_breakdown
from crawler.dedup import neardup
from crawler.frontier import lua


def test_scripts_are_named_by_their_sha() -> None:
    names = _script_names()
    assert names[hashlib.sha1(lua.DISPATCH.encode()).hexdigest()] == "dispatch"
    assert names[hashlib.sha1(lua.FETCHED.encode()).hexdigest()] == "fetched"
    assert "bloom_add" in names.values()
    assert names[hashlib.sha1(neardup.SCRIPTS["neardup_decide"].encode()).hexdigest()] == "neardup_decide"


def test_keys_are_grouped_by_structure() -> None:
    assert _key_kind("c:{job-1}:ready:0") == "ready"
    assert _key_kind("c:{job-1}:cnt") == "cnt"
    assert _key_kind("c:{wake}:1") == "c:{wake}"
    assert _key_kind("shard-0") == "shard-*"
    assert _key_kind("unacked") == "unacked"


def test_the_breakdown_sums_each_script_with_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    where = Counter({"dispatch: EVALSHA": 10, "dispatch: HGET": 30, "HINCRBY cnt": 20})
    print_breakdown(where, 10)
    out = capsys.readouterr().out
    assert "dispatch" in out and "4.00" in out and "HGET 3.0" in out and "HINCRBY cnt" in out
