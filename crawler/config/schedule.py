"""When a periodic job's next cycle starts, and how often each page is revisited.

Pure functions, so the beat task and the store stage share them and tests call them directly.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from crawler.errors import ConfigError, shown

if TYPE_CHECKING:
    from celery.schedules import crontab

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``6h``, ``1d``, ``2w`` -> seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"not a duration: {shown(text)} (try 30s, 15m, 6h, 1d)")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def parse_cron(expr: str) -> crontab:
    """A five-field cron expression (minute hour day-of-month month day-of-week), in UTC."""
    parts = expr.split()
    if len(parts) != 5:
        raise ConfigError(f"cron expression {shown(expr)} needs 5 fields: minute hour day-of-month month day-of-week")
    minute, hour, dom, month, dow = parts
    # Lazy: Celery's crontab parses the fields; only cron jobs need it, and the stages that
    # import this module for classify() stay free of Celery.
    from celery.schedules import crontab

    try:
        return crontab(minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow)
    except ValueError as exc:
        raise ConfigError(f"cron expression {shown(expr)}: {exc}") from exc


class _Fields(Protocol):
    """The expanded field sets a ``crontab`` holds: what its fields match, as numbers."""

    minute: set[int]
    hour: set[int]
    day_of_week: set[int]
    day_of_month: set[int]
    month_of_year: set[int]


def cron_after(cron: crontab, t: float) -> float:
    """The first time the cron schedule fires strictly after ``t`` (UTC)."""
    # celery-types declares only crontab's constructor, not the sets it expands its fields to.
    c = cast(_Fields, cron)
    at = dt.datetime.fromtimestamp(t, dt.UTC)
    day = at.replace(hour=0, minute=0, second=0, microsecond=0)
    for _ in range(366 * 5):  # every day/month/weekday combination recurs within five years
        # cron's weekdays count from Sunday = 0; Python's from Monday = 0.
        if (day.day in c.day_of_month and day.month in c.month_of_year
                and (day.weekday() + 1) % 7 in c.day_of_week):
            for hour in sorted(c.hour):
                for minute in sorted(c.minute):
                    slot = day.replace(hour=hour, minute=minute)
                    if slot > at:
                        return slot.timestamp()
        day += dt.timedelta(days=1)
    raise ConfigError("cron expression never fires")


def next_cycle(every: float, cron: str, scheduled: float, now: float) -> float:
    """When the cycle after the one scheduled at ``scheduled``, starting ``now``, starts. Slots
    already missed (a cycle ran longer than the period, the job was paused) are skipped rather
    than run back to back, and so is one less than half a period after ``now``: a cycle started
    late, just before a slot, was followed by the next within seconds, refetching what it had
    just fetched."""
    if cron:
        return cron_after(parse_cron(cron), max(now, scheduled))
    if every <= 0:
        raise ValueError("not a periodic job")
    nxt = scheduled + every
    # Missed a whole slot (a pause, a long cycle): the next is half a period away at least. A
    # start only as late as the beat's tick keeps the slots as they are.
    earliest = now + every / 2 if now - scheduled >= every else now
    if nxt <= earliest:
        nxt += ((earliest - nxt) // every + 1) * every
    return nxt


def period(every: float, cron: str, now: float) -> float:
    """The job's period in seconds (for a cron job: the gap to the slot after next)."""
    if every > 0:
        return every
    first = next_cycle(0, cron, now, now)
    return next_cycle(0, cron, first, first) - first


def revisit_floor(revisit_min: float, period_s: float, revisit_max: float) -> float:
    """The shortest revisit interval: ``revisit_min`` if given, else (0) the job's period, so
    that a job run every minute finds every page due every minute until its interval adapts;
    never above ``revisit_max``."""
    return revisit_min if revisit_min > 0 else min(period_s, revisit_max)


# Outcomes of one visit to a page, as the store stage classifies them.
NEW, CHANGED, UNCHANGED, GONE, DEAD, FAILED = "new", "changed", "unchanged", "gone", "dead", "failed"


def classify(previous: Mapping[str, Any] | None, *, status: int | None, sha1: str, error: str | None,
             not_modified: bool) -> str:
    """What one visit found, against the page's stored row (None: never stored)."""
    live = previous is not None and previous.get("status") == 200 and not previous.get("gone_cycle")
    if not_modified:
        return UNCHANGED if live else NEW
    if status in (404, 410):
        return GONE if live else DEAD
    if status == 200 and not error:
        if not live:
            return NEW
        return UNCHANGED if previous and previous.get("content_sha1") == sha1 else CHANGED
    return FAILED


def next_interval(previous: float | None, outcome: str, *, initial: float, low: float, high: float,
                  grow: float, shrink: float) -> float:
    """Adaptive revisit interval (like Nutch's AdaptiveFetchSchedule): a page that changed is
    visited sooner, one that did not is visited later, always within [low, high]. Gone and dead
    pages are checked again only at ``high``."""
    if outcome in (GONE, DEAD):
        return high
    if outcome == NEW or not previous:
        base = initial
    elif outcome == CHANGED:
        base = previous * shrink
    elif outcome == UNCHANGED:
        base = previous * grow
    else:  # a failed visit says nothing about change: keep the pace
        base = previous
    return min(high, max(low, base))
