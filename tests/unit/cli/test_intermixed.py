"""A command's list of values may sit on both sides of its options, as users write them."""

from __future__ import annotations

import argparse

import pytest

from crawler.cli import build_parser, parse_intermixed


def _parse(*argv: str) -> argparse.Namespace:
    return parse_intermixed(build_parser(), list(argv))


def test_a_hosts_settings_after_host_are_its_settings() -> None:
    # `crawler set JOB --host H delay=2` said "unrecognized arguments: delay=2".
    args = _parse("set", "job1", "--host", "a.example", "delay=2", "per_host=3")
    assert (args.job, args.host, args.pairs) == ("job1", "a.example", ["delay=2", "per_host=3"])
    args = _parse("set", "job1", "delay=2", "--host", "a.example", "per_host=3")
    assert args.pairs == ["delay=2", "per_host=3"]


def test_seeds_on_both_sides_of_options_are_all_seeds() -> None:
    args = _parse("crawl", "--out", "o", "http://a.example/", "--workers", "1", "http://b.example/")
    assert args.seeds == ["http://a.example/", "http://b.example/"] and args.workers == "1"


def test_nested_commands_keep_their_own_values() -> None:
    args = _parse("shards", "set", "4", "--job", "j1")
    assert args.count == "4" and args.job == ["j1"]


@pytest.mark.parametrize("argv", [("set", "job1", "--host", "h", "delay=2", "--bogus"),
                                  ("status", "job1", "job2"),
                                  ("crawl", "--out", "o", "http://a.example/", "--nope", "1")])
def test_what_no_command_takes_is_still_one_line_and_status_2(argv: tuple[str, ...],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        _parse(*argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unrecognized arguments: " in err[0], err


def test_after_a_double_dash_every_word_is_a_value() -> None:
    args = _parse("crawl", "--out", "o", "http://a.example/", "--workers", "1", "--", "http://b.example/")
    assert args.seeds == ["http://a.example/", "http://b.example/"]
