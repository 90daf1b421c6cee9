"""Each frontier script carries the helpers it uses, and only those (``lua._helpers_for``): a
helper missing from one would fail only when that line ran, inside Redis."""

from __future__ import annotations

import re

from crawler.frontier import lua

SCRIPTS = {name: text for name, text in vars(lua).items()
           if name.isupper() and isinstance(text, str) and "local function main()" in text}


def test_every_helper_a_script_mentions_is_defined_in_it_and_no_other() -> None:
    helpers = {n for names, _ in lua._definitions(lua._HELPERS) for n in names}
    assert {"release_slots", "schedule", "flush_wakes", "bump"} <= helpers
    assert len(SCRIPTS) >= 15
    for name, text in SCRIPTS.items():
        defined = set(re.findall(r"^local function (\w+)", text, re.M)) | set(re.findall(r"^local (\w+) =", text, re.M))
        used = lua._code_names(text) & helpers
        assert used <= defined, (name, used - defined)
    # What a short script does not use stays out of it.
    assert "release_slots" not in lua.CONFIRM and "schedule_touched" not in lua.DISPATCH
    assert "release_slots" in lua.FETCHED and "schedule_touched" in lua.ADMIT
