"""A page's main content (text or markdown) and its metadata, with trafilatura.

The seam: :func:`extract_main_text` turns one HTML body into a :class:`MainText` or a
:class:`NoText` naming why not; :func:`main_text` is the same with ``None`` for "no text".
Neither raises on any input (bytes in any encoding, empty, binary, deeply nested, huge): the
caller counts the reason. (Celery's soft time limit and MemoryError still propagate: they are
about the task, not the page.) Cost is bounded by ``max_bytes``, checked before any decoding.

Choices, and why:

- Balanced mode (neither ``favor_precision`` nor ``favor_recall``): trafilatura's own default
  and the best F1 in its published evaluation; it already retries a short extraction with recall
  settings, so a short article is not lost, while precision mode drops legitimate paragraphs on
  pages with little text. ``favor="precision"`` is there for users building clean corpora.
- Comments excluded: readers' comments are not the page's main content and are where spam lives.
- No deduplication: trafilatura's dedup cache is process-wide, so one job's pages would suppress
  another's on the same worker.
- No extensive date search: it falls back to dateparser over the page text, which multiplies
  the cost per page and guesses dates from body text; dates from markup (meta, JSON-LD, time
  elements, URL) are kept.
- We decode bytes ourselves (BOM, Content-Type charset, ``<meta charset>``, sniffing, as the
  parse stage does) and hand trafilatura text: given bytes, trafilatura would also transparently
  decompress gzip/brotli/zstd bodies, which the fetch stage has already done under its own caps.
- Language is what the page declares (``<html lang>``, ``Content-Language`` meta), not detected:
  detection needs an extra model package and trafilatura reports none without it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from itertools import islice
from typing import Literal

import lxml.html
from lxml import etree
from lxml.html import HtmlElement
from trafilatura import bare_extraction
from trafilatura.core import determine_returnstring
from trafilatura.settings import Document, Extractor, set_date_params
from w3lib.encoding import html_to_unicode

# Every page without an article makes trafilatura log a WARNING/ERROR ("discarding data",
# "empty HTML tree"): on a crawler that is one log line per index page. Our caller counts
# those outcomes instead; trafilatura's own logger is the only one touched.
logging.getLogger("trafilatura").setLevel(logging.CRITICAL)

Format = Literal["text", "markdown"]
Favor = Literal["balanced", "precision", "recall"]
Reason = Literal["too_large", "empty", "not_html", "no_content", "error"]

DEFAULT_MAX_BYTES = 2_000_000
# trafilatura's cost follows the element count (about 60 us per element measured on tag soup,
# 15 ms for a real-looking 110 KB article): 50,000 tags bound a page at about 3 s of CPU.
DEFAULT_MAX_TAGS = 50_000
# Less than this many letters or digits is debris (a stray "x", replacement characters), not text.
DEFAULT_MIN_CHARS = 10
_WORD_RE = re.compile(r"\w")
# Longest stored metadata values: a hostile page can put megabytes into <title>.
_META_LIMIT = 1000
_LANG_LIMIT = 35
# Where to look for the declared language: <html> and <head> open early in any real page.
_LANG_WINDOW = 16_384
_TRAFILATURA_FORMAT: dict[str, str] = {"text": "txt", "markdown": "markdown"}


def _interrupts(exc: BaseException) -> bool:
    """Whether ``exc`` stops the task rather than describes the page. Celery's soft time limit
    is an Exception: swallowed here, the task would run on into the hard limit, which kills the
    worker process; it is known by name, since this layer does not import Celery. MemoryError
    on input this small means the process, not the page, is sick."""
    return isinstance(exc, MemoryError) or any(c.__name__ == "SoftTimeLimitExceeded" for c in type(exc).__mro__)


@dataclass(frozen=True, slots=True)
class MainText:
    """The main content of one page. ``text`` is plain text or markdown as asked, never empty;
    the metadata fields are ``None`` where the page does not say. ``date`` is ``YYYY-MM-DD``;
    ``language`` is the page's declared tag, lower case (``en``, ``pt-br``)."""

    text: str
    format: Format
    title: str | None = None
    author: str | None = None
    date: str | None = None
    language: str | None = None


@dataclass(frozen=True, slots=True)
class NoText:
    """Why a page has no main text: ``too_large`` (over ``max_bytes``), ``empty`` (nothing but
    whitespace), ``not_html`` (not parseable as an HTML document), ``no_content`` (an HTML page
    without a main text, e.g. an index or a form), ``error`` (the extractor failed; ``detail``
    names the exception type)."""

    reason: Reason
    detail: str = ""


