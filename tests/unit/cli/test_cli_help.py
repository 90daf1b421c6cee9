"""The command line's surface is pinned: every command and subcommand, and every option's flags,
metavar, choices, default and help, as ``data/cli_help.json`` recorded them before ``cli`` became
a package. A change to what a user types shows here; a new option or command must be added to
the record on purpose."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from crawler.cli import build_parser

RECORD = Path(__file__).resolve().parent / "data" / "cli_help.json"


def _options(p: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    out = {}
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        default = a.default if isinstance(a.default, (str, int, float, bool, type(None))) else repr(a.default)
        out[a.dest] = {"flags": list(a.option_strings), "help": a.help, "metavar": a.metavar,
                       "choices": list(a.choices) if a.choices else None, "required": a.required,
                       "nargs": a.nargs, "default": default}
    return out


def _commands(p: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            helps = {ch.dest: ch.help for ch in a._choices_actions}
            for name, sub in a.choices.items():
                key = " ".join((*prefix, name))
                out[key] = {"help": helps.get(name), "options": _options(sub)}
                out.update(_commands(sub, (*prefix, name)))
    return out


def test_every_command_and_option_is_as_recorded() -> None:
    record = json.loads(RECORD.read_text())
    now = _commands(build_parser())
    assert sorted(now) == sorted(record)
    for name, was in record.items():
        assert now[name]["help"] == was["help"], name
        options = {o["dest"]: o for o in was["options"]}
        assert sorted(now[name]["options"]) == sorted(options), name
        for dest, old in options.items():
            new = now[name]["options"][dest]
            # A help text may be added where there was none; everything else stays as it was.
            if old["help"] is None:
                new = {**new, "help": None}
            assert {k: new[k] for k in old if k != "dest"} == {k: v for k, v in old.items() if k != "dest"}, \
                (name, dest)


def test_every_command_answers_help(capsys: Any) -> None:
    for name in _commands(build_parser()):
        try:
            build_parser().parse_args([*name.split(), "--help"])
        except SystemExit as exc:
            assert exc.code == 0, name
        assert "usage: crawler " + name in capsys.readouterr().out
