"""Page storage: the Store seam, SQLite, WARC files, export."""

from crawler.store.base import PageRecord, Store, StoreURLError, open_store

__all__ = ["PageRecord", "Store", "StoreURLError", "open_store"]
