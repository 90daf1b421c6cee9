"""What a crawl left: ``export`` (pages, main text or items as JSON lines or CSV) and
``settings`` (the table of every setting)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from crawler import control
from crawler.cli.common import LOCAL, Subparsers, command
from crawler.config.settings import settings_table
from crawler.errors import ConfigError
from crawler.store.export import export_by_depth, item_columns, item_rows, write_rows


def cmd_export(args: argparse.Namespace) -> int:
    target = args.source
    url = target if "://" in target else f"sqlite:///{Path(target).resolve() / 'crawl.db'}"
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        raise SystemExit(f"crawler export: no crawl database at {url[len('sqlite:///'):]}")
    if args.content and args.items:
        raise SystemExit("crawler export: give --content or --items, not both")
    if (args.depth is not None or args.by_depth) and (args.content or args.items):
        table = "content" if args.content else "items"
        raise SystemExit(f"crawler export: --depth and --by-depth select pages; the {table} table has no depth")
    if args.by_depth and not args.out:
        raise SystemExit("crawler export: --by-depth needs --out PREFIX (files PREFIX.depth-N.FORMAT)")
    with control.stored(url) as store:
        columns = None
        if args.items:
            rows = item_rows(store.items(args.job))
            if args.format == "csv":  # items differ in fields: a first pass finds them all
                columns = item_columns(item_rows(store.items(args.job)))
        else:
            rows = store.content(args.job) if args.content else store.pages(args.job)
        if args.depth is not None:
            rows = (row for row in rows if row.get("depth") == args.depth)
        if args.by_depth:
            for path in export_by_depth(rows, args.out, args.format):
                print(path, file=sys.stderr)
        elif args.out:
            with open(args.out, "w", encoding="utf-8", newline="") as out:
                write_rows(rows, out, args.format, columns)
        else:
            write_rows(rows, sys.stdout, args.format, columns)
    return 0


def cmd_settings(args: argparse.Namespace) -> int:
    table = settings_table()
    if args.readme:
        path = Path(args.readme)
        text = path.read_text()
        begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
        if begin not in text or end not in text:
            raise ConfigError(f"{path} has no {begin.strip()} ... {end} markers")
        head, rest = text.split(begin, 1)
        path.write_text(head + begin + table + "\n" + end + rest.split(end, 1)[1])
    else:
        print(table)
    return 0


def register(sub: Subparsers) -> None:
    e = command(sub, "export", cmd_export, "print stored pages (or, with --content, their main text; with --items, "
                                           "what the spider extracted)", redis=False)
    e.add_argument("source", help="an output directory or a store URL")
    e.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    e.add_argument("--job", help="only this job's pages")
    e.add_argument("--content", action="store_true",
                   help="the pages' main text (the content table, filled by --extract) instead of the pages")
    e.add_argument("--items", action="store_true",
                   help="the items the job's spider extracted (the items table), each with _url and _job_id")
    e.add_argument("--depth", type=int, metavar="N", help="only pages at depth N (seeds are depth 0)")
    e.add_argument("--by-depth", action="store_true",
                   help="one file per depth: OUT.depth-N.FORMAT (needs --out)")
    e.add_argument("--out", metavar="PATH", help="write to PATH (with --by-depth: the files' prefix) instead of stdout")
    t = command(sub, "settings", cmd_settings, "print the settings table (defaults, env names, meaning)", redis=False,
                operation=LOCAL)
    t.add_argument("--readme", metavar="FILE", help="rewrite the table between the markers in FILE")
