from __future__ import annotations

import datetime as dt

import pytest

from crawler import schedule
from crawler.pipeline import plan_visit
from crawler.schedule import CHANGED, DEAD, FAILED, GONE, NEW, UNCHANGED
from crawler.settings import Settings
from crawler.store import PageRecord


def ts(text: str) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("15m", 900), ("6h", 21600),
                                               ("1.5d", 129600), ("2w", 1209600)])
def test_durations(text: str, seconds: float) -> None:
    assert schedule.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "6x", "h", "-1h", "1h30m"])
def test_bad_durations_are_named(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        schedule.parse_duration(text)


def test_cron_fires_on_its_slots_in_utc() -> None:
    c = schedule.parse_cron("0 */6 * * *")
    assert schedule.cron_after(c, ts("2026-11-21 22:04:26")) == ts("2026-11-22 00:00:00")
    assert schedule.cron_after(c, ts("2026-11-22 00:00:00")) == ts("2026-11-22 06:00:00")
    monday = schedule.parse_cron("30 2 * * 1")
    assert schedule.cron_after(monday, ts("2026-11-21 22:00:00")) == ts("2026-11-23 02:30:00")
    first = schedule.parse_cron("0 0 1 * *")
    assert schedule.cron_after(first, ts("2026-12-15 00:00:00")) == ts("2027-01-01 00:00:00")


@pytest.mark.parametrize("expr", ["* * *", "61 * * * *", "0 25 * * *"])
def test_bad_cron_is_named(expr: str) -> None:
    with pytest.raises(ValueError, match="cron expression"):
        schedule.parse_cron(expr)


def test_next_cycle_keeps_the_beat_and_skips_missed_slots() -> None:
    assert schedule.next_cycle(60, "", 1000, 1000) == 1060
    assert schedule.next_cycle(60, "", 1000, 1030) == 1060
    # A cycle that ran three periods long: the missed slots are skipped, not run back to back.
    assert schedule.next_cycle(60, "", 1000, 1185) == 1240
    assert schedule.period(0, "*/5 * * * *", ts("2026-11-21 22:04:26")) == 300


def test_settings_refuse_both_schedules_and_bad_bounds() -> None:
    with pytest.raises(ValueError, match="either every or cron"):
        Settings.from_env(every=60.0, cron="0 * * * *")
    with pytest.raises(ValueError, match="revisit_min"):
        Settings.from_env(revisit_min=100.0, revisit_max=10.0)
    with pytest.raises(ValueError, match="cron expression"):
        Settings.from_env(cron="every day")


def test_revisit_interval_moves_the_right_way_within_bounds() -> None:
    kw = dict(initial=100.0, low=10.0, high=1000.0, grow=1.5, shrink=0.5)
    assert schedule.next_interval(None, NEW, **kw) == 100
    assert schedule.next_interval(100, CHANGED, **kw) == 50
    assert schedule.next_interval(100, UNCHANGED, **kw) == 150
    assert schedule.next_interval(100, FAILED, **kw) == 100
    assert schedule.next_interval(100, GONE, **kw) == 1000
    interval = 100.0
    for _ in range(30):
        interval = schedule.next_interval(interval, UNCHANGED, **kw)
    assert interval == 1000
    for _ in range(30):
        interval = schedule.next_interval(interval, CHANGED, **kw)
    assert interval == 10


def test_classify_against_the_stored_row() -> None:
    live = {"status": 200, "gone_cycle": None, "content_sha1": "aa"}
    kw = dict(sha1="aa", error=None, not_modified=False)
    assert schedule.classify(None, status=200, **kw) == NEW
    assert schedule.classify(live, status=200, **kw) == UNCHANGED
    assert schedule.classify(live, status=200, **{**kw, "sha1": "bb"}) == CHANGED
    assert schedule.classify(live, status=304, **{**kw, "not_modified": True}) == UNCHANGED
    assert schedule.classify(live, status=404, **kw) == GONE
    assert schedule.classify({**live, "gone_cycle": 2}, status=404, **kw) == DEAD
    assert schedule.classify({**live, "gone_cycle": 2}, status=200, **kw) == NEW  # it came back
    assert schedule.classify(None, status=404, **kw) == DEAD
    assert schedule.classify(live, status=None, **{**kw, "error": "timeout"}) == FAILED


def test_plan_visit_keeps_content_of_a_304_and_marks_a_page_gone() -> None:
    s = Settings.from_env(every=100.0, revisit_min=10.0, revisit_max=1000.0)
    stored = PageRecord("http://a.test/", "j", "t1", status=200, title="T", content_sha1="aa",
                        outlinks=["http://a.test/x"], etag='"e1"', revisit_interval=100.0).to_dict()
    rec = PageRecord("http://a.test/", "j", "t2", status=304, fetched_at=5000.0)
    page = {"not_modified": True, "cycle": 3, "cycle_base": 4990.0}
    assert plan_visit(rec, stored, page, s) == UNCHANGED
    assert (rec.status, rec.title, rec.outlinks, rec.etag) == (200, "T", ["http://a.test/x"], '"e1"')
    assert (rec.revisit_interval, rec.next_visit, rec.cycle) == (150.0, 5140.0, 3)

    gone = PageRecord("http://a.test/", "j", "t3", status=404, error="http_4xx", fetched_at=6000.0)
    assert plan_visit(gone, stored, {"cycle": 4, "cycle_base": 6000.0}, s) == GONE
    assert (gone.status, gone.gone_cycle, gone.title, gone.revisit_interval) == (404, 4, "T", 1000.0)