def extract_main_text(
    html: bytes | str,
    url: str,
    fmt: Format = "text",
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_tags: int = DEFAULT_MAX_TAGS,
    min_chars: int = DEFAULT_MIN_CHARS,
    content_type: str = "",
    favor: Favor = "balanced",
) -> MainText | NoText:
    """The main text of ``html`` (fetched from ``url``) as ``fmt``, or why there is none.
    ``max_bytes`` (encoded size for bytes, characters for str) and ``max_tags`` (``<`` signs, an
    upper bound on elements) bound the cost; a text with fewer than ``min_chars`` letters or
    digits counts as none. ``content_type`` is the response header, used only for its charset.
    Never raises, except what interrupts the task rather than describes the page (Celery's soft
    time limit, MemoryError)."""
    try:
        size = len(html)
        if size > max_bytes:
            return NoText("too_large", f"{size} > {max_bytes}")
        tags = html.count(b"<") if isinstance(html, bytes) else html.count("<")
        if tags > max_tags:
            return NoText("too_large", f"{tags} tags > {max_tags}")
        text = _decode(html, content_type)
        if not text.strip():
            return NoText("empty")
        return _extract(text, url, fmt, favor, min_chars)
    except Exception as e:  # a broken page must cost its text only, never the worker's task
        if _interrupts(e):
            raise
        return NoText("error", type(e).__name__)


def main_text(
    html: bytes | str,
    url: str,
    fmt: Format = "text",
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_tags: int = DEFAULT_MAX_TAGS,
    min_chars: int = DEFAULT_MIN_CHARS,
    content_type: str = "",
    favor: Favor = "balanced",
) -> MainText | None:
    """:func:`extract_main_text` with ``None`` for every reason there is no text."""
    got = extract_main_text(html, url, fmt, max_bytes=max_bytes, max_tags=max_tags, min_chars=min_chars,
                            content_type=content_type, favor=favor)
    return got if isinstance(got, MainText) else None


def _decode(html: bytes | str, content_type: str) -> str:
    if isinstance(html, bytes):
        _enc, html = html_to_unicode(content_type or None, html)
    # libxml2 stops reading at a NUL
    return html.replace("\x00", "")


def _extract(text: str, url: str, fmt: Format, favor: Favor, min_chars: int) -> MainText | NoText:
    out_format = _TRAFILATURA_FORMAT[fmt]
    options = Extractor(
        output_format=out_format,
        precision=favor == "precision",
        recall=favor == "recall",
        comments=False,
        tables=True,
        images=False,
        links=False,
        dedup=False,
        url=url,
        with_metadata=True,
        date_params=set_date_params(extensive=False),
    )
    doc = bare_extraction(text, options=options)
    if not isinstance(doc, Document):
        # trafilatura says "no" both for non-HTML and for HTML without an article; tell them apart
        # cheaply by whether libxml2 finds any element under <body>
        return NoText("no_content" if _looks_like_html(text) else "not_html")
    # Serialise as extract() does, minus the YAML metadata header with_metadata would prepend:
    # the metadata travels in MainText's own fields.
    body = str(determine_returnstring(doc, Extractor(output_format=out_format, comments=False))).strip()
    if sum(1 for _ in islice(_WORD_RE.finditer(body), min_chars)) < min_chars:
        return NoText("no_content")
    return MainText(
        text=body,
        format=fmt,
        title=_meta(doc.title),
        author=_meta(doc.author),
        date=_meta(doc.date),
        language=_language(text),
    )


def _meta(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = " ".join(value.split())
    return value[:_META_LIMIT] or None


def _head(text: str) -> HtmlElement | None:
    try:
        return lxml.html.document_fromstring(text[:_LANG_WINDOW])
    except (etree.ParserError, ValueError):
        try:
            return lxml.html.document_fromstring(text[:_LANG_WINDOW].encode("utf-8", "replace"))
        except (etree.ParserError, ValueError):
            return None


def _looks_like_html(text: str) -> bool:
    if "<html" in text[:_LANG_WINDOW].lower():
        return True
    root = _head(text)
    body = root.find("body") if root is not None else None
    return body is not None and len(body) > 0


def _language(text: str) -> str | None:
    root = _head(text)
    if root is None:
        return None
    tags = [root.get("lang"), root.get("{http://www.w3.org/XML/1998/namespace}lang")]
    for meta in root.iterfind(".//meta[@http-equiv]"):
        if (meta.get("http-equiv") or "").strip().lower() == "content-language":
            tags.append(meta.get("content"))
    for tag in tags:
        got = _clean_lang(tag)
        if got:
            return got
    return None


def _clean_lang(tag: str | None) -> str | None:
    if not tag:
        return None
    # Content-Language may list several ("de, en"): the first is the page's main language
    tag = tag.split(",", 1)[0].strip().replace("_", "-").lower()[:_LANG_LIMIT]
    head = tag.split("-", 1)[0]
    if not (2 <= len(head) <= 3 and head.isascii() and head.isalpha()):
        return None
    return tag if all(p.isascii() and p.isalnum() for p in tag.split("-")) else head
