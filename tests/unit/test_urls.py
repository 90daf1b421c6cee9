import pytest

from crawler.errors import BadURL
from crawler.urls import canonicalize, domain_of, in_scope, registered_domain


@pytest.mark.parametrize("raw, canon", [
    ("HTTP://Example.COM:80/a/./b/../c?b=2&a=1#frag", "http://example.com/a/c?a=1&b=2"),
    ("https://example.com:443", "https://example.com/"),
    ("http://example.com:8080/x", "http://example.com:8080/x"),
    ("http://user:pw@example.com/x", "http://example.com/x"),
    ("  http://example.com/a b  ", "http://example.com/a%20b"),
    ("http://Bücher.de/x", "http://xn--bcher-kva.de/x"),
    ("http://[::1]:80/", "http://[::1]/"),
    ("http://127.0.1.1:8080/p/1.html?y=2&x=1", "http://127.0.1.1:8080/p/1.html?x=1&y=2"),
    # Click-tracking parameters name no other page; other parameters keep their order and encoding.
    ("http://a.com/p?utm_medium=e&utm_source=n", "http://a.com/p"),
    ("http://a.com/p?b=2&UTM_Source=x&fbclid=3&a=%C3%A9", "http://a.com/p?a=%C3%A9&b=2"),
    ("http://a.com/p?q=utm_source&gclidx=1", "http://a.com/p?gclidx=1&q=utm_source"),
])
def test_canonical_forms(raw: str, canon: str) -> None:
    assert canonicalize(raw) == canon


@pytest.mark.parametrize("raw", [
    "javascript:alert(1)", "mailto:a@b.c", "data:text/html,x", "ftp://example.com/", "http://[::1",
    "http://%zz/", "http:///nohost", "http://" + "a" * 3000 + ".com/",
])
def test_unfetchable_urls_are_bad_url(raw: str) -> None:
    with pytest.raises(BadURL) as exc:
        canonicalize(raw)
    assert exc.value.reason == "bad_url"


def test_max_length_is_a_parameter() -> None:
    url = "http://example.com/" + "a" * 100
    assert canonicalize(url, 200) == url
    with pytest.raises(BadURL):
        canonicalize(url, 50)


@pytest.mark.parametrize("host, domain", [
    ("a.b.example.co.uk", "example.co.uk"),
    ("WWW.Example.COM", "example.com"),
    ("example.com:8080", "example.com"),
    ("127.0.1.1:8080", "127.0.1.1"),
    ("[::1]:80", "[::1]"),
    ("localhost", "localhost"),
    ("foo.github.io", "foo.github.io"),  # a private suffix: each user's site is its own domain
])
def test_registered_domain_is_public_suffix_aware(host: str, domain: str) -> None:
    assert registered_domain(host) == domain


def test_scope() -> None:
    allowed = frozenset({"example.com"})
    assert in_scope("http://a.example.com/x", allowed)
    assert not in_scope("http://example.org/", allowed)
    assert in_scope("http://example.org/", frozenset())
    assert domain_of("http://x.y.example.com:81/") == "example.com"
