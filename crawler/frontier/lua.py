"""Lua scripts of the frontier. Each runs atomically in Redis, so a URL is admitted once,
leased once, and returned exactly once, whatever number of workers run them at the same time.

The conventions of the scripts and the records they keep (entries, leases, ready sets, the seen
hash, pending link batches, the counters a job ends by) are on the architecture page of the
manual, ``docs/architecture.md#the-frontiers-records-in-redis``.
"""

from __future__ import annotations

from pathlib import Path

from crawler.state import keys

PARKED = 1e12
_SCRIPTS = Path(__file__).resolve().parent / "scripts"


def _load(name: str) -> str:
    """The text of ``scripts/<name>.lua`` (read once, at import)."""
    return (_SCRIPTS / f"{name}.lua").read_text()


# The job's records every script may touch whose names are known up front: (Lua local, name).
_FIXED = [("KMETA", "meta"), ("KCNT", "cnt"), ("KSEEN", "seen"), ("KLEASE", "lease"), ("KLEXP", "lexp"),
          ("KRETRY", "retry"), ("KINF", "inf"), ("KIPINF", "ipinf"), ("KIP", "ip"), ("KNEXT", "next"),
          ("KDELAY", "delay"), ("KHOSTN", "hostn"), ("KPEND", "pend"), ("KPENDB", "pendb"), ("KOVR", "ovr"),
          ("KSPILL", "spill"), ("KSPSEQ", "spseq"), ("KSPREF", "spref")]


def job_keys(job: str) -> list[str]:
    """KEYS[] of every script here: ``_FIXED`` in order, then ``c:jobs``."""
    return [keys.meta(job), keys.counters(job), keys.seen(job), keys.leases(job), keys.lease_expiry(job),
            keys.retries(job), keys.host_inflight(job), keys.ip_inflight(job), keys.host_ip(job),
            keys.host_next(job), keys.host_delays(job), keys.host_admitted(job), keys.pending_links(job),
            keys.pending_link_bodies(job), keys.host_overrides(job), keys.spill_staged(job), keys.spill_seq(job),
            keys.spill_refilled(job), keys.JOBS]


def _bind() -> str:
    lines = [f"local {local} = KEYS[{i}]" for i, (local, _) in enumerate(_FIXED, start=1)]
    lines.append(f"local KJOBS = KEYS[{len(_FIXED) + 1}]")
    return "\n".join(lines) + "\n"


_HELPERS = _load("helpers")


def _prelude() -> str:
    return f"local P = ARGV[1]\nlocal PARKED = {PARKED:.0f}\n" + _bind() + _HELPERS


# Each script's file begins with what its KEYS and ARGV hold and what it returns.
ADMIT = _prelude() + _load("admit")
DISPATCH = _prelude() + _load("dispatch")
CONFIRM = _prelude() + _load("confirm")
RENEW = _prelude() + _load("renew")
FETCHED = _prelude() + _load("fetched")
RELEASE = _prelude() + _load("release")
REAP = _prelude() + _load("reap")
PROMOTE = _prelude() + _load("promote")
PAUSE = _prelude() + _load("pause")
RESUME = _prelude() + _load("resume")
CLAIM_CYCLE = _prelude() + _load("claim_cycle")
RUN_CYCLE = _prelude() + _load("run_cycle")
RETIME = _prelude() + _load("retime")
UNPARK = _prelude() + _load("unpark")
QUEUE_LENGTHS = _load("queue_lengths")
REFILL = _prelude() + _load("refill")
SPILL_LOW = _prelude() + _load("spill_low")
