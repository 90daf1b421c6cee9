from crawler.parse import is_html, parse_html

PAGE = b"""<!doctype html><html><head>
<title>  A   page
</title>
<base href="/docs/">
<link rel="canonical" href="main.html">
<style>.x { color: red }</style>
</head><body>
<script>var hidden = "not text";</script>
<p>Hello <b>world</b></p> tail
<a href="a.html#frag">relative to base</a>
<a href="/root.html">root</a>
<a href="HTTP://Other.example.com/x">other host</a>
<a href="#only-fragment">same page</a>
<a href="mailto:me@example.com">mail</a>
<a href="javascript:void(0)">js</a>
<a rel="nofollow" href="/secret.html">nofollow</a>
<a rel="external NoFollow" href="/secret2.html">nofollow too</a>
<a href="a.html">duplicate</a>
<map><area href="area.html"></map>
<noscript>enable js</noscript>
</body></html>"""


def test_links_resolve_against_base_without_fragments_or_nofollow() -> None:
    p = parse_html("http://example.com/dir/page.html", PAGE, "text/html; charset=utf-8")
    assert p.base == "http://example.com/docs/"
    assert p.links == [
        "http://example.com/docs/a.html",
        "http://example.com/root.html",
        "http://Other.example.com/x",
        "http://example.com/docs/area.html",
    ]
    assert p.skipped_links == 3  # fragment-only, mailto:, javascript:


def test_title_canonical_and_visible_text() -> None:
    p = parse_html("http://example.com/dir/page.html", PAGE)
    assert p.title == "A page"
    assert p.canonical == "http://example.com/docs/main.html"
    assert "Hello world tail" in p.text
    assert "hidden" not in p.text and "color" not in p.text and "enable js" not in p.text


def test_meta_robots() -> None:
    p = parse_html("http://e.com/", b'<html><head><meta name="Robots" content="NOINDEX, nofollow"></head>'
                                    b'<body><a href="/x">x</a></body></html>')
    assert p.noindex and p.nofollow
    q = parse_html("http://e.com/", b'<meta name="robots" content="none"><a href="/x">x</a>')
    assert q.noindex and q.nofollow
    ok = parse_html("http://e.com/", b'<meta name="robots" content="index, follow"><a href="/x">x</a>')
    assert not ok.noindex and not ok.nofollow and ok.links == ["http://e.com/x"]


def test_empty_and_broken_bodies_do_not_raise() -> None:
    assert parse_html("http://e.com/", b"").links == []
    assert parse_html("http://e.com/", b"   \n").title == ""
    broken = parse_html("http://e.com/", b"<html><title>T</title><body><a href='/a'>a<div><a href=/b>")
    assert broken.title == "T" and broken.links == ["http://e.com/a", "http://e.com/b"]
    deep = parse_html("http://e.com/", b"<div>" * 50_000 + b"<a href=/deep>x</a>")
    assert isinstance(deep.text, str)


def test_charset_from_header_and_meta() -> None:
    body = "<html><head><title>café</title></head></html>".encode("latin-1")
    assert parse_html("http://e.com/", body, "text/html; charset=iso-8859-1").title == "café"
    meta = '<html><head><meta charset="iso-8859-1"><title>café</title></head></html>'.encode("latin-1")
    assert parse_html("http://e.com/", meta, "text/html").title == "café"


def test_soup_is_lazy_and_available_for_hooks() -> None:
    p = parse_html("http://e.com/", b"<p class=x>hi</p>")
    assert "soup" not in p.__dict__
    assert p.soup.find("p", class_="x").text == "hi"


def test_is_html() -> None:
    assert is_html("text/html; charset=utf-8")
    assert is_html("application/xhtml+xml")
    assert not is_html("application/pdf")
    assert not is_html("image/png")


def test_charset_only_in_meta() -> None:
    body = '<html><head><meta http-equiv="Content-Type" content="text/html; charset=windows-1251">' \
           '<title>Привет</title></head></html>'
    assert parse_html("http://e.com/", body.encode("cp1251"), "text/html").title == "Привет"


def test_charset_only_from_bom() -> None:
    body = "<html><head><title>Grüße</title></head></html>"
    assert parse_html("http://e.com/", b"\xef\xbb\xbf" + body.encode("utf-8"), "text/html").title == "Grüße"
    assert parse_html("http://e.com/", body.encode("utf-16"), "text/html").title == "Grüße"


def test_wrong_or_unknown_declared_charset_never_crashes() -> None:
    body = "<html><head><title>naïve</title></head></html>".encode()
    # The header lies (says latin-1 for UTF-8 bytes): we decode as told, without failing.
    assert parse_html("http://e.com/", body, "text/html; charset=iso-8859-1").title == "naÃ¯ve"
    assert parse_html("http://e.com/", body, "text/html; charset=no-such-charset").title == "naïve"
    assert parse_html("http://e.com/", b"\xfa\xfb<title>x", "text/html; charset=utf-8").title == "x"


def test_nul_laced_and_truncated_html() -> None:
    p = parse_html("http://e.com/", b"<html><title>A\x00B</title><body><a href='/x\x00y'>x</a><a href=/z>z",
                   "text/html")
    assert p.title == "AB" and "http://e.com/z" in p.links


