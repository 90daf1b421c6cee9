"""WARC records as written: byte for byte what warcio's own writer makes of the same exchange."""

from __future__ import annotations

import zlib
from io import BytesIO
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawler.store.base import PageRecord
from crawler.store.warc import WarcFiles, _method_and_body


def _members(data: bytes) -> list[bytes]:
    """Each gzip member of ``data``, inflated: a record per member, as readers seek them."""
    out = []
    while data:
        d = zlib.decompressobj(zlib.MAX_WBITS + 16)
        out.append(d.decompress(data))
        assert d.eof, "a member cut short"
        data = d.unused_data
    return out


def _warcio(rec: PageRecord, http_version: str, request_headers: list[tuple[str, str]],
            response_headers: list[tuple[str, str]], body: bytes, ids: tuple[str, str, str],
            rendered: bytes | None) -> list[bytes]:
    """The records as warcio's WARCWriter writes them (the way this module wrote them before)."""
    resp_id, req_id, dom_id = ids
    writer = WARCWriter(BytesIO(), gzip=False)
    target = rec.final_url or rec.url
    date = "2023-11-14T22:13:20Z"
    response = writer.create_warc_record(
        target, "response", payload=BytesIO(body),
        http_headers=StatusAndHeaders(str(rec.status), [*response_headers, ("Content-Length", str(len(body)))],
                                      protocol=http_version),
        warc_headers_dict={"WARC-Record-ID": resp_id, "WARC-Date": date})
    parts = urlsplit(target)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    method, sent = _method_and_body(rec)
    request = writer.create_warc_record(
        target, "request", payload=BytesIO(sent),
        http_headers=StatusAndHeaders(f"{method} {path} {http_version}", request_headers, is_http_request=True),
        warc_headers_dict={"WARC-Record-ID": req_id, "WARC-Date": date, "WARC-Concurrent-To": resp_id})
    records = [request, response]
    if rendered is not None:
        records.append(writer.create_warc_record(
            target, "resource", payload=BytesIO(rendered), warc_content_type="text/html; charset=utf-8",
            warc_headers_dict={"WARC-Record-ID": dom_id, "WARC-Date": date, "WARC-Concurrent-To": resp_id}))
    out = []
    for record in records:
        raw = BytesIO()
        WARCWriter(raw, gzip=False).write_record(record)
        out.append(raw.getvalue())
    return out


CASES = [
    pytest.param(dict(url="http://e.com/a?b=1&c=2", status=200), "HTTP/1.1",
                 [("User-Agent", "crawler"), ("Accept", "*/*")],
                 [("Content-Type", "text/html"), ("Server", "t")], b"<html><p>hi</p></html>" * 500, None,
                 id="a page"),
    pytest.param(dict(url="http://e.com/", final_url="http://e.com/x/", status=404, redirects=[]), "HTTP/1.0",
                 [], [], b"", None, id="empty body, after a redirect"),
    pytest.param(dict(url="http://e.com/f", status=200), "HTTP/1.1", [("User-Agent", "t")],
                 [("Content-Disposition", "attachment; filename=\"résumé.pdf\""), ("X-Note", "naïve")],
                 b"%PDF", None, id="non-ASCII header values"),
    pytest.param(dict(url="http://e.com/form", status=200, request='{"m": "POST", "b": "a=1&b=2"}'), "HTTP/1.1",
                 [("Content-Type", "application/x-www-form-urlencoded")], [("Content-Type", "text/plain")],
                 b"ok", None, id="a POST with a body"),
    pytest.param(dict(url="http://e.com/app", status=200), "HTTP/1.1", [], [("Content-Type", "text/html")],
                 b"<div id=app></div>", "<html><body>réndu</body></html>".encode(), id="with the rendered DOM"),
]


@pytest.mark.parametrize("fields, http_version, request_headers, response_headers, body, rendered", CASES)
def test_records_are_warcios_byte_for_byte(tmp_path: Path, fields: dict, http_version: str,
                                           request_headers: list[tuple[str, str]],
                                           response_headers: list[tuple[str, str]], body: bytes,
                                           rendered: bytes | None) -> None:
    rec = PageRecord(job_id="j", fetch_id="f", fetched_at=1_700_000_000.0, **fields)
    w = WarcFiles(str(tmp_path))
    w.write(rec, http_version=http_version, request_headers=list(request_headers),
            response_headers=list(response_headers), body=body, rendered=rendered)
    w.close()
    (path,) = tmp_path.glob("*.warc.gz")
    ours = _members(path.read_bytes())
    with path.open("rb") as f:
        got = {r.rec_type: r.rec_headers.get_header("WARC-Record-ID") for r in ArchiveIterator(f)}
    ids = (got["response"], got["request"], got.get("resource", ""))
    assert ours == _warcio(rec, http_version, list(request_headers), list(response_headers), body, ids, rendered)


def test_records_read_back_with_their_digests_checked(tmp_path: Path) -> None:
    rec = PageRecord(url="http://e.com/p", job_id="j", fetch_id="f", status=200, fetched_at=1_700_000_000.0)
    w = WarcFiles(str(tmp_path))
    w.write(rec, http_version="HTTP/1.1", request_headers=[("User-Agent", "t")],
            response_headers=[("Content-Type", "text/html")], body=b"<p>x</p>" * 3000)
    w.close()
    (path,) = tmp_path.glob("*.warc.gz")
    with path.open("rb") as f:
        read = [(r.rec_type, r.content_stream().read()) for r in ArchiveIterator(f, check_digests="raise")]
    assert read == [("request", b""), ("response", b"<p>x</p>" * 3000)]
