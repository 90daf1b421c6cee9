"""The SQLite store's per-task queries search indexes: a scan makes every store task cost more
as the job's table grows (bench-scale found the fetch-id lookup scanning, 20% of a worker's CPU
at 130,000 pages)."""

from __future__ import annotations

from pathlib import Path

from crawler.store.base import PageRecord
from crawler.store.sqlite import SQLiteStore


def test_every_query_a_store_task_runs_uses_an_index(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "c.db"))
    store.put([PageRecord(url=f"http://a/{i}", job_id="j", fetch_id="t0") for i in range(50)])
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    store.put([PageRecord(url=f"http://a/{i}", job_id="j", fetch_id="t1") for i in range(45, 55)])
    store.previous("j", [f"http://a/{i}" for i in range(10)])
    store.spill_put("j", [("a", 1, "0 0 8 http://a/x ")])
    store.spill_take("j", "a", 0, 10)
    store.spill_drop("j", "a", 1)
    store.conn.set_trace_callback(None)
    queries = [q for q in seen if q.lstrip().upper().startswith(("SELECT", "DELETE"))]
    assert len(queries) >= 4
    for q in queries:
        plan = " ".join(str(row[-1]) for row in store.conn.execute("EXPLAIN QUERY PLAN " + q))
        assert "SCAN" not in plan or "SCAN CONSTANT" in plan, (q, plan)
    store.close()
