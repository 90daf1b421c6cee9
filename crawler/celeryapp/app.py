"""The Celery app: JSON only, acks after the work, bounded redelivery, one queue per shard."""

from __future__ import annotations

from celery import Celery

from crawler.celeryapp import kombu_compat, signals
from crawler.celeryapp.config import brokers, environment, sentinel_options
from crawler.config.settings import Settings
from crawler.state.conn import CONNECT_TIMEOUT, HEALTH_CHECK_INTERVAL, SOCKET_TIMEOUT


def make_app(settings: Settings | None = None) -> Celery:
    kombu_compat.install()
    settings = settings or Settings.from_env()
    # The first broker; a worker of shard queues on another one switches to it as it starts
    # (crawler.celeryapp.signals.choose_broker), before it connects.
    broker = brokers(settings)[0]
    app = Celery("crawler", broker=broker.url, include=["crawler.celeryapp.tasks"])
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        # Ack after the work, and requeue when a child process dies mid-task (acks_late alone
        # would ack it); redeliveries are capped in CrawlTask so a poison message cannot loop.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # A fetch can take seconds: do not let one worker hoard messages behind it.
        worker_prefetch_multiplier=1,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout,
            # kombu's BRPOP waits 1 s at most, well inside these (crawler.state.conn's values).
            "socket_timeout": SOCKET_TIMEOUT,
            "socket_connect_timeout": CONNECT_TIMEOUT,
            "socket_keepalive": True,
            "health_check_interval": HEALTH_CHECK_INTERVAL,
            # kombu sweeps for messages of dead workers only every interval x throttle seconds
            # (100 s by default) and a sweeper killed mid-sweep blocks the rest for the mutex's
            # 300 s: scale both to the visibility timeout so lost messages return promptly.
            "unacked_restore_interval": max(1, min(10, settings.visibility_timeout // 4)),
            "unacked_restore_throttle": 1,
            "unacked_mutex_expire": max(5, min(300, settings.visibility_timeout // 2)),
            # A worker takes from its queues in the order it consumes them: its shard queues
            # (fetch, dedup) before the shared one (parse, store; added last by
            # crawler.celeryapp.signals), not in turn. A fetch that waits behind a parse keeps its
            # hosts idle, and under one request per host that, not CPU, sets pages/s. Shared work
            # never starves: pages fetched and not yet stored count against the job's
            # concurrency, so dispatch stops while they wait.
            "queue_order_strategy": "priority",
            **sentinel_options(broker),  # the master's name, for a broker under Sentinel
        },
        task_time_limit=settings.task_time_limit,
        # The soft limit warns a task shortly before the hard one kills it.
        task_soft_time_limit=settings.task_time_limit - min(30, settings.task_time_limit * 0.2),
        task_default_queue="shard-0",
        task_create_missing_queues=True,
        broker_connection_retry_on_startup=True,
        worker_send_task_events=settings.task_events,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
    )
    # Named, not imported: the scheduler and the bootstep import the tasks, which need this app.
    # The schedule itself is the top-level beat_schedule.py, loaded by the scheduler.
    app.conf.beat_scheduler = "crawler.celeryapp.beat:LockedScheduler"
    app.steps["worker"].add("crawler.celeryapp.bootsteps:DispatcherStep")
    app.steps["worker"].add("crawler.celeryapp.starter:StarterStep")
    signals.install()
    return app


app = make_app(environment())
