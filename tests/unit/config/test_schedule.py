from __future__ import annotations

import datetime as dt

import pytest

from crawler.config import schedule
from crawler.config.schedule import CHANGED, DEAD, FAILED, GONE, NEW, UNCHANGED
from crawler.config.settings import Settings
from crawler.stages import plan_visit
from crawler.stages.messages import FetchedPage
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
    # Started late (resumed after a pause) just before a slot: not followed within seconds.
    assert schedule.next_cycle(20, "", 20, 79) == 100
    assert schedule.next_cycle(20, "", 20, 70) == 100  # more than half a period
    assert schedule.next_cycle(60, "", 1000, 1000.5) == 1060  # a beat's tick late: the beat kept
    # A short period and a tick late by more than half of it, no slot missed: the slots stay.
    assert schedule.next_cycle(8, "", 0, 5) == 8
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
    page = FetchedPage("", not_modified=True, cycle=3, cycle_base=4990.0)
    assert plan_visit(rec, stored, page, s) == UNCHANGED
    assert (rec.status, rec.title, rec.outlinks, rec.etag) == (200, "T", ["http://a.test/x"], '"e1"')
    assert (rec.revisit_interval, rec.next_visit, rec.cycle) == (150.0, 5140.0, 3)

    gone = PageRecord("http://a.test/", "j", "t3", status=404, error="http_4xx", fetched_at=6000.0)
    assert plan_visit(gone, stored, FetchedPage("", cycle=4, cycle_base=6000.0), s) == GONE
    assert (gone.status, gone.gone_cycle, gone.title, gone.revisit_interval) == (404, 4, "T", 1000.0)


def test_the_default_revisit_minimum_is_the_period() -> None:
    assert Settings.from_env().revisit_min == 0
    assert schedule.revisit_floor(0.0, 60.0, 86400.0) == 60.0
    assert schedule.revisit_floor(0.0, 7 * 86400.0, 86400.0) == 86400.0  # never above revisit_max
    assert schedule.revisit_floor(5.0, 60.0, 86400.0) == 5.0  # an explicit value stays
    with pytest.raises(ValueError,
                       match=r"setting revisit_min: must be a finite number >= 0 \(0: the job's period\), got -1"):
        Settings.from_env(revisit_min=-1.0)
    with pytest.raises(ValueError, match=r"revisit_min \(7200 s\) is longer than revisit_max \(3600 s\)"):
        Settings.from_env(revisit_min=7200.0, revisit_max=3600.0)
    with pytest.raises(ValueError, match="setting revisit_max: must be a finite number > 0"):
        Settings.from_env(revisit_max=0.0)


def test_with_default_revisits_a_page_of_a_one_minute_job_is_due_at_the_next_cycle() -> None:
    s = Settings.from_env(every=60.0)
    first = PageRecord("http://a.test/p", "j", "t1", status=200, content_sha1="aa", fetched_at=1010.0)
    assert plan_visit(first, None, FetchedPage("", cycle=1, cycle_base=1000.0), s) == NEW
    assert (first.revisit_interval, first.next_visit) == (60.0, 1060.0)  # the next cycle's due time
    changed = PageRecord("http://a.test/p", "j", "t2", status=200, content_sha1="bb", fetched_at=1065.0)
    plan_visit(changed, first.to_dict(), FetchedPage("", cycle=2, cycle_base=1060.0), s)
    assert (changed.revisit_interval, changed.next_visit) == (60.0, 1120.0)  # not below the period
    same = PageRecord("http://a.test/p", "j", "t3", status=200, content_sha1="bb", fetched_at=1125.0)
    plan_visit(same, changed.to_dict(), FetchedPage("", cycle=3, cycle_base=1120.0), s)
    assert same.revisit_interval == 90.0  # unchanged pages still space out
    # A cron job's period is the gap between its runs: hourly here.
    hourly = Settings.from_env(cron="0 * * * *")
    rec = PageRecord("http://a.test/p", "j", "t4", status=200, content_sha1="aa", fetched_at=ts("2026-11-21 22:00:05"))
    plan_visit(rec, None, FetchedPage("", cycle=1, cycle_base=ts("2026-11-21 22:00:00")), hourly)
    assert rec.revisit_interval == 3600.0
