"""The peers: the same crawl written as a user of Scrapy (one process) or scrapy-redis (several
processes sharing a Redis scheduler and dupefilter) would write it. Follow every link in scope,
extract title and links, write them as JSON lines; default dupefilter; no delay, no robots.txt.

    python -m bench.scrapy_peer --out DIR --allowed IP[,IP...] (--seeds FILE | --redis URL)

Writes DIR/stats-<pid>.json at exit: its own CPU seconds and peak RSS (getrusage), responses,
and when it saw its last response.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

SETTINGS: dict[str, Any] = {
    "CONCURRENT_REQUESTS": 64,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 16,
    "DOWNLOAD_DELAY": 0,
    "ROBOTSTXT_OBEY": False,
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": False,
    "USER_AGENT": "bench-scrapy",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--allowed", required=True)
    ap.add_argument("--seeds")
    ap.add_argument("--redis", help="scrapy-redis: shared scheduler and dupefilter on this Redis")
    ap.add_argument("--idle-close", type=float, default=3.0)
    args = ap.parse_args()

    from scrapy import Spider, signals
    from scrapy.crawler import CrawlerProcess

    out = Path(args.out)
    feed = out / f"items-{os.getpid()}.jsonl"
    state = {"responses": 0, "last": 0.0}
    settings = {**SETTINGS, "FEEDS": {str(feed): {"format": "jsonlines"}}}
    base: type[Any] = Spider
    if args.redis:
        from scrapy_redis.spiders import RedisSpider

        base = RedisSpider
        settings.update({
            "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
            "SCHEDULER_PERSIST": True,  # the harness flushes; one process ending must not wipe the other's queue
            "REDIS_URL": args.redis,
            "MAX_IDLE_TIME_BEFORE_CLOSE": args.idle_close,
        })

    class BenchSpider(base):  # type: ignore[misc, valid-type]
        name = "bench"
        allowed_domains = args.allowed.split(",")
        redis_key = "bench:start_urls"

        start_urls = Path(args.seeds).read_text().split() if args.seeds else []

        async def start(self) -> Any:
            # Scrapy >= 2.13 starts from start(), scrapy-redis 0.9 only defines start_requests().
            source = self.next_requests() if args.redis else super().start()
            if args.redis:
                for request in source:
                    yield request
            else:
                async for request in source:
                    yield request

        def parse(self, response: Any) -> Any:
            links = response.css("a::attr(href)").getall()
            yield {"url": response.url, "status": response.status, "title": response.css("title::text").get(),
                   "links": links}
            for href in links:
                yield response.follow(href, callback=self.parse)

    def on_response(response: Any, request: Any, spider: Any) -> None:
        state["responses"] += 1
        state["last"] = time.time()

    process = CrawlerProcess(settings)
    crawler = process.create_crawler(BenchSpider)
    crawler.signals.connect(on_response, signal=signals.response_received)
    process.crawl(crawler)
    process.start()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    (out / f"stats-{os.getpid()}.json").write_text(json.dumps({
        "pid": os.getpid(), "cpu": usage.ru_utime + usage.ru_stime, "peak_rss": usage.ru_maxrss * 1024,
        "responses": state["responses"], "last_response": state["last"]}))


if __name__ == "__main__":
    main()
