"""``crawler export``'s output: stored rows as JSON lines or CSV, to one file or one per depth."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable
from typing import Any, TextIO


class _Writer:
    """One output file's rows: JSON lines, or CSV whose header is the first row's columns."""

    def __init__(self, out: TextIO, fmt: str, columns: list[str] | None = None) -> None:
        self.out, self.fmt = out, fmt
        self.columns = columns
        self.csv: Any = None

    def write(self, row: dict[str, Any]) -> None:
        if self.fmt == "jsonl":
            self.out.write(json.dumps(row, ensure_ascii=False) + "\n")
            return
        if self.csv is None:
            self.csv = csv.DictWriter(self.out, fieldnames=self.columns or list(row))
            self.csv.writeheader()
        self.csv.writerow({k: json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v
                           for k, v in row.items()})


def write_rows(rows: Iterable[dict[str, Any]], out: TextIO, fmt: str, columns: list[str] | None = None) -> None:
    """``rows`` as JSON lines or CSV (``columns``: the CSV header, for rows that differ in keys;
    default: the first row's)."""
    writer = _Writer(out, fmt, columns)
    for row in rows:
        writer.write(row)


def export_by_depth(rows: Iterable[dict[str, Any]], prefix: str, fmt: str) -> list[str]:
    """Write each row to ``<prefix>.depth-<N>.<fmt>`` by its depth, in one pass over ``rows``
    (a file per depth is open at once: depths are few). Returns the paths written, by depth."""
    files: dict[int, tuple[TextIO, _Writer]] = {}
    try:
        for row in rows:
            depth = int(row.get("depth") or 0)
            if depth not in files:
                f: TextIO = open(f"{prefix}.depth-{depth}.{fmt}", "w", encoding="utf-8", newline="")  # noqa: SIM115
                files[depth] = (f, _Writer(f, fmt))
            files[depth][1].write(row)
    finally:
        for f, _ in files.values():
            f.close()
    return [f"{prefix}.depth-{d}.{fmt}" for d in sorted(files)]


ITEM_META = ("_url", "_job_id")


def item_rows(rows: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    """Rows of the ``items`` table as the items themselves, flat, with the page's URL and job
    beside them as ``_url`` and ``_job_id`` (an item's own ``url`` field stays its own)."""
    for row in rows:
        yield {"_url": row["url"], "_job_id": row["job_id"], **row["item"]}


def item_columns(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The CSV header for items that may differ in fields: the meta columns, then every field in
    the order first seen."""
    seen: dict[str, None] = dict.fromkeys(ITEM_META)
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def write_feed(items: Iterable[dict[str, Any]], path: str) -> int:
    """The items as a JSON lines feed at ``path`` (written beside, then renamed over, so a reader
    never sees half a feed). Returns how many were written."""
    tmp = f"{path}.tmp"
    n = 0
    with open(tmp, "w", encoding="utf-8") as out:
        writer = _Writer(out, "jsonl")
        for row in item_rows(items):
            writer.write(row)
            n += 1
    os.replace(tmp, path)
    return n
