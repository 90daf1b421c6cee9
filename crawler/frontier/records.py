"""The frontier's records that pack several fields into one Redis string, each with one encoder
and one decoder. The Lua scripts in ``crawler.frontier.lua`` read and write the same forms
(``parse_lease``, the retry and address-wait patterns); the formats must not change without them.

Fields are separated by single spaces; the last field (an entry) may hold spaces itself, so it is
always cut off by count, never split.
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.state.conn import text

FETCHING, FETCHED = "f", "d"  # a lease's stage: request under way / page held for parse and store
IN_RUN = "r"  # a run's URL before its last, fetched under the slot the last one's lease holds



@dataclass(frozen=True)
class Lease:
    """``leases[url]``: who holds the URL, at which stage, where its host is placed, and the entry
    (as encoded by ``crawler.frontier.entry``) to return to the queue if it expires."""

    token: str
    stage: str  # FETCHING, IN_RUN or FETCHED
    shard: int
    host: str
    ipkey: str  # the host's address once known, else "h:<host>" (``ip_key`` in lua)
    entry: str

    def encode(self) -> str:
        return f"{self.token} {self.stage} {self.shard} {self.host} {self.ipkey} {self.entry}"

    @classmethod
    def decode(cls, raw: str | bytes) -> Lease:
        token, stage, shard, host, ipkey, entry = text(raw).split(" ", 5)
        return cls(token, stage, int(shard), host, ipkey, entry)


@dataclass(frozen=True)
class Retry:
    """A member of ``retries``: an entry waiting out a backoff, and where its host is placed."""

    shard: int
    host: str
    entry: str

    def encode(self) -> str:
        return f"{self.shard} {self.host} {self.entry}"

    @classmethod
    def decode(cls, raw: str | bytes) -> Retry:
        shard, host, entry = text(raw).split(" ", 2)
        return cls(int(shard), host, entry)


@dataclass(frozen=True)
class IpWait:
    """A member of ``ip_wait(ipkey)``: a host parked until its address has a free slot."""

    shard: int
    host: str

    def encode(self) -> str:
        return f"{self.shard} {self.host}"

    @classmethod
    def decode(cls, raw: str | bytes) -> IpWait:
        shard, host = text(raw).split(" ", 1)
        return cls(int(shard), host)
