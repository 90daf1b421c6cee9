"""The beat schedule: ``celery -A crawler beat`` runs it (crawler.celeryapp.beat loads this module).

One periodic task: every ``CRAWLER_CYCLE_CHECK`` seconds (default 5), start the next cycle of
every periodic job whose time has come (``crawler submit ... --every 6h`` or ``--cron``). The
jobs' own periods live with the jobs in Redis, so submitting a job needs no change here.
"""

from __future__ import annotations

from crawler.config.settings import Settings

_check = Settings.from_env().cycle_check

beat_schedule = {
    "crawler-cycles": {
        "task": "crawler.cycle_tick",
        "schedule": _check,
        # Shard 0 always exists; a tick nobody took in time is useless, the next one comes.
        "options": {"queue": "shard-0", "routing_key": "shard-0", "expires": max(1.0, 2 * _check)},
    },
}
