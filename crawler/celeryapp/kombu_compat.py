"""A worker outlives its broker's failover.

When the broker's master is lost, Celery releases the broken connection (``Connection.collect``,
which lets go of the transport) and then closes it; closing the channel restores the messages
the worker held unacknowledged, which needs a client, and kombu's Redis channel builds one from
the transport it no longer has: ``_connparams`` fails with AttributeError, which Celery takes
for an unrecoverable error, and the worker exits (seen with the broker under Sentinel, SIGKILL
on its master: ``tests/integration/test_sentinel.py``). Raised as the connection error it is,
the close passes over it and the worker reconnects; the messages, still in the broker's unacked
set, come back after the visibility timeout (kombu's ``restore_visible``), as a dead worker's do.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis

_original = kombu_redis.Channel._connparams  # type: ignore[attr-defined]  # kombu's stubs lack it


def _connparams(self: Any, asynchronous: bool = False) -> Any:
    if self.connection is None or self.connection.client is None:
        raise redis.exceptions.ConnectionError("the broker connection was released: nothing to restore through")
    return _original(self, asynchronous)


def install() -> None:
    kombu_redis.Channel._connparams = _connparams  # type: ignore[attr-defined]  # as above
