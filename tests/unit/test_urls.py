import base64
import random
import re

import pytest

from crawler.errors import BadURL
from crawler.urls import canonicalize, domain_of, in_scope, is_token, query_variant, registered_domain, token_shape


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


@pytest.mark.parametrize("raw, why", [
    ("http://[v1.a:b c]/", "IPvFuture"),
    ("http://[v1.abc]/", "IPvFuture"),
    ("http://[V7.x]:81/p", None),
    ("http://[fe80::1%25eth0]/", "zone id"),
    ("http://[fe80::1%eth0]/", "zone id"),
    ("http://[1.2.3.4]/", None),
    ("http://[example.com]/", None),
])
def test_ip_literals_other_than_plain_ipv6_are_bad_url(raw: str, why: str | None) -> None:
    with pytest.raises(BadURL, match=why):
        canonicalize(raw)


def test_no_canonical_url_holds_whitespace_or_control_characters() -> None:
    import random

    rng = random.Random(13)
    pieces = [chr(c) for c in range(0xA1)] + ["\u2028", "\u3000", "\ufeff", "é", "[", "]", "%25", "v1."]
    kept = 0
    for _ in range(3000):
        host = rng.choice(["a.com", "[::1]", "[v1.x:" + rng.choice(pieces) + "]", "b" + rng.choice(pieces) + ".org"])
        url = f"http://{host}/" + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        try:
            out = canonicalize(url)
        except BadURL:
            continue
        kept += 1
        assert not re.search(r"[\x00-\x20\x7f-\x9f]|\s", out), (url, out)
    assert kept > 1000


def test_query_variants_share_scheme_host_and_path() -> None:
    assert query_variant("http://e.com/s?sid=2", "http://e.com/s?sid=1")
    assert query_variant("http://e.com/s?sid=2", "http://e.com/s")
    assert query_variant("http://e.com/s?a=1&sort=d", "http://e.com/s?a=1&sort=a")
    assert not query_variant("http://e.com/s?sid=1", "http://e.com/s?sid=1")  # itself
    assert not query_variant("http://e.com/t?sid=1", "http://e.com/s?sid=1")
    assert not query_variant("https://e.com/s?sid=1", "http://e.com/s?sid=2")
    assert not query_variant("http://f.com/s?sid=1", "http://e.com/s?sid=2")
    assert not query_variant("http://e.com/s/?sid=1", "http://e.com/s?sid=2")


def test_session_ids_are_stripped_as_heritrix_and_nutch_strip_them() -> None:
    assert canonicalize("http://e.com/p;jsessionid=0A1B2C3D4E5F?x=1") == "http://e.com/p?x=1"
    assert canonicalize("http://e.com/a;JSESSIONID=0A1B2C/b") == "http://e.com/a/b"
    assert canonicalize("http://e.com/s?PHPSESSID=ab12&page=2") == "http://e.com/s?page=2"
    assert canonicalize("http://e.com/s?ASPSESSIONIDQSTRCBAD=XYZ&a=b") == "http://e.com/s?a=b"
    assert canonicalize("http://e.com/s?CFID=12&CFTOKEN=3456") == "http://e.com/s"
    assert canonicalize("http://e.com/s?zenid=2&osCsid=3") == "http://e.com/s"
    # Names that mean other things too go only when the value has a session id's shape.
    assert canonicalize("http://e.com/s?sid=8f3a9c12e4b07d6a") == "http://e.com/s"
    assert canonicalize("http://e.com/s?sid=281474976710655") == "http://e.com/s"
    assert canonicalize("http://e.com/s?sessionid=Zk3p-9QxL2mN7rT4&p=1") == "http://e.com/s?p=1"
    for kept in ("http://e.com/story?sid=42", "http://e.com/news?sid=technology",
                 "http://e.com/article.php?sid=2024031501", "http://e.com/talks?session_id=42",
                 "http://e.com/schedule?sessionid=7", "http://e.com/a?SessionID=1&page=2"):
        assert canonicalize(kept) == kept, kept
    assert canonicalize("http://e.com/story?sid=06/01/01/123") == "http://e.com/story?sid=06%2F01%2F01%2F123"
    # Not a session parameter, only named like one.
    assert canonicalize("http://e.com/s?aspsessionid_x=1") == "http://e.com/s?aspsessionid_x=1"


