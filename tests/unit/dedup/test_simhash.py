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


def test_the_c_version_is_built_and_gives_the_python_versions_values() -> None:
    from crawler.dedup import simhash as module
    from crawler.dedup.simhash import simhash_py

    assert module._simhash_c is not None, "crawler/dedup/_simhash.c was not built: is a C compiler installed?"
    rng = random.Random(7)
    alphabet = "aZ_09 .,é€\u00a0\n\t-Ünicode\ud800x日本"
    texts = [ARTICLE, "", "a b c", "x" * 10_000, "Hello World", "ab" * 5000 + " cd",
             *("".join(rng.choice(alphabet) for _ in range(rng.randrange(300))) for _ in range(2000))]
    for text in texts:
        assert simhash(text) == simhash_py(text), text
