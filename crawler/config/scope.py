"""URL patterns a job follows links by: ``allow_urls`` and ``deny_urls`` (regular expressions).

Patterns are user input and Python's ``re`` has no timeout, so their length is bounded and they
are compiled once per pattern set (so once per job) rather than per link.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from crawler.errors import ConfigError, shown

MAX_PATTERN_LENGTH = 1000


@dataclass(frozen=True)
class URLPatterns:
    """Compiled allow and deny patterns. ``follows(url)``: the URL matches (``re.search``) some
    allow pattern, when any is given, and no deny pattern."""

    allow: tuple[re.Pattern[str], ...]
    deny: tuple[re.Pattern[str], ...]

    @property
    def empty(self) -> bool:
        return not self.allow and not self.deny

    def follows(self, url: str) -> bool:
        if self.allow and not any(p.search(url) for p in self.allow):
            return False
        return not any(p.search(url) for p in self.deny)


def _compile(name: str, pattern: str) -> re.Pattern[str]:
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ConfigError(f"setting {name}: pattern longer than {MAX_PATTERN_LENGTH} characters: {shown(pattern)}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"setting {name}: not a regular expression: {shown(pattern)} ({exc})") from None


@lru_cache(maxsize=256)
def _patterns(allow: tuple[str, ...], deny: tuple[str, ...]) -> URLPatterns:
    return URLPatterns(tuple(_compile("allow_urls", p) for p in allow), tuple(_compile("deny_urls", p) for p in deny))


def url_patterns(allow: list[str] | tuple[str, ...], deny: list[str] | tuple[str, ...]) -> URLPatterns:
    """The compiled patterns, cached by their text (a worker compiles a job's once). ConfigError,
    one line naming the setting and the pattern, for a pattern that is too long or not valid."""
    return _patterns(tuple(allow), tuple(deny))