def test_xml_declaration_with_encoding() -> None:
    body = '<?xml version="1.0" encoding="iso-8859-1"?><html><head><title>café</title></head></html>'
    assert parse_html("http://e.com/", body.encode("latin-1"), "application/xhtml+xml").title == "café"


def test_hostile_hrefs_are_skipped_not_fatal() -> None:
    hrefs = ["javascript:alert(1)", "mailto:x@y.z", "data:text/html,hi", "ftp://e.com/f", "http://[::1",
             "http://%zz/", "  /spaced path  ", "/" + "a" * 3000, "\t\n/tabbed\n"]
    body = "".join(f'<a href="{h}">x</a>' for h in hrefs).encode()
    p = parse_html("http://e.com/", body, "text/html")
    assert "http://e.com/spaced path" in p.links and "http://e.com/tabbed" in p.links
    assert p.skipped_links == 5  # javascript:, mailto:, data:, ftp:, the broken IPv6 literal


def test_links_past_the_cap_are_counted_not_taken() -> None:
    body = b"<a href=/first>f</a>" + b"".join(b"<a href=/p/%d>x</a>" % i for i in range(50_000))
    p = parse_html("http://e.com/", body, max_links=1000)
    assert len(p.links) == 1000 and p.links[:2] == ["http://e.com/first", "http://e.com/p/0"]
    assert p.dropped_links == 50_001 - 1000
    assert len(parse_html("http://e.com/", body).links) == 50_001  # 0: no cap
    dup = parse_html("http://e.com/", b"<a href=/a>a</a><a href=/a>a</a><a href=/b>b</a>", max_links=2)
    assert dup.links == ["http://e.com/a", "http://e.com/b"] and dup.dropped_links == 0


def test_visible_text_in_c_equals_the_walk_and_leaves_the_tree_as_it_was() -> None:
    from lxml import etree

    from crawler.parse.html import _walk_visible

    pages = [
        PAGE,
        b"<p>a<!-- c -->b<script>var x</script>tail<style>p{}</style> end<template>t</template>&amp; "
        b"more<?pi x?>z<b>bold</b>after</p><div>x<noscript>enable js</noscript>y</div>",
        # Hidden elements with children: the walk itself answers.
        b"<p>a<noscript><img src=x><span>nested</span></noscript>b<template><p>t</p></template>c</p>",
        b"<html><head><title>no body</title><script>s</script></head>text</html>",
    ]
    for body in pages:
        p = parse_html("http://e.com/", body, "text/html")
        assert p.root is not None
        before = etree.tostring(p.root)
        node = p.root.find("body")
        walked = _walk_visible(node if node is not None else p.root)
        assert p.raw_text == " ".join(walked), body
        assert p.text == " ".join(" ".join(walked).split())
        assert etree.tostring(p.root) == before
        assert "var x" not in p.text and "enable js" not in p.text and "nested" not in p.text


def test_plain_joins_are_urljoins() -> None:
    """The quick join answers for the hrefs pages are mostly made of, and wherever it answers it
    is urljoin's answer (fragment aside, which links drop); for every other href it leaves the
    answer to urljoin."""
    import random
    from urllib.parse import urljoin

    from crawler.parse.html import _join_plain

    base = "http://127.0.1.1:8080/s0/p2.html"
    assert _join_plain(base, "/s1/p3.html") == "http://127.0.1.1:8080/s1/p3.html"
    assert _join_plain(base, "p4.html?page=2") == "http://127.0.1.1:8080/s0/p4.html?page=2"
    for odd in ("../p.html", "./p", "a//b", "p?", "/p;x", "mailto:a@b", "?q=1", "a\tb", "//h.com/x"):
        assert _join_plain(base, odd) is None, odd
    rng = random.Random(3)
    bases = ["http://h.com", "http://h.com/", "http://h.com/a/b.html", "https://h.com:8080/a/b/?q=1",
             "http://h.com/a//b/c", "http://h.com/a/./b", "http://u@h.com/x;p/y", "HTTP://h.com/a/",
             "http://h.com/a b/c", "http://h.com/é/ü.html", "http://[::1]/a/b", "http://h.com?x", "http://h.com#f",
             "http://h.com/a/b/..", "http://h.com/a;x"]
    atoms = ["a", "b.html", "/", "//", "./", "../", ".", "..", "?", "#", "q=1", "&", ";", ":", "x:y", "\t", "\n",
             " ", "é", "%2e", "\\", "=", ".hid", "..a", "a..", "?x=\n1", "#fr\tag", "@", "[", "]", "~", "\x00",
             "\x85", "\u3000"]
    answered = 0
    for _ in range(30_000):
        b = rng.choice(bases)
        href = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 6))).strip()
        if not href:
            continue
        got = _join_plain(b, href)
        if got is None:
            continue
        answered += 1
        try:
            want = urljoin(b, href)
        except ValueError:
            want = "(urljoin refuses it)"
        assert got.split("#", 1)[0] == want.split("#", 1)[0], (b, href)
    assert answered > 2_000
