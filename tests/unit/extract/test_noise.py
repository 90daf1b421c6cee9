import lxml.html
import pytest
from lxml.html import HtmlElement

from crawler.extract.noise import (
    UrlClusters,
    generalise,
    mark_noise,
    noise_blocks,
    similarity,
    tokens,
)
from crawler.testweb.noisy import noisy_page


def _hrefs(elements: set[HtmlElement]) -> set[str | None]:
    return {a.get("href") for a in elements}


@pytest.mark.parametrize("n", range(5))
def test_nav_footer_tag_cloud_links_are_noise_and_content_links_are_not(n: int) -> None:
    page = noisy_page(n, paragraphs=10 + 7 * n)
    flagged = _hrefs(noise_blocks(lxml.html.document_fromstring(page.html)))
    noise = set(page.noise_links)
    assert len(noise & flagged) / len(noise) == 1.0  # every nav, share bar, tag cloud and footer link
    assert not flagged & set(page.content_links)
    assert page.content_links  # the page has inline links to protect


def test_small_nav_inside_content_is_judged_alone() -> None:
    words = "word " * 60
    html = f"""<html><body><div class="content">
      <p>{words}<a href="/inline1">an inline link</a> {words}</p>
      <nav class="breadcrumbs"><a href="/">Home</a> &gt; <a href="/docs/">Docs</a></nav>
      <p>{words}<a href="/inline2">another one</a> {words}</p>
    </div></body></html>"""
    flagged = _hrefs(noise_blocks(lxml.html.document_fromstring(html)))
    assert flagged == {"/", "/docs/"}


def test_short_paragraph_of_one_link_is_judged_by_its_region() -> None:
    words = "word " * 80
    html = f"<html><body><article><p>{words}</p><p>See <a href='/more'>the full report</a>.</p></article></body></html>"
    assert noise_blocks(lxml.html.document_fromstring(html)) == set()


def test_an_empty_wrapper_defers_to_its_parent() -> None:
    # the logo link has no text: its own div says nothing, the header (mostly links) judges
    html = """<html><body><header><div class="logo"><a href="/"><img src="l.png"></a></div>
      <ul><li><a href="/a">Alpha</a></li><li><a href="/b">Beta</a></li></ul></header>
      <article><p>""" + "text " * 100 + """<a href="/c">in content</a></p></article></body></html>"""
    assert _hrefs(noise_blocks(lxml.html.document_fromstring(html))) == {"/", "/a", "/b"}


def test_script_text_does_not_dilute_a_link_block() -> None:
    links = "<a href='/a'>A</a> <a href='/b'>B</a>"
    html = "<html><body><nav><script>" + "x" * 5000 + "</script>" + links + "</nav></body></html>"
    assert _hrefs(noise_blocks(lxml.html.document_fromstring(html))) == {"/a", "/b"}


def test_name_anchors_are_text_not_links() -> None:
    html = "<html><body><div><a name='s1'>Section one heading</a> <a href='/x'>x</a></div></body></html>"
    assert noise_blocks(lxml.html.document_fromstring(html)) == set()


def test_ratio_is_a_parameter() -> None:
    html = "<html><body><div>" + "t" * 60 + " <a href='/x'>" + "a" * 30 + "</a></div></body></html>"
    root = lxml.html.document_fromstring(html)
    assert _hrefs(noise_blocks(root)) == {"/x"}  # 30/90 > 1/4
    assert noise_blocks(root, ratio=0.5) == set()


def test_link_cap_and_odd_trees() -> None:
    items = "".join(f"<li><a href='/t/{i}'>t{i}</a></li>" for i in range(100))
    html = "<html><body><ul>" + items + "</ul></body></html>"
    root = lxml.html.document_fromstring(html)
    assert len(noise_blocks(root, max_links=10)) == 10
    assert noise_blocks(None) == set()
    deep = lxml.html.document_fromstring("<div>" * 5000 + "<a href='/d'>deep</a>" + "x" * 100)
    noise_blocks(deep)  # no RecursionError however deep libxml2 lets the tree go
    no_href = lxml.html.document_fromstring("<html><body><nav><a name='top'>Top</a></nav></body></html>")
    assert noise_blocks(no_href) == set()


