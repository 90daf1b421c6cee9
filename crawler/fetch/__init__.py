"""HTTP fetching: the async client, reason codes of failures."""

from crawler.fetch.client import FetchConfig, Fetcher, FetchResult, HttpFetcher, fetch_batch

__all__ = ["FetchConfig", "FetchResult", "Fetcher", "HttpFetcher", "fetch_batch"]