def test_a_jobs_own_parameters_are_stripped_too() -> None:
    drop = frozenset({"visit", "ts"})
    assert canonicalize("http://e.com/s?visit=9&q=a&TS=1", drop=drop) == "http://e.com/s?q=a"
    assert canonicalize("http://e.com/s?visit=9&q=a") == "http://e.com/s?q=a&visit=9"  # the cache kept both apart


def test_tokens_are_told_from_words_slugs_and_numbers() -> None:
    for token in ("8f3a9c12e4b07d6a5f3e2c1b0a9d8e7f", "550e8400-e29b-41d4-a716-446655440000",
                  "aGVsbG8gd29ybGQgMTIzNDU2Nzg5", "Zk3p-9QxL2mN7rT4"):
        assert is_token(token), token
    rng = random.Random(5)
    urlsafe = [base64.urlsafe_b64encode(rng.randbytes(16)).rstrip(b"=").decode() for _ in range(2000)]
    # secrets.token_urlsafe(16)'s shape: about 1 in 70 reads as a word (its class changes too
    # rarely); the cap counts such a link through the token of the page it was found on.
    assert sum(map(is_token, urlsafe)) >= 1950
    for word in ("python-3-tutorial", "introduction-to-python-3", "1234567890123456789", "dQw4w9WgXcQ",
                 "everything-about-the-2024-olympics", "a1b2", "IntroductionToPythonProgramming",
                 "MyFavoriteRecipe2024", "2021-02-03-04-05-06", "Cookbook.CustomMarkupAlt",
                 "%D0%9C%D0%BE%D1%81%D0%BA%D0%B2%D0%B0-%D0%A1%D0%B8%D1%82%D0%B8"):
        assert not is_token(word), word
    assert token_shape("http://e.com/s?a=1&t=8f3a9c12e4b07d6a5f3e2c1b0a9d8e7f") == "http://e.com/s?a=1&t=*"
    assert token_shape("http://e.com/item?id=12") is None
    assert token_shape("http://e.com/item") is None


def test_netloc_of_is_urlsplits_netloc() -> None:
    """The quick path agrees with urlsplit on every URL, and falls back to it (errors and all)
    on any it does not recognise as a plain http(s) URL."""
    import random
    import string
    from urllib.parse import urlsplit

    from crawler.urls import netloc_of

    rng = random.Random(5)
    alphabet = string.printable + "é[]\x00\x7f中"
    cases = ["http://a.com/x", "https://A.COM:8080?q#f", "http://a.com", "http://[::1]:80/x", "http://a b/",
             "HTTP://a.com/", "http://u:p@h.com/x", "http://h.com\\x/y", "http://h.com#", "http://\tbad/",
             "http://é.com/", "http://h.com?x=/y", "https://", "http://a]b/", "http://a.com;x/", " http://a.com/",
             "http://[::1/"]
    for _ in range(20_000):
        cases.append(rng.choice(["http://", "https://", "http:/", "ftp://", ""])
                     + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 15)))
                     + rng.choice(["", "/", "?a", "#f", "/p?q#r"]))
    for url in cases:
        try:
            want: str | type[ValueError] = urlsplit(url).netloc
        except ValueError:
            want = ValueError
        try:
            got: str | type[ValueError] = netloc_of(url)
        except ValueError:
            got = ValueError
        assert got == want, url


def test_pagination_is_one_small_number_changing() -> None:
    from crawler.urls import paged_variant

    assert paged_variant("http://e.com/l?page=2", "http://e.com/l?page=1")
    assert paged_variant("http://e.com/l?page=2", "http://e.com/l")
    assert paged_variant("http://e.com/l?cat=a&offset=40", "http://e.com/l?cat=a&offset=20")
    for url, of in (("http://e.com/s?sid=a3f9c2e81b7d", "http://e.com/s?sid=77e0c1d2a9b4"),
                    ("http://e.com/s?visit=194738", "http://e.com/s?visit=881019"),  # six digits: an id
                    ("http://e.com/s?sort=desc", "http://e.com/s?sort=asc"),
                    ("http://e.com/l?page=2&sort=d", "http://e.com/l?page=1&sort=a"),
                    ("http://e.com/cal?y=2031&m=4", "http://e.com/cal?y=2024&m=1"),  # two at once: a calendar
                    ("http://e.com/l?p=\uff12", "http://e.com/l?p=1")):  # a full-width digit is no page number
        assert not paged_variant(url, of), url