def test_lcs_clustering_groups_tags_and_posts() -> None:
    clusters = UrlClusters()
    tags = [f"http://example.com/tag/{t}" for t in ("python", "rust", "go", "haskell", "c")]
    posts = [f"http://example.com/p/{n}.html" for n in (1, 2, 37, 1234)]
    for url in [u for pair in zip(tags, posts, strict=False) for u in pair] + tags[len(posts):]:
        clusters.observe(url, False)
    tag_cluster = clusters.cluster_of(tags[0])
    post_cluster = clusters.cluster_of(posts[0])
    assert tag_cluster is not None and post_cluster is not None and tag_cluster is not post_cluster
    assert all(clusters.cluster_of(u) is tag_cluster for u in tags)
    assert all(clusters.cluster_of(u) is post_cluster for u in posts)
    assert "".join(tag_cluster.pattern) == "/tag/*"
    assert "".join(post_cluster.pattern) == "/p/*.html"
    assert clusters.cluster_of("http://example.com/about") not in (tag_cluster, post_cluster)


def test_similarity_and_generalise() -> None:
    a, b = tokens("http://x/p/1.html"), tokens("http://x/p/2.html")
    assert a == ["/", "p", "/", "1", ".", "html"]
    pattern = generalise(a, b)
    assert pattern == ["/", "p", "/", "*", ".", "html"]
    assert similarity(pattern, tokens("http://x/p/99.html")) == 1.0
    assert generalise(pattern, tokens("http://x/p/99.html")) == pattern  # a fitting URL changes nothing
    assert similarity(tokens("http://x/about"), tokens("http://x/contact")) < 0.7
    assert tokens("http://x/a?b=1") == ["/", "a", "?", "b", "=", "1"]
    assert tokens("http://[::1") == []  # unparseable: no tokens, no exception
    assert len(tokens("http://x/" + "a/" * 1000, max_tokens=32)) == 32


def test_cluster_cap_leaves_newcomers_unclustered() -> None:
    clusters = UrlClusters(max_clusters=2)
    assert clusters.observe("http://x/alpha", True) is not None
    assert clusters.observe("http://x/beta/gamma/delta", True) is not None
    assert clusters.observe("http://x/0123?x=y&z=w", True) is None
    assert len(clusters.clusters) == 2
    assert not clusters.is_known_noise("http://x/0123?x=y&z=w")


def test_known_noise_needs_most_members_from_noise_blocks() -> None:
    clusters = UrlClusters(min_members=3)
    for t in ("python", "rust"):
        clusters.observe(f"http://x/tag/{t}", True)
    assert not clusters.is_known_noise("http://x/tag/go")  # two members: not yet known
    clusters.observe("http://x/tag/ocaml", True)
    clusters.observe("http://x/tag/ocaml", True)  # a distinct URL counts once
    assert clusters.cluster_of("http://x/tag/go").noise_members == 3
    assert clusters.is_known_noise("http://x/tag/go")
    assert clusters.noise_patterns() == ["/tag/*"]
    # articles seen in link lists and in content alike are not noise
    for n in range(10):
        clusters.observe(f"http://x/p/{n}.html", n % 2 == 0)
    assert not clusters.is_known_noise("http://x/p/77.html")


def test_mark_noise_flags_links_of_noise_clusters_outside_noise_blocks() -> None:
    clusters = UrlClusters()
    links = [(f"http://x/tag/{t}", True) for t in ("a", "b", "c", "d", "e")]
    links += [("http://x/tag/zig", False), ("http://x/p/1.html", False), ("http://x/p/2.html", False)]
    assert mark_noise(links, clusters) == [True] * 6 + [False, False]  # 5 of 6 tags from noise blocks
    # past the cap, only the block decides
    assert mark_noise(links, UrlClusters(), max_links=1) == [True] * 5 + [False] * 3


def test_across_pages_the_filter_keeps_every_content_link() -> None:
    clusters = UrlClusters()
    noise_total = noise_flagged = content_flagged = 0
    for n in range(20):
        page = noisy_page(n, paragraphs=14, related=8)
        root = lxml.html.document_fromstring(page.html)
        in_blocks = noise_blocks(root)
        anchors = [a for a in root.iter("a") if a.get("href")]
        flags = mark_noise([("http://x" + a.get("href", ""), a in in_blocks) for a in anchors], clusters)
        for a, flag in zip(anchors, flags, strict=True):
            parent = a.getparent()
            if parent is not None and parent.tag == "p":  # the inline links of the article
                content_flagged += flag
            else:
                noise_total += 1
                noise_flagged += flag
    assert noise_flagged == noise_total
    assert content_flagged == 0
