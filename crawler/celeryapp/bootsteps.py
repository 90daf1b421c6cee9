"""The worker bootstep that runs the frontier's ``Dispatcher`` in each worker's main process.

The dispatcher itself knows nothing of Celery: it takes three plain callables, which this step
binds to the fetch, store and dedup tasks and to the queue of the shard each message is for.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from celery import bootsteps

from crawler.celeryapp.config import redis_url
from crawler.celeryapp.signals import shards_of
from crawler.celeryapp.tasks import dedup_task, fetch_task, refill_task, send, send_shared, store_task
from crawler.config.settings import Settings
from crawler.errors import Reason
from crawler.frontier.dispatcher import IDLE_WAIT, Dispatcher
from crawler.stages.messages import failed_page
from crawler.state.conn import check_version, connect

log = logging.getLogger(__name__)
# The GIL switch interval in a worker running a dispatcher. The dispatcher thread sleeps in Redis
# and wakes when a fetch ends; the task thread is often busy in Python then (parsing the page just
# fetched), and by default the dispatcher would wait up to 5 ms for the GIL before it could lease
# that host's next URL, on every per-host cycle. It needs the GIL for little, so switching sooner
# costs the tasks next to nothing.
SWITCH_INTERVAL = 0.001


def send_fetch(job_id: str, shard: int, token: str, entries: list[str]) -> None:
    send(fetch_task, shard, job_id, shard, token, entries)


def send_refill(job_id: str, shard: int) -> None:
    send(refill_task, shard, job_id)


def send_failed(job_id: str, shard: int, token: str, entries: list[str]) -> None:
    send_shared(store_task, job_id, shard, token, [failed_page(e, Reason.LEASE_EXPIRED).to_json() for e in entries])


def send_links(job_id: str, shard: int, token: str, links: list[Any]) -> None:
    send(dedup_task, shard, job_id, token, links)


class DispatcherStep(bootsteps.StartStopStep):
    """Starts a Dispatcher thread for the shard queues this worker consumes (``-Q shard-N``)."""

    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.dispatcher: Dispatcher | None = None
        self.thread: threading.Thread | None = None

    def start(self, worker: Any) -> None:
        shards = shards_of(worker.app)
        if not shards:
            log.warning("worker consumes no shard-N queue (%s): no dispatcher",
                        list(worker.app.amqp.queues.consume_from))
            return
        client = connect(redis_url())
        check_version(client)
        # Only a worker that heartbeats itself judges others' silence (``--without-heartbeat``
        # workers cannot tell a dead shard from one whose workers are quiet like them).
        beats = not (getattr(worker, "options", None) or {}).get("without_heartbeat", False)
        takeover_after = Settings.from_env().takeover_after if beats else 0
        self.dispatcher = Dispatcher(client, shards, send_fetch, send_failed, send_links,
                                     takeover_after=takeover_after, send_refill=send_refill)
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL))
        self.thread = threading.Thread(target=self.dispatcher.run, name="crawler-dispatcher", daemon=True)
        self.thread.start()
        log.info("dispatcher started for shards %s", shards)

    def stop(self, worker: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()
        if self.thread is not None:
            self.thread.join(timeout=IDLE_WAIT + 1)

    def shutdown(self, worker: Any) -> None:
        self.stop(worker)
