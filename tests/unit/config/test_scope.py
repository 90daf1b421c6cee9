"""Scope controls: allow/deny URL patterns, rel=nofollow links, and their settings."""

from __future__ import annotations

import pytest

from crawler.config.scope import MAX_PATTERN_LENGTH, url_patterns
from crawler.config.settings import SettingError, Settings
from crawler.parse import parse_html

PAGE = b'<a href="/a">a</a><a rel="nofollow" href="/b">b</a><a rel="Sponsored NOFOLLOW" href="/c">c</a>'


def test_allow_patterns_must_match_one_and_deny_patterns_none() -> None:
    p = url_patterns([r"/docs/", r"/blog/"], [r"\.pdf$"])
    assert p.follows("http://e.com/docs/a.html") and p.follows("http://e.com/blog/x")
    assert not p.follows("http://e.com/shop/")  # no allow pattern matches
    assert not p.follows("http://e.com/docs/a.pdf")  # denied
    assert url_patterns([], []).empty and url_patterns([], []).follows("http://e.com/anything")
    assert not url_patterns([], ["e.com"]).follows("http://e.com/")


def test_patterns_are_compiled_once_per_set() -> None:
    assert url_patterns(["a"], ["b"]) is url_patterns(("a",), ("b",))


@pytest.mark.parametrize(("allow", "deny", "named"), [
    (["("], [], "allow_urls"),
    ([], ["ok", "[z-a]"], "deny_urls"),
    (["x" * (MAX_PATTERN_LENGTH + 1)], [], "allow_urls"),
])
def test_a_bad_pattern_is_refused_at_submission_in_one_line(allow: list[str], deny: list[str], named: str) -> None:
    with pytest.raises(SettingError) as exc:
        Settings.from_env({}, allow_urls=allow, deny_urls=deny)
    message = str(exc.value)
    assert named in message and "\n" not in message and len(message) < 300


def test_rel_nofollow_links_are_dropped_and_counted_unless_followed() -> None:
    dropped = parse_html("http://e.com/", PAGE, "text/html")
    assert dropped.links == ["http://e.com/a"] and dropped.nofollow_links == 2
    followed = parse_html("http://e.com/", PAGE, "text/html", follow_nofollow=True)
    assert followed.links == ["http://e.com/a", "http://e.com/b", "http://e.com/c"]
    assert followed.nofollow_links == 0


def test_meta_robots_nofollow_is_still_reported_when_rel_nofollow_is_followed() -> None:
    p = parse_html("http://e.com/", b'<meta name="robots" content="nofollow">' + PAGE, follow_nofollow=True)
    assert p.nofollow  # the parse stage follows none of this page's links


def test_scope_settings_from_the_environment() -> None:
    s = Settings.from_env({"CRAWLER_FOLLOW_NOFOLLOW": "1", "CRAWLER_DENY_URLS": r"\.pdf$, /cart/"})
    assert s.follow_nofollow and s.deny_urls == [r"\.pdf$", "/cart/"]
    assert not Settings.from_env({}).follow_nofollow
