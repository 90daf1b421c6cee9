"""A stopped crawl leaves nothing running: `crawler crawl` as a real process tree (private Redis,
two Celery workers), stopped by SIGTERM, SIGHUP or SIGINT at several moments, or killed outright;
afterwards no process of that crawl is left, the exit status says which signal, and the output
is readable."""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from crawler.testweb import TestWeb
from tests.conftest import ROOT
from tests.integration.test_crawl import no_private_redis_env

Proc = tuple[int, str]  # (pid, start time in clock ticks): a pid alone may be reused


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from the state on (the name may hold spaces)


def _alive(proc: Proc) -> bool:
    fields = _stat(proc[0])
    return fields is not None and fields[19] == proc[1] and fields[0] not in ("Z", "X")


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _children(parent: int) -> set[Proc]:
    found = set()
    for pid in _pids():
        fields = _stat(pid)
        if fields is not None and int(fields[1]) == parent:
            found.add((pid, fields[19]))
    return found


def _marked(mark: str) -> set[Proc]:
    """Processes whose environment carries ``mark`` (the workers; redis-server rewrites its own)."""
    needle = f"CRAWLER_TEST_MARK={mark}".encode()
    found = set()
    for pid in _pids():
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        fields = _stat(pid)
        if needle in env.split(b"\0") and fields is not None and fields[0] not in ("Z", "X"):
            found.add((pid, fields[19]))
    return found


class Tracker:
    """Every child the crawl ever had, sampled every 20 ms while it runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.seen: set[Proc] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.seen |= _children(self.pid)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(db, timeout=1)
        try:
            return int(conn.execute("SELECT count(*) FROM pages").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.OperationalError:
        return 0  # not created yet


def _wait_for(cond: Callable[[], bool], proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"the crawl ended (status {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout}s"
        time.sleep(0.02)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _default_signals() -> None:
    # The crawl keeps signals its caller ignored (nohup): a suite run under nohup must not.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


MOMENTS = {
    "at-0.3s": "0.3 s after the command started (often before any child exists)",
    "starting": "Redis is up, the workers are being started",
    "crawling": "pages are being stored",
}
# SIGTERM and SIGINT go to the crawl's whole process group, as `timeout -s TERM` and a terminal's
# Ctrl-C send them; SIGHUP to its pid alone, as `kill -HUP` does (test_crawl sends SIGINT so too).
TO_GROUP = {"SIGTERM", "SIGINT"}
CASES = [(sig, moment) for moment in MOMENTS for sig in ("SIGTERM", "SIGHUP", "SIGINT")] + [("SIGKILL", "crawling")]


@pytest.mark.parametrize(("how", "moment"), CASES, ids=[f"{s}-{m}" for s, m in CASES])
def test_a_signal_leaves_no_process_of_the_crawl(make_web: Callable[..., TestWeb], tmp_path: Path,
                                                 how: str, moment: str) -> None:
    web = make_web(2, 150)
    out, mark = tmp_path / "out", uuid.uuid4().hex
    err = tmp_path / "stderr"
    env = {**no_private_redis_env(), "CRAWLER_TEST_MARK": mark}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "crawler", "crawl", *web.seeds(), "--out", str(out),
                             "--delay", "0.05", "--workers", "2", "-q"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(err, "wb"),  # noqa: SIM115
                            start_new_session=True, preexec_fn=_default_signals)
    tracker = Tracker(proc.pid)
    left: set[Proc] = set()
    try:
        if moment == "at-0.3s":
            time.sleep(0.3)
        elif moment == "starting":
            _wait_for(lambda: "redis: started" in err.read_text(), proc, "private Redis")
        else:
            _wait_for(lambda: _stored(out / "crawl.db") >= 5, proc, "stored pages")
            assert len(_children(proc.pid)) == 3, "expected Redis and two workers"
        sig = signal.Signals[how]
        if how in TO_GROUP:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        signalled = time.monotonic()
        status = proc.wait(60)
        stopped = time.monotonic()
        tracker.stop()
        text = err.read_text()

        if sig == signal.SIGKILL:
            assert status == -signal.SIGKILL
            # No handler ran: the children notice their parent is gone and end by themselves.
            deadline = time.monotonic() + 30
            while any(_alive(p) for p in tracker.seen | _marked(mark)) and time.monotonic() < deadline:
                time.sleep(0.05)
        elif moment == "at-0.3s" and status == -sig:
            pass  # the signal came before the handlers were installed: no child existed yet
        else:
            assert status == 128 + sig, text[-3000:]
            assert f"interrupted ({sig.name})" in text, text[-3000:]
        left = {p for p in tracker.seen | _marked(mark) if _alive(p)}
        assert not left, f"still running after the crawl ended: {left}"
        port = re.search(r"redis: started .* on 127\.0\.0\.1:(\d+)", text)
        if port:
            assert not _port_open(int(port.group(1))), "the private Redis still answers"
        if moment == "crawling":
            assert len(tracker.seen) >= 3
            stored = _stored(out / "crawl.db")
            assert 0 < stored < len(web.reachable_urls())
        if (out / "crawl.db").exists():
            conn = sqlite3.connect(out / "crawl.db")
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            conn.close()
        hits = len(web.hits())
        time.sleep(0.3)
        assert len(web.hits()) == hits, "something is still crawling"
        print(f"\n{how} {moment}: status {status}, {len(tracker.seen)} children, stopped "
              f"{stopped - signalled:.2f}s after the signal ({signalled - started:.2f}s in), "
              f"all gone {time.monotonic() - signalled:.2f}s after it")
    finally:
        tracker.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid, _start in {p for p in left | tracker.seen if _alive(p)}:
            os.kill(pid, signal.SIGKILL)  # only this test's own processes, by pid


def test_a_worker_whose_parent_is_gone_exits_even_if_its_shutdown_hangs() -> None:
    # The watch without the kernel's help (not Linux, or a parent gone before prctl): a process
    # whose recorded parent is not its parent, and whose warm shutdown never ends, still exits.
    code = ("import time; from crawler.local import lifeline\n"
            "lifeline.watch_parent(-1, grace=0.5, every=0.05, shutdown=lambda: print('shutdown', flush=True))\n"
            "time.sleep(30)\n")
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert res.returncode == 75 and res.stdout == "shutdown\n", res.stderr
    assert time.monotonic() - started < 10


def test_a_stop_wrapped_on_its_way_up_ends_the_crawl_as_a_stop(redis_url: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # CI once sent SIGTERM while the store's module was being imported: Python handed the crawl a
    # RuntimeError caused by the stop, and it exited 1 with a traceback instead of 143.
    from crawler import embedded
    from crawler.config.settings import Settings
    from crawler.local.signals import StopRequested

    def submit(*_args: object, **_kwargs: object) -> str:
        try:
            raise StopRequested(signal.SIGTERM)
        except StopRequested as stop:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance 'json_value' in 'Dialect'") from stop

    monkeypatch.setattr(embedded.jobs, "submit", submit)
    outcome = embedded.crawl(Settings.from_env(redis_url=redis_url), ["http://127.0.0.1:9/"], str(tmp_path / "out"))
    assert outcome.interrupted and outcome.signum == signal.SIGTERM

    def broken(*_args: object, **_kwargs: object) -> str:
        raise RuntimeError("a real error")

    monkeypatch.setattr(embedded.jobs, "submit", broken)
    with pytest.raises(RuntimeError, match="a real error"):
        embedded.crawl(Settings.from_env(redis_url=redis_url), ["http://127.0.0.1:9/"], str(tmp_path / "out2"))
