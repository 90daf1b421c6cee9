"""Spiders the tests run in real workers: by file (``tests/spiders/hooks.py:HooksSpider``; this
directory is in the suite's CRAWLER_SPIDER_PATHS, see conftest), or by module name from
``crawler crawl``, which lists the directory it found the module in for its own workers."""
