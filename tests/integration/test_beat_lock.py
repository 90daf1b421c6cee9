from __future__ import annotations

import time

import redis

from crawler.celeryapp.beat import BeatLock


def test_one_beat_holds_the_lock_and_another_takes_over_when_it_expires(r: redis.Redis) -> None:
    first, second = BeatLock(r, ttl=0.5, identity="a"), BeatLock(r, ttl=0.5, identity="b")
    assert first.hold() and not second.hold()
    for _ in range(4):  # renewed on every tick, the lock never lapses
        time.sleep(0.2)
        assert first.hold() and not second.hold()
    time.sleep(0.6)  # the first beat died: its lock runs out
    assert second.hold() and not first.hold()
    second.release()
    assert first.hold()
