"""The frontier's packed records: one codec each, in the forms the Lua scripts read."""

from __future__ import annotations

from dataclasses import replace

from crawler.frontier import Entry
from crawler.frontier.records import FETCHED, FETCHING, IpWait, Lease, Retry


def test_lease_round_trip_keeps_an_entry_with_spaces() -> None:
    entry = Entry("http://a.com/a b", 2, "http://a.com/ x", 1).encode()
    lease = Lease("tok.0", FETCHING, 3, "a.com", "h:a.com", entry)
    raw = lease.encode()
    assert raw == f"tok.0 f 3 a.com h:a.com {entry}"
    assert Lease.decode(raw) == Lease.decode(raw.encode()) == lease
    assert Entry.decode(Lease.decode(raw).entry) == Entry("http://a.com/a b", 2, "http://a.com/ x", 1)


def test_moving_a_lease_changes_only_its_shard() -> None:
    raw = "t d 0 b.org 10.0.0.1 0 0 14 http://b.org/ "
    moved = replace(Lease.decode(raw), shard=5)
    assert moved.stage == FETCHED
    assert moved.encode() == "t d 5 b.org 10.0.0.1 0 0 14 http://b.org/ "


def test_retry_and_ip_wait_round_trip() -> None:
    retry = Retry(1, "c.net", "0 2 13 http://c.net x")
    assert retry.encode() == "1 c.net 0 2 13 http://c.net x"
    assert Retry.decode(retry.encode().encode()) == retry
    wait = IpWait(4, "d.io")
    assert wait.encode() == "4 d.io"
    assert IpWait.decode(b"4 d.io") == wait
