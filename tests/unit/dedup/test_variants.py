from crawler.dedup.variants import trap_candidates
from crawler.urls import canonicalize, is_token

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


def test_two_word_like_ids_in_a_row_still_count() -> None:
    # About 1 random base64 id in 70 reads as a word; a link and its page both doing so happened
    # once in a few runs of the trap test (102 pages against a cap of 101).
    other = "R8vhkawSBWDF_amukvdNLA"
    assert not is_token(WORDISH) and not is_token(other)
    link = f"http://e.com/cart?state={WORDISH}"
    assert trap_candidates([(link, f"http://e.com/cart?state={other}")]) == [(link, "http://e.com/cart?state")]
    # ... but words and plain numbers between variants of one path stay free (pagination, articles)
    assert trap_candidates([("http://e.com/r?a=python-tutorial", "http://e.com/r?a=cooking-for-two")]) == []
