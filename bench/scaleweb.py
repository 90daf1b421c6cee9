"""A synthetic web for ``make bench-scale``, generated on request instead of written to disk:
by default 200 hosts on 127.0.2.1, 127.0.2.2, ... (IP literals, loopback only), six of them with
20,000 pages each and the rest with about 400, 200,000 pages in all.

Pages are shaped as documentation sites' are: 30-150 KB, 100-300 links each, most of them in-page
fragments (``#s12``) and navigation repeated on every page of the host, then the page's children
(every host's pages form a tree under ``/p0``, so all of them are reachable) and two links to
other hosts' home pages. Bodies are paragraphs drawn from a pool held once, so the server spends
little CPU per page; a page's size, links and paragraphs follow from (host, page) alone. The
words come from a vocabulary of 50,000, drawn by Zipf's law as a language's are, so pages share
their common words but differ as documentation pages do: as many distinct words as a real page,
and hardly any near-duplicates (the near-duplicate index and its Redis memory are exercised as on
a real site; with one text sliced at random offsets, 70% of pages nearly duplicated another).

    python -m bench.scaleweb PORT LOG HOSTS BIG_HOSTS BIG_PAGES PAGES   # serve, until SIGTERM
"""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from functools import cached_property

NAV = 12  # navigation links repeated on every page of a host
CHILDREN = 4  # tree fan-out: page i links to pages 4i+1 .. 4i+4
CROSS = 2  # links to other hosts' home pages
_SYLLABLE_TEXT = ("do cu men ta tion re fe ren ce gui de in stal con fi gu mo du le func pa ra me ter val ex am "
              "ple tu to ri al lea se no te ver si on up gra op set ting ser cli ent qu est spon er ror han "
              "dl sec chap ble dex sea rch api cla ss me tho")
_SYLLABLES = _SYLLABLE_TEXT.split()
VOCABULARY = 50_000
TEXT_BYTES = 4_000_000


@dataclass(frozen=True)
class ScaleSpec:
    hosts: int = 200
    big_hosts: int = 6
    big_pages: int = 20_000
    pages: int = 200_000  # in all
    port: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.hosts <= 250 or not 0 <= self.big_hosts <= self.hosts:
            raise ValueError("1-250 hosts (127.0.2.1-250), at most that many big ones")

    @cached_property
    def ips(self) -> list[str]:
        return [f"127.0.2.{i + 1}" for i in range(self.hosts)]

    @cached_property
    def sizes(self) -> list[int]:
        """Pages per host: the big hosts first, the rest sharing what is left."""
        small = self.hosts - self.big_hosts
        rest = max(0, self.pages - self.big_hosts * self.big_pages)
        each = rest // small if small else 0
        out = [self.big_pages] * self.big_hosts + [each] * small
        for k in range(rest - each * small if small else 0):
            out[self.big_hosts + k] += 1
        return [max(1, n) for n in out]

    @property
    def total(self) -> int:
        return sum(self.sizes)

    def seed(self) -> str:
        return f"http://{self.ips[0]}:{self.port}/p0"


def _rng(host: int, page: int) -> random.Random:
    return random.Random(host * 1_000_003 + page)


def links(spec: ScaleSpec, host: int, page: int) -> tuple[list[str], int]:
    """The page's links other than fragments (paths on its own host, then absolute URLs of other
    hosts), and how many fragment links it has."""
    rng = _rng(host, page)
    n = spec.sizes[host]
    own = [f"/p{k}" for k in range(min(NAV, n))]
    own += [f"/p{c}" for c in range(CHILDREN * page + 1, min(n, CHILDREN * page + CHILDREN + 1))]
    other = [f"http://{spec.ips[h]}:{spec.port}/p0" for h in (rng.randrange(spec.hosts) for _ in range(CROSS))]
    if host + 1 < spec.hosts and page == 0:
        other.append(f"http://{spec.ips[host + 1]}:{spec.port}/p0")  # a chain, so every host is reachable
    total = rng.randint(100, 300)
    return own + other, max(0, total - len(own) - len(other))


