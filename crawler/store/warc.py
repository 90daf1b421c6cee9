"""Gzipped WARC files of request and response records, one file per worker process, rotated
by size. Record ids derive from (job, url, fetch id), so a record written twice after a crash
is recognisable as the same record."""

from __future__ import annotations

import os
import socket
import uuid
from datetime import UTC, datetime
from io import BytesIO
from typing import IO
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawler.store.base import PageRecord

_NS = uuid.UUID("6b1f3c1e-7d0a-4c59-9a55-2f3e0c1d4b7a")


class WarcFiles:
    def __init__(self, directory: str, max_size: int = 1_000_000_000) -> None:
        self.directory = directory
        self.max_size = max_size
        self._fh: IO[bytes] | None = None
        self._writer: WARCWriter | None = None
        self._seq = 0
        self._pid = os.getpid()
        os.makedirs(directory, exist_ok=True)

    def _open(self) -> WARCWriter:
        if self._writer is None or self._pid != os.getpid():
            self._pid = os.getpid()
            while True:
                self._seq += 1
                name = f"crawl-{socket.gethostname()}-{self._pid}-{self._seq:05d}.warc.gz"
                path = os.path.join(self.directory, name)
                if not os.path.exists(path):
                    break
            self._fh = open(path, "ab")  # noqa: SIM115 (kept open across batches, closed on rotation)
            self._writer = WARCWriter(self._fh, gzip=True)
        return self._writer

    def write(self, rec: PageRecord, *, http_version: str, request_headers: list[tuple[str, str]],
              response_headers: list[tuple[str, str]], body: bytes) -> None:
        if rec.status is None:
            return  # nothing came back: there is no exchange to archive
        writer = self._open()
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
        request = writer.create_warc_record(
            target, "request", payload=BytesIO(b""),
            http_headers=StatusAndHeaders(f"GET {path} {http_version}", request_headers, is_http_request=True),
            warc_headers_dict={"WARC-Record-ID": req_id, "WARC-Date": date, "WARC-Concurrent-To": resp_id},
        )
        writer.write_record(request)
        writer.write_record(response)

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()
            if self._fh.tell() >= self.max_size:
                self.close()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh = None
        self._writer = None
