from crawler.dedup.variants import trap_candidates
from crawler.urls import canonicalize

TOKEN = "8f3a9c12e4b07d6a5f3e2c1b0a9d8e7f"
WORDISH = "aOTOzbviqrz7381Ycgsdyw"  # random base64 that reads as no token: too few class changes


def test_links_from_token_pages_or_variants_of_one_count_under_path_and_names() -> None:
    link = f"http://e.com/cart?state={TOKEN}"
    group = "http://e.com/cart?state"
    assert trap_candidates([(link, f"http://e.com/cart?state={TOKEN[::-1]}")]) == [(link, group)]
    assert trap_candidates([(link, f"http://e.com/cart?state={WORDISH}")]) == [(link, group)]
    # the link's own token reads as a word: the page it was found on is a token variant of it
    wordish = f"http://e.com/cart?state={WORDISH}"
    assert trap_candidates([(wordish, link)]) == [(wordish, group)]
    assert trap_candidates([(link, f"http://e.com/other?s={TOKEN}")])  # another token page of the host
    # a counter beside the token: one group, whatever the counter says
    assert trap_candidates([(f"http://e.com/s?n=2&state={TOKEN}", f"http://e.com/s?n=1&state={WORDISH}")]) == \
        [(f"http://e.com/s?n=2&state={TOKEN}", "http://e.com/s?n&state")]


def test_what_never_counts() -> None:
    link = f"http://e.com/cart?state={TOKEN}"
    assert trap_candidates([(link, "http://e.com/list")]) == []  # a list page: items by opaque id
    assert trap_candidates([(link, f"http://f.com/cart?state={TOKEN}")]) == []  # another host
    assert trap_candidates([("http://e.com/item?id=12", "http://e.com/item?id=11")]) == []  # no token
    assert trap_candidates([(link, "")]) == []  # a seed
    # non-ASCII words percent-encoded are words: tag pages of a Cyrillic site link each other freely
    moscow, spb = canonicalize("http://ru.example/tags?tag=Москва"), canonicalize("http://ru.example/tags?tag=Санкт-Петербург")
    assert trap_candidates([(moscow, spb)]) == []
