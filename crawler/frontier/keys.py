"""Redis key names, in one place. A job's keys share the hash tag ``{job}``."""

from __future__ import annotations

import hashlib

JOBS = "c:jobs"  # ids of jobs that may have work to dispatch


def prefix(job: str) -> str:
    return f"c:{{{job}}}:"


def meta(job: str) -> str:
    return prefix(job) + "meta"


def counters(job: str) -> str:
    return prefix(job) + "cnt"


def store_error(job: str) -> str:
    """The job's store error while it lasts (crawler.storeretry)."""
    return prefix(job) + "storeerr"


def seen(job: str) -> str:
    return prefix(job) + "seen"


def host_queue(job: str, host: str) -> str:
    return prefix(job) + "q:" + host


def ready(job: str, shard: int) -> str:
    return prefix(job) + f"ready:{shard}"


def body(job: str, token: str, url: str) -> str:
    # Keyed by URL, not position: one dispatch token is shared by several fetch tasks.
    return prefix(job) + f"b:{token}:{hashlib.blake2b(url.encode(), digest_size=8).hexdigest()}"


def delivery(task_id: str) -> str:
    return f"c:deliv:{task_id}"


def bloom_meta(job: str) -> str:
    return prefix(job) + "bloom"


def bloom_segment(job: str, layer: int | str, segment: int | str) -> str:
    return prefix(job) + f"bf:{layer}:{segment}"


def bloom_memo(job: str, token: str) -> str:
    return prefix(job) + f"bm:{token}"


def wake(shard: int) -> str:
    return f"c:wake:{shard}"


def wake_one(dispatcher: str) -> str:
    """One dispatcher's own wake list (pushed when it is told to stop)."""
    return f"c:wake:d:{dispatcher}"


PERIODIC = "c:periodic"  # ids of periodic jobs, for the beat's cycle check
BEAT_LOCK = "c:beat:lock"  # held by the one beat allowed to send periodic tasks
BEAT_TICKS = "c:beat:ticks"  # cycle checks run, for status and tests


def cycle(job: str, number: int | str) -> str:
    """Start, end and counters of one cycle of a periodic job."""
    return prefix(job) + f"cyc:{number}"
NODES = "c:nodes"  # node name -> its latest heartbeat figures (crawler.nodes)
NODE_FETCHED = "c:nodes:fetched"  # node name -> pages it has fetched
SHARDS_DOWN = "c:shards:down"  # shards whose hosts their backups serve (crawler.liveshards)
