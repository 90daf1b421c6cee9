"""Per-host queues, dispatch, politeness and leases in Redis."""

from crawler.frontier.core import (
    Admitted,
    Dispatched,
    Fetched,
    Frontier,
    HostOverride,
    HostStats,
    Lease,
    Reaped,
    new_token,
)
from crawler.frontier.entry import Entry

__all__ = ["Admitted", "Dispatched", "Entry", "Fetched", "Frontier", "HostOverride", "HostStats", "Lease", "Reaped",
           "new_token"]
