"""Page storage: the PageStore seam, SQLite, WARC files, export."""

from crawler.store.base import (
    JobDefinition,
    PageRecord,
    PageStore,
    StoreRefused,
    StoreUnavailable,
    StoreURLError,
    open_store,
)

__all__ = ["JobDefinition", "PageRecord", "PageStore", "StoreRefused", "StoreURLError", "StoreUnavailable",
           "open_store"]
