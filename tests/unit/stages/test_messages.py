"""The stage messages: a JSON round trip gives back the same value, and a message of another
schema version is refused by name rather than misread."""

from __future__ import annotations

import json

import pytest

from crawler.frontier import Entry
from crawler.stages.messages import (
    VERSION,
    BadMessage,
    FetchedPage,
    LinkGroup,
    failed_page,
    groups_from_json,
    groups_to_json,
    pages_from_json,
    pages_to_json,
)


def _page() -> FetchedPage:
    return FetchedPage(url="http://a.test/", depth=2, referrer="http://a.test/r", final_url="http://a.test/x",
                       status=200, headers=(("Content-Type", "text/html"),), redirects=((301, "http://a.test/x"),),
                       body_key="b", content_length=5, content_sha1="aa", content_type="text/html",
                       fetched_by="n:1", attempts=1, cycle=3, cycle_base=10.0, outlinks=("http://a.test/y",),
                       simhash=2**63 + 5, near_duplicate_of="http://a.test/o")


def test_a_page_survives_a_json_round_trip() -> None:
    page = _page()
    wire = json.loads(json.dumps(pages_to_json([page])))
    assert pages_from_json(wire) == [page]
    assert wire[0]["v"] == VERSION
    assert "title" not in wire[0]  # defaults stay off the wire


def test_a_failed_page_survives_a_json_round_trip() -> None:
    page = failed_page(Entry("http://a.test/", 1, "http://a.test/r", attempts=2).encode(), "lease_expired")
    assert (page.url, page.error, page.attempts, page.status) == ("http://a.test/", "lease_expired", 2, None)
    assert FetchedPage.from_json(json.loads(json.dumps(page.to_json()))) == page


def test_link_groups_survive_a_json_round_trip_and_bare_links_decode_to_groups() -> None:
    group = LinkGroup("http://a.test/", 3, ("http://a.test/1", "http://a.test/2"))
    assert groups_from_json(json.loads(json.dumps(groups_to_json([group])))) == [group]
    assert groups_from_json([["http://a.test/1", 1, "http://a.test/"]]) == [
        LinkGroup("http://a.test/", 1, ("http://a.test/1",))]
    assert list(group.links()) == [("http://a.test/1", 3, "http://a.test/"), ("http://a.test/2", 3, "http://a.test/")]


@pytest.mark.parametrize("data, got", [
    ({**_page().to_json(), "v": 2}, "2"),
    ({k: v for k, v in _page().to_json().items() if k != "v"}, "None"),
])
def test_a_page_of_another_schema_version_is_refused_naming_both(data: dict[str, object], got: str) -> None:
    with pytest.raises(BadMessage, match=rf"page message has schema version {got}; this worker speaks version 1"):
        FetchedPage.from_json(data)


def test_a_link_group_of_another_or_no_version_is_refused() -> None:
    with pytest.raises(BadMessage, match="link group message has schema version 7; this worker speaks version 1"):
        LinkGroup.from_json({"v": 7, "referrer": "", "depth": 1, "urls": []})
    with pytest.raises(BadMessage, match="schema version None"):
        LinkGroup.from_json(["http://a.test/", 1, [5]])


def test_a_link_group_from_before_versions_is_read_exactly() -> None:
    # Batches an older worker parked in Redis come back through the dispatcher after an upgrade:
    # refused, they would hold their job open for ever.
    assert LinkGroup.from_json(["http://a.test/", 1, ["http://a.test/1", "http://a.test/2"]]) == \
        LinkGroup("http://a.test/", 1, ("http://a.test/1", "http://a.test/2"))


@pytest.mark.parametrize("data", ["not a list", [{"v": 1}], [{"v": 1, "url": "u", "nope": 1}], [3],
                                  [{"v": 1, "url": 5}]])
def test_malformed_page_messages_are_bad_messages(data: object) -> None:
    with pytest.raises(BadMessage):
        pages_from_json(data)
