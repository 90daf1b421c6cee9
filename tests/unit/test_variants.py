from crawler.dedup.variants import trap_candidates

TOKEN = "8f3a9c12e4b07d6a5f3e2c1b0a9d8e7f"
WORDISH = "aOTOzbviqrz7381Ycgsdyw"  # random base64 that reads as no token: too few class changes


def test_only_links_from_token_pages_or_variants_of_themselves_count() -> None:
    link = f"http://e.com/cart?state={TOKEN}"
    assert trap_candidates([(link, f"http://e.com/cart?state={TOKEN[::-1]}")]) == [(link, "http://e.com/cart?state=*")]
    assert trap_candidates([(link, f"http://e.com/cart?state={WORDISH}")]) == [(link, "http://e.com/cart?state=*")]
    assert trap_candidates([(link, f"http://e.com/other?s={TOKEN}")])  # another token page of the host
    assert trap_candidates([(link, "http://e.com/list")]) == []  # a list page: items by opaque id
    assert trap_candidates([(link, f"http://f.com/cart?state={TOKEN}")]) == []  # another host
    assert trap_candidates([("http://e.com/item?id=12", "http://e.com/item?id=11")]) == []  # no token
    assert trap_candidates([(link, "")]) == []  # a seed
