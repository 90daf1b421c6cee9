"""``crawler export``'s output: stored rows as JSON lines or CSV, to one file or one per depth."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from typing import Any, TextIO


class _Writer:
    """One output file's rows: JSON lines, or CSV whose header is the first row's columns."""

    def __init__(self, out: TextIO, fmt: str) -> None:
        self.out, self.fmt = out, fmt
        self.csv: Any = None

    def write(self, row: dict[str, Any]) -> None:
        if self.fmt == "jsonl":
            self.out.write(json.dumps(row, ensure_ascii=False) + "\n")
            return
        if self.csv is None:
            self.csv = csv.DictWriter(self.out, fieldnames=list(row))
            self.csv.writeheader()
        self.csv.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()})


def write_rows(rows: Iterable[dict[str, Any]], out: TextIO, fmt: str) -> None:
    writer = _Writer(out, fmt)
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
