"""Child processes that do not outlive the crawl that started them.

A one-command crawl starts a private redis-server and Celery workers. If the crawl is killed
outright (SIGKILL, the OOM killer), no handler of its own runs, and its children would be
re-parented to init: the workers retrying their dead Redis for ever. Two safeguards:

- ``die_with_parent``: Linux's ``PR_SET_PDEATHSIG`` asks the kernel to signal the child when the
  thread that started it exits. It is set in the child before ``exec`` (redis-server) or by the
  child itself (a worker, see ``watch_parent``).
- ``watch_parent``: a worker started with ``CRAWLER_PARENT_PID`` checks every half second that
  this process is still its parent; when it is not, the worker shuts down warm (SIGTERM to
  itself) and exits hard if that has not finished within ``GRACE`` seconds. It needs no Linux,
  and it also covers a parent that died before the worker could ask for its death signal.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

PARENT_ENV = "CRAWLER_PARENT_PID"
GRACE = 10.0  # seconds a worker's warm shutdown may take once its parent is gone
CHECK_EVERY = 0.5
GONE_EXIT = 75  # status of a worker that had to exit hard (EX_TEMPFAIL: nothing was wrong with it)
_PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


# Looked up once, here: a preexec function runs between fork and exec, where loading a
# library is unsafe if the parent has threads.
_prctl = _load_prctl()


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent exits (Linux only).
    Returns whether it was arranged."""
    if _prctl is None:
        return False
    return _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def preexec_die_with(parent: int, sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child dies with ``parent`` (this process).
    A parent already gone between fork and prctl would never send the signal, hence the check."""

    def preexec() -> None:
        die_with_parent(sig)
        if os.getppid() != parent:
            os._exit(GONE_EXIT)

    return preexec


def watch_parent(parent: int, *, grace: float = GRACE, every: float = CHECK_EVERY,
                 shutdown: Callable[[], None] | None = None, stop: threading.Event | None = None) -> threading.Thread:
    """Start a daemon thread that calls ``shutdown`` (default: SIGTERM to this process, a
    Celery worker's warm shutdown) once ``parent`` is no longer this process's parent, then
    exits the process if it is still running ``grace`` seconds later."""
    stop = stop or threading.Event()
    shutdown = shutdown or (lambda: os.kill(os.getpid(), signal.SIGTERM))

    def run() -> None:
        while os.getppid() == parent:
            if stop.wait(every):
                return
        log.warning("the crawl that started this worker (pid %d) is gone: shutting down", parent)
        shutdown()
        if stop.wait(grace):
            return
        log.error("still running %.0fs after the crawl went: exiting now", grace)
        logging.shutdown()
        os._exit(GONE_EXIT)

    thread = threading.Thread(target=run, name="crawler-parent-watch", daemon=True)
    thread.start()
    return thread


def parent_from_env(env: dict[str, str] | None = None) -> int:
    """The pid in ``CRAWLER_PARENT_PID``, or 0 if unset; a clear error if it is not a pid."""
    raw = (os.environ if env is None else env).get(PARENT_ENV, "").strip()
    if not raw:
        return 0
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{PARENT_ENV}={raw!r} is not a process id")
    return int(raw)
