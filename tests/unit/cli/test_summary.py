"""The one-line summary ``crawler crawl`` and ``crawler status`` print: a callback that raised
costs items, not pages, and must not leave the line reading clean."""

from crawler.cli.common import summary


def test_spider_errors_are_in_the_summary_line() -> None:
    c = {"stored": 5, "error:http_4xx": 1, "spider_error": 3, "spider_error:parse": 3, "open": 0}
    assert summary({"counters": c}) == "5 pages stored, 1 errors, 3 spider errors (see logs), 0 queued or in flight"
    clean = {"stored": 5, "open": 2}
    assert summary({"counters": clean}) == "5 pages stored, 0 errors, 2 queued or in flight"


def test_a_crawl_fails_only_when_no_page_it_stored_was_fetched() -> None:
    from crawler.cli.crawling import every_page_failed

    def said(**counters: int) -> str:
        return every_page_failed({"counters": {k.replace("__", ":"): v for k, v in counters.items()}})

    assert said(stored=1, error__connect=1) == \
        "no page was fetched: 1 connect (the error column of the pages table says which)"
    assert said(stored=3, error__dns=2, error__robots=1).startswith("no page was fetched: 2 dns, 1 robots")
    assert said(stored=2, error__connect=1) == ""  # one page was fetched
    assert said(stored=0) == "" and said() == ""
    # The server answered these: a PDF where HTML was wanted, a body past max_body.
    assert said(stored=1, error__not_html=1) == ""
    assert said(stored=2, error__too_large=1, error__http_4xx=1) == ""
    assert said(stored=1, error__http_4xx=1).startswith("no page was fetched: 1 http_4xx")
