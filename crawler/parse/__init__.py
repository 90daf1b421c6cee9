"""HTML parsing: links, title, robots meta, canonical; visible text and soup on demand."""

from crawler.parse.html import ParsedPage, is_html, parse_html

__all__ = ["ParsedPage", "is_html", "parse_html"]
