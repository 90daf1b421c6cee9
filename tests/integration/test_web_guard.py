"""What the console's ``Guard`` and body reader refuse, over real HTTP and a real Redis: a
``Host`` it does not serve (DNS rebinding) on every route, bodies over the cap without holding
them, the security headers on every kind of response, and ``/metrics`` that Prometheus's parser
reads with every family typed."""

from __future__ import annotations

import itertools
import logging
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import redis
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from crawler import control, jobs
from crawler.config.settings import Settings
from crawler.state import nodes
from crawler.web import create_app
from crawler.web.api import ENDPOINTS
from crawler.web.app import MAX_BODY, STATIC, Guard
from crawler.web.auth import Auth

JSON = {"Content-Type": "application/json"}
SECURITY = {"content-security-policy", "x-frame-options", "x-content-type-options", "referrer-policy"}
EVIL = "evil.example"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served(r: redis.Redis) -> Iterator[tuple[Guard, str]]:
    """The app on uvicorn on a free loopback port, in a thread, as ``crawler web`` binds it."""
    app = create_app(r, listen="127.0.0.1", event_interval=0.1)
    assert isinstance(app, Guard)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    yield app, f"127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def _requests(app: Guard, job: str, store: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """One request per method of every route the app has (the API's table, the event stream,
    /metrics, /openapi.json, the page and each static file), path parameters filled in."""
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("POST", "/api/jobs"): {"seeds": ["http://127.0.1.1/"], "settings": {"store": store}},
        ("POST", "/api/jobs/{job}/recover"): {"store": store},
        ("PATCH", "/api/jobs/{job}/settings"): {"delay": "2"},
        ("PUT", "/api/jobs/{job}/hosts/{host}"): {"delay": "3"},
    }
    out: list[tuple[str, str, dict[str, Any] | None]] = []
    for route in app.app.routes:  # type: ignore[attr-defined]
        if isinstance(route, Mount):
            out += [("GET", f"{route.path}/{f.name}", None) for f in sorted(STATIC.iterdir())]
            continue
        assert isinstance(route, Route)
        for method in sorted((route.methods or set()) - {"HEAD"}):
            path = route.path.replace("{job}", job).replace("{host}", "127.0.1.1")
            if path.endswith("/events"):
                path += "?max=1"
            out.append((method, path, bodies.get((method, route.path), {} if method != "GET" else None)))
    covered = {(m, p) for m, p, _ in out}
    for e in ENDPOINTS:
        assert (e.method, e.path.replace("{job}", job).replace("{host}", "127.0.1.1")) in covered, e.path
    return out


def _state(r: redis.Redis) -> dict[bytes, bytes | None]:
    return {k: r.dump(k) for k in sorted(r.keys("*"))}  # type: ignore[misc]


def test_a_host_the_console_does_not_serve_is_refused_on_every_route(
        served: tuple[Guard, str], r: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    app, own = served
    job = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path / 'c.db'}"), ["http://127.0.1.1/"])
    requests = _requests(app, job, f"sqlite:///{tmp_path / 'c.db'}")
    assert len(requests) >= len(ENDPOINTS) + 6
    port = own.rsplit(":", 1)[1]
    before = _state(r)
    with httpx.Client(base_url=f"http://{own}", timeout=10) as client, caplog.at_level(logging.WARNING, "crawler.web"):
        # What a rebound page's scripts send: its own name, as Host and as Origin.
        for method, path, body in requests:
            headers = {"Host": f"{EVIL}:{port}", "Origin": f"http://{EVIL}:{port}", "Sec-Fetch-Site": "same-origin",
                       **JSON}
            res = client.request(method, path, headers=headers, json=body)
            assert res.status_code == 421, (method, path, res.status_code, res.text)
            assert set(res.json()) == {"error"} and job not in res.text
        assert _state(r) == before  # nothing paused, created, changed or logged
        assert jobs.status(r, job)["status"] == jobs.RUNNING and len(jobs.known(r)) == 1
        refusals = [rec for rec in caplog.records if rec.name == "crawler.web" and rec.levelno == logging.WARNING]
        assert len(refusals) == len(requests) and EVIL in refusals[0].getMessage()

        # The same requests under the console's own name pass the guard and reach their handler:
        # the ones given a body above succeed (recover refuses a job Redis still has, from the
        # handler); a route added since, sent {}, may say its input is wrong, but nothing refuses it.
        for method, path, body in requests:
            headers = {"Host": own, "Origin": f"http://{own}", "Sec-Fetch-Site": "same-origin", **JSON}
            res = client.request(method, path, headers=headers, json=body)
            if path.endswith("/recover"):
                assert res.status_code == 400 and "is in Redis already" in res.text, res.text
            elif body or method in ("GET", "DELETE") or path.endswith(("/pause", "/resume", "/stop")):
                assert res.status_code in (200, 201), (method, path, res.status_code, res.text)
            else:
                assert res.status_code in (200, 201, 400), (method, path, res.status_code, res.text)
    assert len(jobs.known(r)) == 2
    assert {"paused", "resumed", "stopped", "settings_changed"} <= {e["event"] for e in control.logs(r, job)}


def test_host_names_loopback_listen_address_and_allowed(served: tuple[Guard, str], r: redis.Redis) -> None:
    _, own = served
    port = own.rsplit(":", 1)[1]
    with httpx.Client(base_url=f"http://{own}", timeout=5) as client:
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", f"127.0.0.2:{port}", "LocalHost"):
            assert client.get("/api/jobs", headers={"Host": host}).status_code == 200, host
        for host in (f"127.0.0.1.{EVIL}:{port}", f"localhost.:{port}", f"{EVIL}", "0.0.0.0", "a b", "-"):
            assert client.get("/api/jobs", headers={"Host": host}).status_code == 421, host
    # No Host at all (HTTP/1.0): refused too.
    with socket.create_connection(("127.0.0.1", int(port)), timeout=5) as s:
        s.sendall(b"GET /api/jobs HTTP/1.0\r\n\r\n")
        assert _read_all(s).startswith(b"HTTP/1.1 421 ")

    # The address it listens on, and the names CRAWLER_WEB_ALLOWED_HOSTS adds (a proxy's).
    app = create_app(r, listen="10.1.2.3", allowed_hosts=frozenset({"console.example", "ops.example:8443"}))
    with TestClient(app, base_url="http://10.1.2.3:8089") as c:
        assert c.get("/api/jobs").status_code == 200
        assert c.get("/api/jobs", headers={"Host": "console.example"}).status_code == 200
        assert c.get("/api/jobs", headers={"Host": "ops.example:8443"}).status_code == 200
        assert c.get("/api/jobs", headers={"Host": "ops.example:8444"}).status_code == 421
        assert c.get("/api/jobs", headers={"Host": "10.1.2.4:8089"}).status_code == 421
    # Created directly, with nothing said: loopback names only.
    with TestClient(create_app(r), base_url="http://10.1.2.3:8089") as c:
        assert c.get("/api/jobs").status_code == 421
        assert c.get("/api/jobs", headers={"Host": "localhost:8089"}).status_code == 200


def _read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def test_security_headers_on_every_kind_of_response(r: redis.Redis, tmp_path: Path) -> None:
    job = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path / 'c.db'}"), ["http://127.0.1.1/"])
    seen: dict[str, int] = {}

    def check(kind: str, res: httpx2.Response) -> None:  # TestClient answers with httpx2
        missing = SECURITY - set(res.headers)
        assert not missing, (kind, res.status_code, missing)
        assert "frame-ancestors 'none'" in res.headers["content-security-policy"]
        assert "default-src 'self'" in res.headers["content-security-policy"]
        assert res.headers["x-frame-options"] == "DENY" and res.headers["x-content-type-options"] == "nosniff"
        assert res.headers["referrer-policy"] == "no-referrer"
        seen[kind] = res.status_code

    with TestClient(create_app(r, event_interval=0.1), base_url="http://127.0.0.1") as c:
        check("json", c.get(f"/api/jobs/{job}"))
        check("created", c.post("/api/jobs", headers=JSON, json={
            "seeds": ["http://127.0.1.1/"], "settings": {"store": f"sqlite:///{tmp_path / 'd.db'}"}}))
        check("not found", c.get("/api/jobs/nope"))
        check("no route", c.get("/nothing"))
        check("method", c.delete("/api/jobs", headers=JSON))
        check("bad body", c.post("/api/jobs", headers=JSON, content=b"{"))
        check("too large", c.post("/api/jobs", headers=JSON, content=b" " * (MAX_BODY + 1)))
        check("cross-site", c.post(f"/api/jobs/{job}/pause", headers={**JSON, "Origin": "http://x.example"}))
        check("misdirected", c.get("/api/jobs", headers={"Host": EVIL}))
        check("page", c.get("/"))
        check("static", c.get("/static/console.js"))
        check("static missing", c.get("/static/nope.js"))
        check("metrics", c.get("/metrics"))
        check("openapi", c.get("/openapi.json"))
        with c.stream("GET", f"/api/jobs/{job}/events", params={"max": 1}) as res:
            check("events", res)
    with TestClient(create_app(r, Auth(token="t")), base_url="http://127.0.0.1") as c:
        check("unauthenticated", c.get("/metrics"))
    assert seen == {"json": 200, "created": 201, "not found": 404, "no route": 404, "method": 405, "bad body": 400,
                    "too large": 413, "cross-site": 403, "misdirected": 421, "page": 200, "static": 200,
                    "static missing": 404, "metrics": 200, "openapi": 200, "events": 200, "unauthenticated": 401}


def test_metrics_every_family_typed_with_jobs_and_nodes(served: tuple[Guard, str], r: redis.Redis,
                                                        tmp_path: Path) -> None:
    _, own = served
    running = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path / 'a.db'}"), ["http://127.0.1.1/"])
    jobs.count(r, running, stored=7, inflight=2, **{"error:timeout": 3, "error:http_404": 1, "fetched": 9})
    finished = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path / 'b.db'}"), ["http://127.0.1.2/"])
    jobs.count(r, finished, stored=4)
    jobs.stop(r, finished)
    now = time.time()
    for node, fetched in (("w0@h", 11), ('w"1\\@h', 5)):  # a quote and a backslash: escaped, not breaking lines
        nodes.count_fetched(r, node, fetched)
        nodes.record_heartbeat(r, node, shards=[0], interval=2.0, now=now)
    nodes.mark_offline(r, 'w"1\\@h')

    res = httpx.get(f"http://{own}/metrics", timeout=10)
    assert res.status_code == 200 and res.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(res.text)}
    assert {f.type for f in families.values()} <= {"counter", "gauge"}, {n: f.type for n, f in families.items()}
    assert set(families) == {"crawler_job_pages", "crawler_job_errors", "crawler_job_queued", "crawler_job_inflight",
                             "crawler_job_held", "crawler_job_running", "crawler_job_counter", "crawler_node_pages",
                             "crawler_node_up"}

    def samples(family: str, sample: str) -> dict[tuple[str, ...], float]:
        return {tuple(s.labels.values()): s.value for s in families[family].samples if s.name == sample}

    # The names scraped are today's: counters end in _total, the rest as they were.
    assert samples("crawler_job_pages", "crawler_job_pages_total") == {(running,): 7, (finished,): 4}
    assert samples("crawler_job_errors", "crawler_job_errors_total") == {(running, "timeout"): 3,
                                                                         (running, "http_404"): 1}
    assert samples("crawler_job_inflight", "crawler_job_inflight")[(running,)] == 2
    assert samples("crawler_job_running", "crawler_job_running") == {(running, jobs.RUNNING): 1,
                                                                     (finished, jobs.STOPPED): 0}
    assert samples("crawler_job_counter", "crawler_job_counter")[(running, "fetched")] == 9
    assert samples("crawler_node_pages", "crawler_node_pages_total") == {("w0@h",): 11, ('w"1\\@h',): 5}
    assert samples("crawler_node_up", "crawler_node_up") == {("w0@h",): 1, ('w"1\\@h',): 0}
    # Each family's samples together: what the exposition format requires, and the parser assumes.
    names = [line.split("{", 1)[0] for line in res.text.splitlines() if line and not line.startswith("#")]
    runs = [name for name, _ in itertools.groupby(names)]
    assert len(runs) == len(set(runs)), runs


# -- request bodies: refused while they arrive, never held -------------------------------------

BIG = 200 << 20
CHUNK = b" " * (1 << 20)  # sent again and again: the client never holds the 200 MB either


def _memory(pid: int) -> dict[str, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) for k in ("VmRSS", "VmHWM")}  # kB


def _send_big(port: int, chunked: bool) -> bytes:
    """POST a 200 MB body to /api/jobs (declared in Content-Length, or chunked without a length);
    the console's answer, read while sending, since it may close before all is sent."""
    head = "POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {BIG}\r\n\r\n"
    frame = f"{len(CHUNK):x}\r\n".encode() + CHUNK + b"\r\n" if chunked else CHUNK
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode())
        sent = 0
        try:
            while sent < BIG:
                # Never block on a full buffer the console stopped reading: send what fits, and
                # read whatever it answers meanwhile.
                readable, writable, _ = select.select([s], [s], [], 10)
                if readable:
                    got = s.recv(65536)
                    if not got:
                        break
                    answer += got
                if writable:
                    s.sendall(frame)
                    sent += len(CHUNK)
            if sent >= BIG and chunked:
                s.sendall(b"0\r\n\r\n")
            while got := s.recv(65536):
                answer += got
        except (BrokenPipeError, ConnectionResetError):
            pass
    return answer


