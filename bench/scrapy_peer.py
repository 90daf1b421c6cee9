"""The peers: the same crawl written as a user of Scrapy (one process) or scrapy-redis (several
processes sharing a Redis scheduler and dupefilter) would write it. Follow every link in scope,
extract title and links, write them as JSON lines; default dupefilter; no delay, no robots.txt (``--polite``: our
defaults' politeness, see POLITE).

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
# ``--polite``: the politeness of our defaults in Scrapy's terms (bench/polite.py). One request in
# flight per host, robots.txt obeyed, and AutoThrottle as our adaptive delay: no fixed delay, a
# start delay of 0 (ours starts at the configured delay, 0), one request per host as its target
# (a host's delay follows its response time), capped at 60 s as our max_delay is.
POLITE: dict[str, Any] = {
    "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
    "ROBOTSTXT_OBEY": True,
    "DOWNLOAD_DELAY": 0,
    "AUTOTHROTTLE_ENABLED": True,
    "AUTOTHROTTLE_START_DELAY": 0,
    "AUTOTHROTTLE_TARGET_CONCURRENCY": 1.0,
    "AUTOTHROTTLE_MAX_DELAY": 60.0,
    # Scrapy's documented setting for broad crawls (docs: "Broad Crawls"): the scheduler hands the
    # downloader requests for hosts with the fewest in flight. Its default queue feeds requests
    # depth-first, and with one request per host the 64 downloader slots fill with requests
    # for a few hosts that wait their turn there, so a 500-host crawl runs a few hosts at a time.
    "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.DownloaderAwarePriorityQueue",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--allowed", required=True)
    ap.add_argument("--seeds")
    ap.add_argument("--redis", help="scrapy-redis: shared scheduler and dupefilter on this Redis")
    ap.add_argument("--idle-close", type=float, default=3.0)
    ap.add_argument("--polite", action="store_true", help="one request per host, robots.txt, AutoThrottle")
    ap.add_argument("--no-throttle", action="store_true", help="with --polite: no AutoThrottle")
    args = ap.parse_args()

    from scrapy import Spider, signals
    from scrapy.crawler import CrawlerProcess

    out = Path(args.out)
    feed = out / f"items-{os.getpid()}.jsonl"
    state = {"responses": 0, "last": 0.0}
    settings = {**SETTINGS, **(POLITE if args.polite else {}), "FEEDS": {str(feed): {"format": "jsonlines"}}}
    if args.no_throttle:
        settings["AUTOTHROTTLE_ENABLED"] = False
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
