"""SIGTERM, SIGHUP and SIGINT as one stop request, raised where it is safe to stop.

``crawler crawl`` owns child processes (a private Redis, Celery workers in sessions of their own,
so a signal to the crawl's process group does not reach them). Whatever stops the crawl must
stop them too: each of the three signals raises ``StopRequested`` in the main thread, which the
crawl handles as Ctrl-C always was (stop the job, stop the workers warm, stop Redis).

Two places must not be interrupted: starting a child (an exception inside ``Popen`` would leave
a process nobody holds) and the shutdown itself. Inside ``deferred()`` a signal is only noted
and raised when the block ends; once a stop is under way, later signals do not raise again but
make ``hurry()`` true, so the shutdown can kill instead of waiting.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class StopRequested(BaseException):
    """A stop signal arrived. A BaseException, as KeyboardInterrupt is, so ``except Exception``
    on the way does not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def stop_in(exc: BaseException) -> StopRequested | None:
    """The stop request ``exc`` is or carries: Python wraps an exception raised in some places
    (a class body's ``__set_name__`` while a module imports, say) in one of its own, with the
    original as its cause."""
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        if isinstance(at, StopRequested):
            return at
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return None


def exit_status(signum: int) -> int:
    """The shell's convention for "ended by signal N": 128 + N (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + signum


class StopSignals:
    """Installs the handlers while active (main thread only; elsewhere it does nothing), except
    for signals the process was told to ignore."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._deferred = 0
        self._raised = False
        self._holding = False
        self._previous: dict[int, Any] = {}

    @property
    def signum(self) -> int:
        """The first stop signal received, or 0."""
        return self.received[0] if self.received else 0

    def hurry(self) -> bool:
        """A second signal arrived: stop now rather than wait."""
        return len(self.received) > 1

    def hold(self) -> None:
        """From now on signals are noted, never raised (the shutdown has begun)."""
        self._raised = self._holding = True

    def check(self) -> None:
        """Raise the stop request if a signal came and its exception never reached the crawl: a
        handler's exception raised while a ``__del__`` runs (a garbage-collected connection
        pool, say) is printed and dropped by Python."""
        if self.received and not self._holding and not self._deferred:
            self._raised = True
            raise StopRequested(self.received[0])

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if not self._raised and not self._deferred:
            self._raised = True
            raise StopRequested(signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1
        if not self._deferred and self.received and not self._raised:
            self._raised = True
            raise StopRequested(self.received[0])

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                # An ignored signal stays ignored: `nohup crawler crawl` must survive a hang-up,
                # and a shell starts background jobs with SIGINT ignored.
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