class Pages:
    """Page bodies, built per request from (host, page)."""

    def __init__(self, spec: ScaleSpec) -> None:
        self.spec = spec
        rng = random.Random(7)
        vocabulary: set[str] = set()
        while len(vocabulary) < VOCABULARY:
            vocabulary.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
        words = sorted(vocabulary)
        rng.shuffle(words)
        zipf = list(itertools.accumulate(1.0 / rank for rank in range(1, len(words) + 1)))
        paras = []
        size = 0
        while size < TEXT_BYTES:
            p = "<p>" + " ".join(rng.choices(words, cum_weights=zipf, k=rng.randint(40, 120))) + ".</p>\n"
            paras.append(p)
            size += len(p)
        self.paragraphs = paras

    def body(self, host: int, page: int) -> bytes:
        rng = _rng(host, page)
        size = rng.randint(30_000, 150_000)
        own, fragments = links(self.spec, host, page)
        nav = "".join(f'<li><a href="{u}">{u.rsplit("/", 1)[-1]}</a></li>' for u in own)
        frags = "".join(f'<a href="#s{k}">section {k}</a> ' for k in range(fragments))
        head = (f"<!DOCTYPE html><html><head><title>host {host} page {page}</title></head><body>"
                f"<nav><ul>{nav}</ul></nav><div class=toc>{frags}</div><main>")
        want = max(0, size - len(head) - 30)
        chosen: list[str] = []
        got = 0
        while got < want:
            p = self.paragraphs[rng.randrange(len(self.paragraphs))]
            chosen.append(p)
            got += len(p)
        filler = "".join(chosen)[:want]
        return (head + filler + "</main></body></html>").encode()


def reachable(spec: ScaleSpec) -> set[tuple[int, int]]:
    """(host, page) of every page reachable from the seed by following links, without fetching."""
    ip_host = {ip: i for i, ip in enumerate(spec.ips)}
    seen = {(0, 0)}
    todo = deque(seen)
    while todo:
        host, page = todo.popleft()
        own, _ = links(spec, host, page)
        for u in own:
            if u.startswith("/p"):
                nxt = (host, int(u[2:]))
            else:
                ip = u.split("//", 1)[1].split(":", 1)[0]
                nxt = (ip_host[ip], int(u.rsplit("/p", 1)[1]))
            if nxt not in seen and nxt[1] < spec.sizes[nxt[0]]:
                seen.add(nxt)
                todo.append(nxt)
    return seen


class _Http(asyncio.Protocol):
    def __init__(self, pages: Pages, ip_host: dict[str, int], log: list[tuple[float, int, str, str]]) -> None:
        self.pages, self.ip_host, self.log = pages, ip_host, log
        self.buf = b""
        self.host = 0
        self.ip = ""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.ip = transport.get_extra_info("sockname")[0]
        self.host = self.ip_host[self.ip]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            head, self.buf = self.buf[:end], self.buf[end + 4:]
            parts = head.split(b"\r\n", 1)[0].split(b" ")
            target = parts[1].decode("latin-1") if len(parts) > 2 else "/"
            path = target.split("?", 1)[0].split("#", 1)[0]
            body: bytes | None = None
            if path.startswith("/p") and path[2:].isdigit() and int(path[2:]) < self.pages.spec.sizes[self.host]:
                body = self.pages.body(self.host, int(path[2:]))
            status = 200 if body is not None else 404
            body = body if body is not None else b"<html><body>not found</body></html>"
            self.log.append((time.time(), status, self.ip, target))
            assert self.transport is not None
            self.transport.write(f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\nServer: bench\r\n"
                                 f"Content-Type: text/html; charset=utf-8\r\nContent-Length: {len(body)}\r\n\r\n"
                                 .encode() + body)


def serve(spec: ScaleSpec, log_path: str) -> None:
    pages = Pages(spec)
    log: list[tuple[float, int, str, str]] = []
    ip_host = {ip: i for i, ip in enumerate(spec.ips)}
    loop = asyncio.new_event_loop()
    servers = [loop.run_until_complete(loop.create_server(lambda: _Http(pages, ip_host, log), ip, spec.port,
                                                          backlog=1024, reuse_address=True)) for ip in spec.ips]
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    loop.run_forever()
    for s in servers:
        s.close()
    with open(log_path, "w") as out:
        out.writelines(f"{at:.3f} {status} {ip} {target}\n" for at, status, ip, target in log)


if __name__ == "__main__":
    port, log_path, hosts, big_hosts, big_pages, total = sys.argv[1:7]
    serve(ScaleSpec(int(hosts), int(big_hosts), int(big_pages), int(total), int(port)), log_path)
