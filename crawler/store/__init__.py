"""Page storage: the Store seam, SQLite, WARC files, export."""

from crawler.store.base import (
    JobDefinition,
    PageRecord,
    Store,
    StoreRefused,
    StoreUnavailable,
    StoreURLError,
    open_store,
)

__all__ = ["JobDefinition", "PageRecord", "Store", "StoreRefused", "StoreURLError", "StoreUnavailable", "open_store"]
