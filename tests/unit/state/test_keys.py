"""``crawler.state.keys`` is the one place key names live, and the bottom layer."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

from crawler.dedup import neardup
from crawler.frontier import lua
from crawler.state import keys


def test_keys_imports_nothing_from_crawler() -> None:
    tree = ast.parse(Path(keys.__file__).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.split(".")[0] == "crawler"]


def test_every_job_key_carries_the_jobs_hash_tag() -> None:
    p = keys.prefix("j1")
    assert p == "c:{j1}:"
    built = [*lua.job_keys("j1")[:-1], keys.host_queue("j1", "a.com"), keys.ready("j1", 2),
             keys.ip_wait("j1", "h:a.com"), keys.pending_parts("j1", "t"), keys.cycle("j1", 3),
             keys.sitemaps("j1")]
    assert all(k.startswith(p) for k in built)
    assert len(set(built)) == len(built)
    # Parts no frontier script touches: a tag each (the job's, then a role), all found by job_pattern.
    parts = {"nd": [keys.simhash_pages("j1", 7), keys.simhash_seq("j1"), keys.simhash_mark("j1"),
                    keys.simhash_epoch("j1")],
             "nd0": [keys.simhash_band("j1", 0, 7), keys.neardup_band_mark("j1", 0), keys.neardup_band_epoch("j1", 0)],
             "nd3": [keys.simhash_band("j1", 3, 7), keys.neardup_band_mark("j1", 3), keys.neardup_band_epoch("j1", 3)],
             "bf": [keys.bloom_meta("j1"), keys.bloom_segment("j1", 0, 3), keys.bloom_memo("j1", "t")]}
    for role, names in parts.items():
        assert all(k.startswith(f"c:{{j1~{role}}}:") for k in names), names
    bodies = {keys.body("j1", "t", f"http://a.com/{i}") for i in range(200)}
    assert {b.split("}")[0] for b in bodies} == {f"c:{{j1~b{i}" for i in range(keys.BODY_SLOTS)}
    batches = {keys.body_batch("j1", f"t{i}") for i in range(200)}
    assert {b.split("}")[0] for b in batches} == {f"c:{{j1~b{i}" for i in range(keys.BODY_SLOTS)}
    bodies |= batches
    ref = keys.body_ref("j1", "t7.0", "http://a.com/#x")
    assert keys.split_body_ref(ref) == (keys.body_batch("j1", "t7.0"), keys.body_field("http://a.com/#x"))
    assert keys.split_body_ref(keys.body("j1", "t", "http://a.com/#x")) is None  # a key of its own
    odd = "x:bb:y#z"  # job ids are not checked: one may hold what a reference is cut at
    assert keys.split_body_ref(keys.body(odd, "t", "http://a.com/")) is None
    assert keys.split_body_ref(keys.body_ref(odd, "t", "http://a.com/")) == (keys.body_batch(odd, "t"),
                                                                              keys.body_field("http://a.com/"))
    pattern = re.compile(fnmatch.translate(keys.job_pattern("j1")))
    assert all(pattern.match(k) for k in [*built, *(k for names in parts.values() for k in names), *bodies])
    # The index's own pattern finds its every key, under any of its tags, and nothing else.
    index = re.compile(fnmatch.translate(keys.simhash_band_pattern("j1")))
    assert all(index.match(k) for role in ("nd", "nd0", "nd3") for k in parts[role])
    assert not any(index.match(k) for k in [*built, *parts["bf"], *bodies, keys.simhash_seq("j10")])
    assert not pattern.match(keys.meta("j10")) and not pattern.match(keys.bloom_meta("j10"))


def test_names_the_scripts_build_from_the_prefix_agree() -> None:
    # Keys named after data are built inside the scripts from ARGV[1]; spelled here, too.
    p = keys.prefix("j")
    for built, spelled in [(keys.host_queue("j", "h"), "'q:' .. host"),
                           (keys.ready("j", 1), "'ready:' .. shard"),
                           (keys.ip_wait("j", "k"), "'ipwait:' .. ipk"),
                           (keys.pending_parts("j", "t"), "'pendc:' .. token"),
                           (keys.cycle("j", 1), "'cyc:' .. cycle")]:
        assert built.startswith(p + spelled.split("'")[1])
        assert spelled in lua.ADMIT + lua.DISPATCH + lua.CLAIM_CYCLE + lua.REAP
    assert keys.wake(3) == "c:{wake}:3" and "'c:{wake}:' .. shard" in lua.DISPATCH
    nd, nd2 = keys.neardup_prefix("j"), keys.neardup_band_prefix("j", 2)
    steps = neardup.SCRIPTS["neardup"]
    assert keys.simhash_band("j", 2, 5) == nd2 + "sh:2:5" and "PB .. 'sh:' .. b .. ':'" in steps
    assert keys.simhash_pages("j", 5) == nd + "sh:d:5" and "PR .. 'sh:d:'" in steps
    assert keys.neardup_band_mark("j", 2) == nd2 + "sh:f" and keys.simhash_mark("j") == nd + "sh:f"


def test_frontier_scripts_keys_order() -> None:
    names = lua.job_keys("j")
    assert names[0] == keys.meta("j") and names[3] == keys.leases("j") and names[-1] == keys.JOBS
    for i, (local, name) in enumerate(lua._FIXED, start=1):
        assert names[i - 1] == keys.prefix("j") + name
        assert f"local {local} = KEYS[{i}]\n" in lua.DISPATCH
        assert f"local {local} = KEYS[{i}]\n" in lua.ADMIT
    assert f"local KJOBS = KEYS[{len(lua._FIXED) + 1}]  -- nil on a Redis Cluster\n" in lua.DISPATCH
    assert len(names) == len(lua._FIXED) + 1
    # On a cluster every key is the job's: one slot.
    assert lua.job_keys("j", cluster=True) == names[:-1]
    assert all(k.startswith(keys.prefix("j")) for k in names[:-1])
