import gzip
import random
import socket
import threading

import pytest

from crawler.extract import maintext
from crawler.extract.maintext import MainText, NoText, extract_main_text, main_text
from crawler.testweb.noisy import FOOTER_TEXT, NAV_TEXT, noisy_page

URL = "http://example.com/report.html"


def test_article_text_without_nav_footer_or_tags() -> None:
    page = noisy_page(3, paragraphs=14)
    got = main_text(page.html, URL, "text")
    assert got is not None
    for paragraph in page.paragraphs:
        assert paragraph in got.text
    assert NAV_TEXT not in got.text
    assert FOOTER_TEXT not in got.text
    for boilerplate in ("Privacy policy", "Related stories", "Tags", "Print"):
        assert boilerplate not in got.text


def test_metadata() -> None:
    page = noisy_page(4, paragraphs=10)
    got = main_text(page.html, URL, "text")
    assert got == MainText(text=got.text, format="text", title=page.title, author="Jane Example",
                           date="2024-03-15", language="en")


def test_unknown_metadata_is_none() -> None:
    body = "<html><body><article>" + "<p>Plain words in a plain page, nothing more to say here.</p>" * 20
    got = main_text(body + "</article></body></html>", URL, "text")
    assert got is not None
    assert (got.title, got.author, got.date, got.language) == (None, None, None, None)


def test_markdown_keeps_headings() -> None:
    page = noisy_page(5, paragraphs=12)
    got = main_text(page.html, URL, "markdown")
    assert got is not None and got.format == "markdown"
    lines = got.text.splitlines()
    assert f"# {page.title}" in lines
    assert "## Part two of report 5" in lines
    assert page.paragraphs[1] in got.text
    assert "---" not in lines[0]  # metadata lives in the fields, not in a YAML header


@pytest.mark.parametrize("encoding", ["utf-8", "cp1252", "utf-16"])
def test_any_declared_or_sniffed_encoding(encoding: str) -> None:
    text = "Café crème à la française, déjà vu. " * 20
    html = f'<html lang="fr"><head><meta charset="{encoding}"><title>Café</title></head><body><article><p>{text}</p>'
    html += f"<p>{text}</p></article></body></html>"
    got = main_text(html.encode(encoding), URL, "text")
    assert got is not None
    assert "Café crème à la française" in got.text
    assert got.language == "fr"


def test_content_type_charset_wins() -> None:
    text = "Grüße aus Köln, schöne Straße. " * 20
    body = f"<html><body><article><p>{text}</p><p>{text}</p></article></body></html>".encode("latin-1")
    got = main_text(body, URL, "text", content_type="text/html; charset=ISO-8859-1")
    assert got is not None and "Grüße aus Köln" in got.text


def _hostile() -> list[bytes | str]:
    rng = random.Random(7)
    article = noisy_page(1).html
    return [
        b"",
        b"   \n\t ",
        "",
        bytes(rng.randrange(256) for _ in range(20_000)),
        b"\x89PNG\r\n\x1a\n" + bytes(rng.randrange(256) for _ in range(5000)),
        b"%PDF-1.7\n" + b"\x00\xff" * 3000,
        gzip.compress(article),  # a body left compressed: not decompressed behind the fetcher's caps
        b"\x00" * 10_000,
        b"<html><body></body></html>",
        b"<div>" * 100_000,
        b"<html><body>" + b"<a href='/x'></a>" * 20_000 + b"</body></html>",
        b"<?xml version='1.0' encoding='utf-8'?><html><body></body></html>",
        "<html>\udcff\ud800</html>",  # lone surrogates
        b"<html><head><meta charset='no-such-charset'></head><body>\xff\xfe</body></html>",
    ]


@pytest.mark.parametrize("body", _hostile(), ids=range(len(_hostile())))
@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_hostile_input_returns_none_without_raising(body: bytes | str, fmt: maintext.Format) -> None:
    got = extract_main_text(body, URL, fmt)
    assert isinstance(got, NoText), got
    assert main_text(body, URL, fmt) is None


def test_no_text_says_why() -> None:
    assert extract_main_text(b"", URL).reason == "empty"
    assert extract_main_text(b"\x89PNG\r\n\x1a\n\x00\x00", URL).reason == "not_html"
    assert extract_main_text(b"<html><body><a href='/x'>x</a></body></html>", URL).reason == "no_content"


def test_tag_limit() -> None:
    # a link farm: trafilatura would spend about half a second on it
    farm = b"<html><body>" + b"<a href='/x'>x</a>" * 20_000 + b"</body></html>"
    assert extract_main_text(farm, URL, max_tags=10_000) == NoText("too_large", "40004 tags > 10000")
    assert main_text(noisy_page(2).html, URL, max_tags=10_000) is not None


def test_debris_is_not_text() -> None:
    debris = b"<html><body><p>x \xef\xbf\xbd</p></body></html>"
    assert main_text(debris, URL) is None
    assert main_text(debris, URL, min_chars=1) is not None


def test_size_limit() -> None:
    body = noisy_page(2, paragraphs=20).html
    refused = NoText("too_large", f"{len(body)} > {len(body) - 1}")
    assert extract_main_text(body, URL, max_bytes=len(body) - 1) == refused
    assert main_text(body, URL, max_bytes=len(body) - 1) is None
    assert main_text(body, URL, max_bytes=len(body)) is not None
    assert main_text(body.decode(), URL, max_bytes=10) is None


def test_an_extractor_failure_is_a_reason_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: object, **_k: object) -> None:
        raise RecursionError("deep")

    monkeypatch.setattr(maintext, "bare_extraction", boom)
    assert extract_main_text(noisy_page(1).html, URL) == NoText("error", "RecursionError")


def test_a_task_interrupt_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    from celery.exceptions import SoftTimeLimitExceeded

    def stop(*_a: object, **_k: object) -> None:
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(maintext, "bare_extraction", stop)
    with pytest.raises(SoftTimeLimitExceeded):
        extract_main_text(noisy_page(1).html, URL)


def test_no_network_and_no_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("network access")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    threads = threading.active_count()
    for n in range(3):
        assert main_text(noisy_page(n).html, URL, "markdown") is not None
    assert threading.active_count() == threads


def test_language_tags_are_cleaned() -> None:
    clean = maintext._clean_lang
    assert clean("en_US") == "en-us"
    assert clean("de, en") == "de"
    assert clean("x") is None
    assert clean("<script>") is None
    assert clean("pt-BR-x!") == "pt"
    assert clean(None) is None
