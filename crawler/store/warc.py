"""Gzipped WARC files of request and response records, one file per worker process, rotated
by size. Record ids derive from (job, url, fetch id), so a record written twice after a crash
is recognisable as the same record.

Each exchange (request and response record) is built in memory and written with unbuffered
writes, so the file holds only whole records: a write that fails (disk full, I/O error) is cut
back to where the exchange began, the file is closed and ``StoreUnavailable`` raised. The next
write starts a new file, and the row transaction around the write rolls back to be tried again.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from datetime import UTC, datetime
from io import BytesIO, FileIO
from typing import Any
from urllib.parse import urlsplit

from isal import isal_zlib
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawler.store.base import PageRecord, StoreUnavailable

_NS = uuid.UUID("6b1f3c1e-7d0a-4c59-9a55-2f3e0c1d4b7a")


# warcio compresses at level 9, which cost 0.47 ms of a 20 KB page's 0.7 ms of WARC writing.
# ISA-L's deflate at its level 2 takes 0.05 ms for the same page and output a little smaller than
# zlib's level 4 (0.31 ms), in the same gzip format every reader takes.
GZIP_LEVEL = 2


def _member(record: Any) -> bytes:
    """One record as its own gzip member, as WARC readers expect (each record seekable)."""
    raw = BytesIO()
    WARCWriter(raw, gzip=False).write_record(record)
    z = isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, isal_zlib.MAX_WBITS + 16)
    return z.compress(raw.getbuffer()) + z.flush()


class WarcFiles:
    def __init__(self, directory: str, max_size: int = 1_000_000_000) -> None:
        self.directory = directory
        self.max_size = max_size
        self._fh: FileIO | None = None
        self._size = 0
        self.path = ""
        self._seq = 0
        self._pid = os.getpid()
        os.makedirs(directory, exist_ok=True)

    def _open(self) -> FileIO:
        if self._fh is None or self._pid != os.getpid():
            self._pid = os.getpid()
            while True:
                self._seq += 1
                name = f"crawl-{socket.gethostname()}-{self._pid}-{self._seq:05d}.warc.gz"
                path = os.path.join(self.directory, name)
                if not os.path.exists(path):
                    break
            try:
                self._fh = FileIO(path, "ab")  # kept open across batches, closed on rotation
            except OSError as exc:
                raise StoreUnavailable(f"warc: cannot open {path}: {exc}") from exc
            self.path = path
            self._size = os.fstat(self._fh.fileno()).st_size
        return self._fh

    def write(self, rec: PageRecord, *, http_version: str, request_headers: list[tuple[str, str]],
              response_headers: list[tuple[str, str]], body: bytes, rendered: bytes | None = None) -> None:
        """The exchange as a request and a response record; with ``rendered`` (the DOM a browser
        built from the response), a resource record of it too, tied to the response."""
        if rec.status is None:
            return  # nothing came back: there is no exchange to archive
        writer = WARCWriter(BytesIO(), gzip=False)
        target = rec.final_url or rec.url
        date = datetime.fromtimestamp(rec.fetched_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        resp_id = f"<urn:uuid:{uuid.uuid5(_NS, f'{rec.job_id} {rec.url} {rec.fetch_id} response')}>"
        req_id = f"<urn:uuid:{uuid.uuid5(_NS, f'{rec.job_id} {rec.url} {rec.fetch_id} request')}>"
        headers = [*response_headers, ("Content-Length", str(len(body)))]
        response = writer.create_warc_record(
            target, "response", payload=BytesIO(body),
            http_headers=StatusAndHeaders(str(rec.status), headers, protocol=http_version),
            warc_headers_dict={"WARC-Record-ID": resp_id, "WARC-Date": date},
        )
        parts = urlsplit(target)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        method, sent = _method_and_body(rec)
        request = writer.create_warc_record(
            target, "request", payload=BytesIO(sent),
            http_headers=StatusAndHeaders(f"{method} {path} {http_version}", request_headers, is_http_request=True),
            warc_headers_dict={"WARC-Record-ID": req_id, "WARC-Date": date, "WARC-Concurrent-To": resp_id},
        )
        members = _member(request) + _member(response)
        if rendered is not None:
            dom_id = f"<urn:uuid:{uuid.uuid5(_NS, f'{rec.job_id} {rec.url} {rec.fetch_id} rendered')}>"
            resource = writer.create_warc_record(
                target, "resource", payload=BytesIO(rendered), warc_content_type="text/html; charset=utf-8",
                warc_headers_dict={"WARC-Record-ID": dom_id, "WARC-Date": date, "WARC-Concurrent-To": resp_id},
            )
            members += _member(resource)
        self._append(memoryview(members))

    def _append(self, data: memoryview) -> None:
        fh = self._open()
        start = self._size
        try:
            while data:
                # An unbuffered write may take part of the data and fail on the rest.
                n = fh.write(data) or 0
                data = data[n:]
                self._size += n
        except OSError as exc:
            path = self.path
            try:
                os.ftruncate(fh.fileno(), start)
            except OSError:
                pass  # the exchange stays torn, but nothing more is appended after it
            self.close()
            raise StoreUnavailable(f"warc: writing {path} failed, file closed, next write starts a new one: "
                                   f"{exc}") from exc

    def mark(self) -> tuple[str, int]:
        """Where the next record will go, for ``rollback``."""
        self._open()
        return self.path, self._size

    def rollback(self, mark: tuple[str, int]) -> None:
        """Cut ``mark``'s file back to where it was: the rows these records went with did not
        commit, and the retry writes the records again."""
        path, size = mark
        try:
            os.truncate(path, size)
        except OSError:
            return  # the file went (or will not shrink): at worst a record stands twice
        if path == self.path:
            self._size = size

    def flush(self) -> None:
        """Start a new file once this one has reached ``max_size`` (writes are not buffered)."""
        if self._fh is not None and self._size >= self.max_size:
            self.close()

    def close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass  # nothing is buffered: a failing close loses nothing written
        self._fh = None


def _method_and_body(rec: PageRecord) -> tuple[str, bytes]:
    """The method and body of the request a spider asked for (its spec: ``rec.request``), as the
    last hop sent them: a redirect turns a POST into a GET (see ``crawler.fetch.client``)."""
    if not rec.request or '"m":' not in rec.request or rec.redirects:
        return "GET", b""
    try:
        spec = json.loads(rec.request)
        body = spec["b"].encode() if "b" in spec else base64.b64decode(spec.get("b64", ""))
        return str(spec.get("m", "GET")), body
    except (ValueError, TypeError, KeyError):
        return "GET", b""
