"""Task messages put on their queues' Redis lists directly, byte for byte as Celery's
``apply_async`` would put them there (message protocol 2, kombu's Redis envelope).

Every stage sends one to three messages per task, and ``apply_async`` spent most of its time
around the one LPUSH that does the work: a producer taken from a pool, a retry wrapper, queue
and exchange declarations, kombu's message objects (9% of a worker's CPU with the defaults,
measured with py-spy). Queues are plain lists named as the queue on the default exchange, on
the broker that holds them (the crawler's Redis, or ``CRAWLER_BROKER_URL``'s: ``crawler.config.brokers``;
``crawler.celeryapp.tasks.Brokers`` picks the client per message), and workers read these
messages as any other.

A message sent from inside a task names it as ``parent_id`` and carries on its ``root_id``, as
``apply_async`` does, so Flower links one page's chain: fetch (the root, sent by a dispatcher)
-> parse -> dedup and store. What differs from ``apply_async``: no ``task-sent`` event is ever
sent (the app turns them off anyway).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any

import redis

# Celery's "embed" part of the body: no callbacks, chains or chords.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


class Message:
    """One task message, ready for its queue."""

    __slots__ = ("payload", "queue")

    def __init__(self, queue: str, payload: str) -> None:
        self.queue = queue
        self.payload = payload


class Publisher:
    def __init__(self, time_limit: float | None, soft_time_limit: float | None, reply_to: str = "") -> None:
        self.timelimit = [time_limit, soft_time_limit]
        self.reply_to = reply_to
        self._origin_pid = 0
        self._origin = ""

    @property
    def origin(self) -> str:
        # As Celery names a sender outside a worker: "gen<pid>@<host>"; rebuilt after a fork.
        if self._origin_pid != os.getpid():
            self._origin_pid = os.getpid()
            self._origin = f"gen{self._origin_pid}@{socket.gethostname()}"
        return self._origin

    def message(self, task: str, queue: str, args: Sequence[Any], kwargs: dict[str, Any] | None = None,
                argsrepr: str = "", parent: tuple[str, str] | None = None) -> Message:
        """``parent``: (id, root id) of the task sending it; None for a root."""
        task_id = str(uuid.uuid4())
        parent_id, root_id = parent if parent is not None else (None, task_id)
        body = json.dumps([list(args), kwargs or {}, _EMBED]).encode()
        envelope = {
            "body": base64.b64encode(body).decode("ascii"),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {
                "lang": "py", "task": task, "id": task_id, "shadow": None, "eta": None, "expires": None,
                "group": None, "group_index": None, "retries": 0, "timelimit": self.timelimit,
                "root_id": root_id, "parent_id": parent_id, "argsrepr": argsrepr or repr(tuple(args)),
                "kwargsrepr": repr(kwargs or {}), "origin": self.origin, "ignore_result": True,
                "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {},
            },
            "properties": {
                "correlation_id": task_id, "reply_to": self.reply_to, "delivery_mode": 2,
                "delivery_info": {"exchange": "", "routing_key": queue}, "priority": 0,
                "body_encoding": "base64", "delivery_tag": str(uuid.uuid4()),
            },
        }
        return Message(queue, json.dumps(envelope))

    @staticmethod
    def send(client: redis.Redis, messages: Sequence[Message]) -> None:
        """Put the messages on their queues in one round trip. kombu's Redis transport pops
        from the right (BRPOP) and publishes on the left, so LPUSH keeps each queue in order."""
        if not messages:
            return
        if len(messages) == 1:
            client.lpush(messages[0].queue, messages[0].payload)
            return
        pipe = client.pipeline(transaction=False)
        for m in messages:
            pipe.lpush(m.queue, m.payload)
        pipe.execute()
