"""Page storage: the PageStore seam, SQLite, WARC files, export."""

from crawler.store.base import (
    JobDefinition,
    JobRecords,
    PageRecord,
    PageRows,
    PageStore,
    SpilledFrontier,
    StoreRefused,
    StoreUnavailable,
    StoreURLError,
    open_store,
)

__all__ = ["JobDefinition", "JobRecords", "PageRecord", "PageRows", "PageStore", "SpilledFrontier", "StoreRefused",
           "StoreURLError", "StoreUnavailable", "open_store"]
