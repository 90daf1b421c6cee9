"""Per-host queues, dispatch, politeness and leases in Redis."""

from crawler.frontier.core import Dispatched, Frontier, Lease, new_token
from crawler.frontier.entry import Entry

__all__ = ["Dispatched", "Entry", "Frontier", "Lease", "new_token"]
