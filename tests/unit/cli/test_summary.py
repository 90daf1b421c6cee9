"""The one-line summary ``crawler crawl`` and ``crawler status`` print: a callback that raised
costs items, not pages, and must not leave the line reading clean."""

from crawler.cli.common import summary


def test_spider_errors_are_in_the_summary_line() -> None:
    c = {"stored": 5, "error:http_4xx": 1, "spider_error": 3, "spider_error:parse": 3, "open": 0}
    assert summary({"counters": c}) == "5 pages stored, 1 errors, 3 spider errors (see logs), 0 queued or in flight"
    clean = {"stored": 5, "open": 2}
    assert summary({"counters": clean}) == "5 pages stored, 0 errors, 2 queued or in flight"
