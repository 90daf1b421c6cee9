"""The frontier entry's encoding: no byte of a URL or referrer can shift its fields."""

from __future__ import annotations

import random

import pytest

from crawler.frontier import Entry

# Every character class that a separator-based encoding could trip on.
AWKWARD = [" ", "\t", "\n", "\r", "\x00", "\x7f", "\x85", "\u2028", "\u3000", "é", "1", "%20"]


def test_round_trips_any_characters() -> None:
    rng = random.Random(7)
    pieces = [*AWKWARD, "a", "/"]
    for _ in range(2000):
        url = "http://a.com/" + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        ref = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        e = Entry(url, rng.randint(0, 50), ref, rng.randint(0, 5))
        assert Entry.decode(e.encode()) == e
        assert Entry.decode(e.encode().encode()) == e  # as Redis hands it back


def test_url_is_counted_in_bytes_as_lua_reads_it() -> None:
    e = Entry("http://a.com/é x", 1, "r")
    assert e.encode() == f"1 0 {len(e.url.encode())} http://a.com/é x r"


def test_entries_of_the_older_form_still_decode() -> None:
    assert Entry.decode(b"2 1 http://a.com/x http://a.com/") == Entry("http://a.com/x", 2, "http://a.com/", 1)
    assert Entry.decode("0 0 http://a.com/ ") == Entry("http://a.com/")


def test_a_cut_entry_is_an_error_not_a_wrong_url() -> None:
    with pytest.raises(ValueError, match="not 30 bytes"):
        Entry.decode("0 0 30 http://a.com/x ")
