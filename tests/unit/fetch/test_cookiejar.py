"""The session's bounded cookie jar: which cookies a response sets and a request sends."""

from __future__ import annotations

from crawler.fetch.jar import MAX_COOKIE_BYTES, Cookie, CookieJar, parse_set_cookie

NOW = 1_700_000_000.0
SITE = "http://127.0.1.1:8080"


def test_host_only_cookie_goes_back_to_its_host_only() -> None:
    jar = CookieJar()
    jar.update(SITE + "/login", [("Set-Cookie", "sid=abc; Path=/; HttpOnly")], NOW)
    assert jar.header(SITE + "/members/x", NOW) == "sid=abc"
    assert jar.header("http://127.0.1.2:8080/members/x", NOW) == ""
    assert jar.header("http://127.0.1.11:8080/", NOW) == ""


def test_domain_cookie_matches_subdomains_but_not_lookalikes() -> None:
    c = parse_set_cookie("a=1; Domain=.example.org", "http://www.example.org/", NOW)
    assert c is not None and not c.host_only and c.domain == "example.org"
    jar = CookieJar([c])
    assert jar.header("http://shop.example.org/", NOW) == "a=1"
    assert jar.header("http://example.org/", NOW) == "a=1"
    assert jar.header("http://badexample.org/", NOW) == ""
    # A Domain the host is not in is ignored, as browsers do.
    assert parse_set_cookie("a=1; Domain=other.org", "http://www.example.org/", NOW) is None


def test_path_matching_and_default_path() -> None:
    jar = CookieJar()
    jar.update(SITE + "/members/index.html", [("Set-Cookie", "view=compact")], NOW)
    assert jar.header(SITE + "/members/record-1.html", NOW) == "view=compact"
    assert jar.header(SITE + "/membersonly", NOW) == ""
    assert jar.header(SITE + "/", NOW) == ""
    jar.update(SITE + "/", [("Set-Cookie", "sid=1; Path=/")], NOW)
    assert jar.header(SITE + "/members/x", NOW) == "view=compact; sid=1"  # longer path first


def test_expiry_secure_and_deletion() -> None:
    jar = CookieJar()
    jar.update(SITE + "/", [("Set-Cookie", "short=1; Max-Age=10"), ("set-cookie", "tls=1; Secure"),
                            ("Set-Cookie", "old=1; Expires=Wed, 21 Oct 2015 07:28:00 GMT")], NOW)
    assert jar.header(SITE + "/", NOW) == "short=1"  # tls only over https, old already expired
    assert jar.header(SITE + "/", NOW + 11) == ""
    assert jar.header("https://127.0.1.1:8080/", NOW) == "short=1; tls=1"
    jar.update(SITE + "/", [("Set-Cookie", "short=; Max-Age=0")], NOW)
    assert [c.name for c in jar] == ["tls"]


def test_bounded_count_and_size() -> None:
    jar = CookieJar(max_cookies=3)
    changed = jar.update(SITE + "/", [("Set-Cookie", f"c{i}=v") for i in range(5)], NOW)
    assert len(jar) == 3 and jar.overflow == 2 and len(changed) == 3
    # A cookie already held is still updated at the bound.
    jar.update(SITE + "/", [("Set-Cookie", "c0=new")], NOW)
    assert "c0=new" in jar.header(SITE + "/", NOW) and jar.overflow == 2
    assert parse_set_cookie("big=" + "x" * MAX_COOKIE_BYTES, SITE + "/", NOW) is None
    assert parse_set_cookie("novalue", SITE + "/", NOW) is None


def test_cookies_round_trip_through_their_encoding() -> None:
    c = parse_set_cookie("sid=abc; Path=/; Max-Age=60; Secure", SITE + "/x", NOW)
    assert c is not None
    assert Cookie.decode(c.encode()) == c
    assert Cookie.decode(b"not json") is None
