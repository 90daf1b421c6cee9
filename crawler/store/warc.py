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
import hashlib
import json
import os
import socket
import uuid
from datetime import UTC, datetime
from io import FileIO
from urllib.parse import urlsplit

from isal import isal_zlib
from warcio.statusandheaders import StatusAndHeaders

from crawler.store.base import PageRecord, StoreUnavailable

_NS = uuid.UUID("6b1f3c1e-7d0a-4c59-9a55-2f3e0c1d4b7a")


# warcio compresses at level 9, which cost 0.47 ms of a 20 KB page's 0.7 ms of WARC writing.
# ISA-L's deflate at its level 2 takes 0.05 ms for the same page and output a little smaller than
# zlib's level 4 (0.31 ms), in the same gzip format every reader takes (its levels 0 and 1 are no
# faster on a page). A small record (a request) costs level 2 ten times what it costs level 0
# (12 against 1.6 us: the setup of its larger hash tables), for a few bytes it would save.
GZIP_LEVEL = 2
SMALL = 2048  # bytes: records up to this size go at SMALL_LEVEL
SMALL_LEVEL = 0
WARC_VERSION = "WARC/1.0"
_HTTP_TYPES = {"response": "application/http; msgtype=response", "request": "application/http; msgtype=request"}


def _digest(h: hashlib._Hash) -> str:
    return "sha1:" + base64.b32encode(h.digest()).decode("ascii")


_NOTHING = _digest(hashlib.sha1(b""))  # the payload digest of a request without a body


def _record(kind: str, target: str, ids: list[tuple[str, str]], http: StatusAndHeaders | None, payload: bytes,
            content_type: str = "") -> bytes:
    """One record as its own gzip member, as WARC readers expect (each record seekable): the
    bytes warcio's ``WARCWriter`` writes for the same record (tests/unit/store/test_warc.py holds
    them side by side), built from warcio's own header serialisation but without its stream
    copies and chunked digests: 0.13 ms for a 20 KB page's two records, against 0.23 through
    warcio's writer."""
    # HTTP headers %-encoded as ASCII where they are not, as warcio writes them.
    head = http.to_ascii_bytes() if http is not None else b""
    payload_digest = hashlib.sha1(payload) if payload else None
    if head:
        block_digest = hashlib.sha1(head)
        block_digest.update(payload)
    else:
        block_digest = payload_digest or hashlib.sha1(b"")
    warc = StatusAndHeaders("", [*ids, ("WARC-Type", kind), ("WARC-Target-URI", target),
                                 ("WARC-Payload-Digest", _digest(payload_digest) if payload_digest else _NOTHING),
                                 ("WARC-Block-Digest", _digest(block_digest)),
                                 ("Content-Type", content_type or _HTTP_TYPES[kind]),
                                 ("Content-Length", str(len(head) + len(payload)))], protocol=WARC_VERSION)
    record = b"".join((warc.to_bytes(encoding="utf-8"), head, payload, b"\r\n\r\n"))
    return isal_zlib.compress(record, SMALL_LEVEL if len(record) <= SMALL else GZIP_LEVEL, isal_zlib.MAX_WBITS + 16)


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
        target = rec.final_url or rec.url
        date = datetime.fromtimestamp(rec.fetched_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        resp_id = f"<urn:uuid:{uuid.uuid5(_NS, f'{rec.job_id} {rec.url} {rec.fetch_id} response')}>"
        req_id = f"<urn:uuid:{uuid.uuid5(_NS, f'{rec.job_id} {rec.url} {rec.fetch_id} request')}>"
        headers = [*response_headers, ("Content-Length", str(len(body)))]
        parts = urlsplit(target)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        method, sent = _method_and_body(rec)
        request = _record("request", target, [("WARC-Record-ID", req_id), ("WARC-Date", date),
                                               ("WARC-Concurrent-To", resp_id)],
                          StatusAndHeaders(f"{method} {path} {http_version}", request_headers, is_http_request=True),
                          sent)
        response = _record("response", target, [("WARC-Record-ID", resp_id), ("WARC-Date", date)],
                           StatusAndHeaders(str(rec.status), headers, protocol=http_version), body)
        members = request + response
        if rendered is not None:
            dom_id = f"<urn:uuid:{uuid.uuid5(_NS, f'{rec.job_id} {rec.url} {rec.fetch_id} rendered')}>"
            members += _record("resource", target, [("WARC-Record-ID", dom_id), ("WARC-Date", date),
                                                    ("WARC-Concurrent-To", resp_id)], None, rendered,
                               content_type="text/html; charset=utf-8")
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
