import random

from crawler.dedup.simhash import bands, hamming, simhash

RNG = random.Random(5)
ARTICLE = " ".join(f"word{RNG.randrange(2000)}" for _ in range(600))


def test_a_date_or_an_ad_block_moves_few_bits_a_different_text_many() -> None:
    base = simhash(ARTICLE)
    dated = simhash(ARTICLE.replace("word1", "Monday 24 November 2026", 1))
    ad = simhash(ARTICLE + " Buy shoes now best deals limited offer click here today")
    other = simhash(" ".join(f"other{RNG.randrange(2000)}" for _ in range(600)))
    assert hamming(base, dated) <= 3 and hamming(base, ad) <= 3
    assert hamming(base, other) > 16


def test_empty_text_and_case() -> None:
    assert simhash("") == 0 == simhash("  ... !!! ")
    assert simhash("Hello World") == simhash("hello world")


def test_bands_pigeonhole() -> None:
    for _ in range(500):
        a = RNG.getrandbits(64)
        b = a
        for bit in RNG.sample(range(64), 3):
            b ^= 1 << bit
        assert any(x == y for x, y in zip(bands(a, 4), bands(b, 4), strict=True))
