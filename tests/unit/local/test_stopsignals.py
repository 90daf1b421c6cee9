"""Stop signals become one exception, raised only where stopping is safe."""

from __future__ import annotations

import os
import signal

import pytest

from crawler.local.lifeline import PARENT_ENV, parent_from_env
from crawler.local.signals import StopRequested, StopSignals, exit_status, stop_in


def test_each_signal_raises_once_and_later_ones_only_hurry() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        with StopSignals() as stop:
            with pytest.raises(StopRequested) as caught:
                os.kill(os.getpid(), sig)
                signal.pause()  # not reached: the handler raises first
            assert caught.value.signum == sig and stop.signum == sig and not stop.hurry()
            os.kill(os.getpid(), signal.SIGTERM)  # the shutdown is under way: noted, not raised
            assert stop.hurry() and stop.signum == sig
        assert signal.getsignal(sig) is not stop._handle  # the previous handlers are back


def test_a_signal_inside_deferred_is_raised_when_the_block_ends() -> None:
    reached = False
    with StopSignals() as stop, pytest.raises(StopRequested), stop.deferred():
        os.kill(os.getpid(), signal.SIGHUP)
        reached = True  # a child started here is recorded before the stop is raised
    assert reached


class _SignalledWhileCollected:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGHUP)  # the handler's exception is dropped: __del__ cannot raise


def test_a_stop_lost_inside_a_finaliser_is_raised_by_check() -> None:
    with StopSignals() as stop:
        obj = _SignalledWhileCollected()
        del obj  # the signal lands in __del__: Python prints the StopRequested and drops it
        assert stop.signum == signal.SIGHUP
        with pytest.raises(StopRequested) as caught:
            stop.check()
        assert caught.value.signum == signal.SIGHUP
        stop.hold()
        stop.check()  # the shutdown is under way: nothing more to raise


def test_after_hold_nothing_is_raised() -> None:
    with StopSignals() as stop:
        stop.hold()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.signum == signal.SIGTERM


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a command
    try:
        with StopSignals() as stop:
            os.kill(os.getpid(), signal.SIGHUP)
            assert stop.signum == 0
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_exit_status_follows_the_shell() -> None:
    assert (exit_status(signal.SIGINT), exit_status(signal.SIGHUP), exit_status(signal.SIGTERM)) == (130, 129, 143)


def test_parent_pid_from_the_environment() -> None:
    assert parent_from_env({}) == 0
    assert parent_from_env({PARENT_ENV: " 123 "}) == 123
    with pytest.raises(ValueError, match="is not a process id"):
        parent_from_env({PARENT_ENV: "abc"})


class _SignalledWhileNamed:
    def __set_name__(self, owner: type, name: str) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # as a stop landing while a module's classes are made


def test_a_stop_python_wraps_on_its_way_up_is_still_a_stop() -> None:
    with StopSignals() as stop:
        with pytest.raises(BaseException) as caught:
            class Dialect:
                json_value = _SignalledWhileNamed()
        found = stop_in(caught.value)
        assert found is not None and found.signum == signal.SIGTERM == stop.signum
    assert stop_in(RuntimeError("not a stop")) is None
    looped = RuntimeError("a cycle of causes")
    looped.__context__ = ValueError()
    looped.__context__.__context__ = looped
    assert stop_in(looped) is None