def test_a_200_mb_body_is_refused_without_growing_the_console(redis_url: str, tmp_path: Path) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_WEB_")}
    env["CRAWLER_REDIS_URL"] = redis_url
    err = tmp_path / "web.err"
    proc = subprocess.Popen([sys.executable, "-m", "crawler", "web", "--port", str(port)], env=env,
                            stderr=err.open("wb"))
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/api/jobs", timeout=2).status_code == 200
                break
            except httpx.ConnectError:
                assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
                time.sleep(0.1)
        # The real server (server.py) knows its address: a foreign Host is refused there too.
        assert httpx.get(f"http://127.0.0.1:{port}/api/jobs", headers={"Host": EVIL}).status_code == 421
        assert "evil.example" in err.read_text()
        # Every code path the big request takes, warmed up, so what it loads is not counted.
        small = httpx.post(f"http://127.0.0.1:{port}/api/jobs", headers=JSON, content=b"{}")
        assert small.status_code == 400
        assert httpx.post(f"http://127.0.0.1:{port}/api/jobs", headers=JSON,
                          content=b" " * (MAX_BODY + 1)).status_code == 413
        for chunked in (False, True):
            Path(f"/proc/{proc.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS: the peak from now on
            base = _memory(proc.pid)["VmRSS"]
            t0 = time.monotonic()
            answer = _send_big(port, chunked)
            took = time.monotonic() - t0
            growth = _memory(proc.pid)["VmHWM"] - base
            print(f"chunked={chunked}: peak RSS growth {growth} kB, {took:.2f} s, answer {answer[:12]!r}")
            assert growth < 10 * 1024, (chunked, growth)
            if answer:  # the console may reset the connection before the client reads it
                assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
                assert b'"error":"request body over 1048576 bytes' in answer
            assert took < 10
        assert httpx.get(f"http://127.0.0.1:{port}/api/jobs", timeout=5).status_code == 200
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists() and os.environ.get("CRAWLER_REQUIRE_CHROMIUM") != "1",
                    reason="Debian's chromium is not installed (apt-get install chromium)")
def test_the_console_page_runs_under_its_content_security_policy(served: tuple[Guard, str], r: redis.Redis,
                                                                  tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    from tests.integration.test_web_console import ARGS, CHROMIUM

    _, own = served
    job = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path / 'c.db'}"), ["http://127.0.1.1/"])
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            page = browser.new_page()
            # Injected by the driver, so the policy does not apply to it: it records every violation.
            page.add_init_script("window.violations = []; document.addEventListener('securitypolicyviolation',"
                                 " e => window.violations.push(e.effectiveDirective + ' ' + e.blockedURI))")
            page.goto(f"http://{own}/#/jobs/{job}")
            expect(page.locator("#status")).to_have_text("running", timeout=10_000)
            expect(page.locator("#hosts tbody tr")).to_have_count(1, timeout=10_000)
            assert page.evaluate("window.violations") == []
            # The policy is on and the check sees a breach: an inline style is refused.
            page.evaluate("document.body.setAttribute('style', 'color: red')")
            page.wait_for_function("() => window.violations.length > 0", timeout=5_000)
            assert page.evaluate("window.violations")[0].startswith("style-src")
        finally:
            browser.close()
