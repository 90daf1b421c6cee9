"""Lua scripts of the frontier. Each runs atomically in Redis, so a URL is admitted once,
leased once, and returned exactly once, whatever number of workers run them at the same time.

The conventions of the scripts and the records they keep (entries, leases, ready sets, the seen
hash, pending link batches, the counters a job ends by) are on the architecture page of the
manual, ``docs/architecture.md#the-frontiers-records-in-redis``.
"""

from __future__ import annotations

import re
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
          ("KSPILL", "spill"), ("KSPSEQ", "spseq"), ("KSPREF", "spref"), ("KHOSTF", "hostf")]


def job_keys(job: str, cluster: bool = False) -> list[str]:
    """KEYS[] of every script here: ``_FIXED`` in order, then ``c:jobs`` but on a Redis Cluster
    (whose scripts may touch one slot: see ``flush_wakes`` in ``scripts/helpers.lua``)."""
    return [keys.meta(job), keys.counters(job), keys.seen(job), keys.leases(job), keys.lease_expiry(job),
            keys.retries(job), keys.host_inflight(job), keys.ip_inflight(job), keys.host_ip(job),
            keys.host_next(job), keys.host_delays(job), keys.host_admitted(job), keys.pending_links(job),
            keys.pending_link_bodies(job), keys.host_overrides(job), keys.spill_staged(job), keys.spill_seq(job),
            keys.spill_refilled(job), keys.host_fetched(job), *(() if cluster else (keys.JOBS,))]


def _bind() -> str:
    lines = [f"local {local} = KEYS[{i}]" for i, (local, _) in enumerate(_FIXED, start=1)]
    lines.append(f"local KJOBS = KEYS[{len(_FIXED) + 1}]  -- nil on a Redis Cluster")
    return "\n".join(lines) + "\n"


_HELPERS = _load("helpers")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _definitions(text: str) -> list[tuple[set[str], str]]:
    """``text`` cut at its top-level ``local`` definitions, each with the comment lines just
    above it: (the names it defines, its text), in order."""
    lines = text.splitlines(keepends=True)
    starts: list[int] = []
    for i, line in enumerate(lines):
        if line.startswith("local "):
            while i > 0 and lines[i - 1].startswith("--") and (not starts or i - 1 >= starts[-1]):
                i -= 1
            starts.append(i)
    out = []
    for k, start in enumerate(starts):
        body = "".join(lines[start:starts[k + 1] if k + 1 < len(starts) else len(lines)])
        head = next(line for line in body.splitlines() if line.startswith("local "))
        m = re.match(r"local function (\w+)|local ([\w, ]+?)\s*=", head)
        assert m, head
        names = {m.group(1)} if m.group(1) else {n.strip() for n in m.group(2).split(",")}
        out.append((names, body))
    return out


def _code_names(text: str) -> set[str]:
    """The names a piece of Lua mentions outside its comments."""
    return set(_NAME.findall(re.sub(r"--.*", "", text)))


def _helpers_for(body: str) -> str:
    """The helpers ``body`` uses, and those they use, in their order in ``scripts/helpers.lua``:
    each call of a script runs every definition it holds, so one that is never called costs
    every call of it something."""
    blocks = _definitions(_HELPERS)
    need = _code_names(body)
    grew = True
    while grew:
        grew = False
        for names, text in blocks:
            if names & need and not _code_names(text) <= need:
                need |= _code_names(text)
                grew = True
    return "".join(text for names, text in blocks if names & need)


_WRAP = ("\nend\nlocal result = main()\nlocal woken = flush_wakes()\n"
         "if KJOBS then return result end\nif result == nil then result = false end\n"
         "return {result, woken, ENDED}\n")


def _prelude(body: str = "") -> str:
    return f"local P = ARGV[1]\nlocal PARKED = {PARKED:.0f}\n" + _bind() + _helpers_for(body + _WRAP)


def _script(name: str) -> str:
    """A script of the frontier: the prelude (with the helpers it uses), then its file's body run
    as a function, so the wakes its body asked for are pushed once each however it returns
    (``flush_wakes``). On a Redis Cluster it returns ``{result, shards to wake, 1 if the job
    ended}`` (see ``unwrap``); false stands for a nil result, which would end the table there."""
    body = _load(name)
    return _prelude(body) + "local function main()\n" + body + _WRAP


# Each script's file begins with what its KEYS and ARGV hold and what it returns.
ADMIT = _script("admit")
DISPATCH = _script("dispatch")
CONFIRM = _script("confirm")
RENEW = _script("renew")
FETCHED = _script("fetched")
RELEASE = _script("release")
REAP = _script("reap")
PROMOTE = _script("promote")
PAUSE = _script("pause")
RESUME = _script("resume")
CLAIM_CYCLE = _script("claim_cycle")
RUN_CYCLE = _script("run_cycle")
RETIME = _script("retime")
UNPARK = _script("unpark")
QUEUE_LENGTHS = _load("queue_lengths")
REFILL = _script("refill")
SPILL_LOW = _script("spill_low")
