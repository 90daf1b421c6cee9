"""The items table on both backends: a visit's items replace the page's earlier ones, a
redelivered batch writes none twice, a page the spider did not look at keeps its items."""

from __future__ import annotations

from typing import Any

from crawler.store import PageRecord, open_store


def _rec(url: str, fetch_id: str, items: list[dict[str, Any]] | None) -> PageRecord:
    return PageRecord(url=url, job_id="j", fetch_id=fetch_id, status=200, fetched_at=1.0, items=items)


def _items(store_url: str, job: str | None = "j") -> list[tuple[str, int, dict[str, Any]]]:
    store = open_store(store_url)
    try:
        return [(r["url"], r["seq"], r["item"]) for r in store.items(job)]
    finally:
        store.close()


def test_items_are_replaced_per_visit_and_idempotent(store_url: str) -> None:
    store = open_store(store_url)
    try:
        first = [{"sku": "A", "price": 1.5, "tags": ["x"], "nested": {"k": "ü"}}, {"sku": "B", "price": None}]
        assert len(store.put([_rec("http://h/1", "t1", first), _rec("http://h/2", "t1", [])])) == 2
        assert _items(store_url) == [("http://h/1", 0, first[0]), ("http://h/1", 1, first[1])]
        # The same fetch again (a redelivered store task): nothing written twice.
        assert store.put([_rec("http://h/1", "t1", first)]) == []
        assert len(_items(store_url)) == 2
        # A later visit replaces the page's items; one the spider did not look at keeps them.
        assert len(store.put([_rec("http://h/1", "t2", [{"sku": "C"}])])) == 1
        assert _items(store_url) == [("http://h/1", 0, {"sku": "C"})]
        assert len(store.put([_rec("http://h/1", "t3", None)])) == 1
        assert _items(store_url) == [("http://h/1", 0, {"sku": "C"})]
        assert len(store.put([_rec("http://h/1", "t4", [])])) == 1
        assert _items(store_url) == []
        # Jobs do not see each other's items.
        other = PageRecord(url="http://h/1", job_id="k", fetch_id="t1", items=[{"sku": "K"}])
        store.put([other])
        assert _items(store_url, "k") == [("http://h/1", 0, {"sku": "K"})]
        assert _items(store_url, "j") == []
    finally:
        store.close()
