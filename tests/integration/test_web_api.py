"""The REST API through an ASGI test client, over a real Redis (and real workers crawling the
loopback test web for the end-to-end test): the same control functions as the CLI, JSON errors,
auth, and no state change from another site."""

from __future__ import annotations

import base64
import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from openapi_spec_validator import OpenAPIV31SpecValidator, validate
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from crawler import cli, jobs
from crawler.frontier import Entry, Frontier
from crawler.testweb import TestWeb
from crawler.web import create_app
from crawler.web.auth import Auth
from tests.conftest import Workers, wait_done

JSON = {"Content-Type": "application/json"}
ALL = "shard-0,shard-1"


@pytest.fixture
def client(r: redis.Redis) -> Iterator[TestClient]:
    # A loopback base URL: the app answers only Host names it serves, and "testserver" is none.
    with TestClient(create_app(r, event_interval=0.2), base_url="http://127.0.0.1") as c:
        yield c


def _submit(client: TestClient, tmp_path: Path, seeds: list[str], **settings: object) -> str:
    res = client.post("/api/jobs", headers=JSON,
                      json={"seeds": seeds, "settings": {"store": f"sqlite:///{tmp_path / 'c.db'}", **settings}})
    assert res.status_code == 201, res.text
    return str(res.json()["id"])


def test_jobs_settings_hosts_logs_and_errors(client: TestClient, r: redis.Redis, tmp_path: Path) -> None:
    job = _submit(client, tmp_path, ["http://127.0.1.1/"], delay="0.5", shards=2)
    assert [j["id"] for j in client.get("/api/jobs").json()["jobs"]] == [job]
    st = client.get(f"/api/jobs/{job}").json()
    assert st["status"] == jobs.RUNNING and st["counters"]["open"] == 1

    # Settings: read, changed as text the way a form sends them, checked as the CLI checks them.
    got = client.get(f"/api/jobs/{job}/settings").json()
    assert got["settings"]["delay"] == 0.5 and "delay" in got["runtime"]
    res = client.patch(f"/api/jobs/{job}/settings", headers=JSON, json={"delay": "2", "user_agent": "bot/2"})
    assert res.status_code == 200, res.text
    assert res.json()["changed"] == {"delay": [0.5, 2.0], "user_agent": [got["settings"]["user_agent"], "bot/2"]}
    assert client.get(f"/api/jobs/{job}/settings").json()["settings"]["delay"] == 2.0
    for body, words in (({"delay": "nan"}, "delay"), ({"shards": "3"}, "cannot change while a job runs"),
                        ({"nonsense": "1"}, "no setting named"), ({}, "no settings given"),
                        # null meant "unset": each worker then took its own environment's value
                        ({"per_host": None}, "setting per_host: null is not a value"),
                        ({"delay": None, "user_agent": "x"}, "setting delay: null is not a value")):
        res = client.patch(f"/api/jobs/{job}/settings", headers=JSON, json=body)
        assert res.status_code == 400, (body, res.text)
        assert words in res.json()["error"] and "\n" not in res.json()["error"]

    # Hosts: paged and sorted on the server.
    Frontier(r).admit(job, [Entry(f"http://10.0.0.{i}/p{k}") for i in range(30) for k in range(i % 4)], 2,
                      host_budget=1000)
    page = client.get(f"/api/jobs/{job}/hosts", params={"sort": "queued", "limit": 5, "offset": 0}).json()
    assert page["total"] >= 22 and len(page["hosts"]) == 5
    assert [h["queued"] for h in page["hosts"]] == sorted((h["queued"] for h in page["hosts"]), reverse=True)
    names = client.get(f"/api/jobs/{job}/hosts", params={"sort": "host", "desc": "false", "limit": 1000}).json()
    assert [h["host"] for h in names["hosts"]] == sorted(h["host"] for h in names["hosts"])
    assert client.get(f"/api/jobs/{job}/hosts", params={"sort": "colour"}).status_code == 400
    assert client.get(f"/api/jobs/{job}/hosts", params={"limit": "x"}).json() == {
        "error": "parameter limit: must be an integer, got 'x'"}

    # A per-host override, set and cleared.
    res = client.put(f"/api/jobs/{job}/hosts/127.0.1.1", headers=JSON, json={"delay": "3", "per_host": 2})
    assert res.status_code == 200 and res.json()["override"] == {"delay": 3.0, "per_host": 2}, res.text
    row = next(h for h in client.get(f"/api/jobs/{job}/hosts", params={"prefix": "127.0.1.1"}).json()["hosts"])
    assert row["override"] == {"delay": 3.0, "per_host": 2}
    assert client.put(f"/api/jobs/{job}/hosts/127.0.1.1", headers=JSON, json={"delay": -1}).status_code == 400
    assert client.delete(f"/api/jobs/{job}/hosts/127.0.1.1", headers=JSON).json()["cleared"] is True

    # The log names the API caller.
    entries = client.get(f"/api/jobs/{job}/logs").json()["entries"]
    changed = next(e for e in entries if e["event"] == "settings_changed")
    assert changed["by"].startswith("api:") and "delay 0.5 -> 2.0" in changed["message"]
    later = client.get(f"/api/jobs/{job}/logs", params={"after": entries[-1]["id"]}).json()["entries"]
    assert later == []

    # Pause, resume, stop through the same functions as the CLI.
    assert client.post(f"/api/jobs/{job}/pause", headers=JSON).json() == {"id": job, "status": jobs.PAUSED}
    assert client.post(f"/api/jobs/{job}/resume", headers=JSON).json()["status"] == jobs.RUNNING
    assert client.post(f"/api/jobs/{job}/stop", headers=JSON).json()["status"] == jobs.STOPPED
    assert client.get(f"/api/jobs/{job}/cycles").json() == {"cycles": []}
    assert client.get(f"/api/jobs/{job}/pages").json() == {"pages": []}
    assert [s["shard"] for s in client.get(f"/api/jobs/{job}/shards").json()["shards"]] == [0, 1]
    assert client.get("/api/nodes").json() == {"nodes": []}

    # Errors are one JSON line with the right status.
    assert client.get("/api/jobs/nope").json() == {"error": "no such job: nope"}
    assert client.get("/api/jobs/nope").status_code == 404
    assert client.post("/api/jobs/nope/pause", headers=JSON).status_code == 404
    # As the CLI: a pause that does not apply is refused with its reason, not answered 200.
    client.post(f"/api/jobs/{job}/stop", headers=JSON)
    res = client.post(f"/api/jobs/{job}/pause", headers=JSON)
    assert res.status_code == 409 and res.json() == {
        "error": f"job {job}: was stopped: only a running or waiting job pauses"}, res.text
    res = client.post(f"/api/jobs/{job}/resume", headers=JSON)
    assert res.status_code == 409 and "only a paused job resumes" in res.json()["error"]
    assert "409" in client.get("/openapi.json").json()["paths"]["/api/jobs/{job}/pause"]["post"]["responses"]
    res = client.post("/api/jobs", headers=JSON, content=b"{not json")
    assert res.status_code == 400 and res.json()["error"].startswith("request body is not JSON")
    res = client.post("/api/jobs", headers=JSON, json={"seeds": ["ftp://x/"], "settings": {"store": "sqlite:///"
                                                                                              f"{tmp_path}/d.db"}})
    assert res.status_code == 400 and "ftp://x/" in res.json()["error"]
    res = client.post("/api/jobs", headers=JSON, json={"seeds": ["http://127.0.1.1/"], "settings": {}})
    assert res.status_code == 400 and "store URL is required" in res.json()["error"]
    res = client.post("/api/jobs", headers=JSON, json={"seeds": ["http://127.0.1.1/"], "settings": {
        "store": f"sqlite:///{tmp_path}/n.db", "max_pages": None}})
    assert res.status_code == 400 and "setting max_pages: null is not a value" in res.json()["error"]
    res = client.delete("/api/jobs", headers=JSON)
    assert res.status_code == 405 and "error" in res.json()
    assert client.get("/api/nothing").status_code == 404 and "error" in client.get("/api/nothing").json()


def test_no_answer_shows_a_password(client: TestClient, r: redis.Redis, tmp_path: Path) -> None:
    job = _submit(client, tmp_path, ["http://127.0.1.1/"])
    jobs.stop(r, job, error="store postgresql://crawler:hunter2@db:5432/crawl unreachable")
    for path in ("/api/jobs", f"/api/jobs/{job}", f"/api/jobs/{job}/logs"):
        text = client.get(path).text
        assert "hunter2" not in text and "crawler:***@db" in text, path
    with client.stream("GET", f"/api/jobs/{job}/events", params={"max": 1}) as res:
        assert "hunter2" not in "".join(res.iter_text())


def test_openapi_metrics_console_files(client: TestClient, tmp_path: Path) -> None:
    job = _submit(client, tmp_path, ["http://127.0.1.1/"])
    doc = client.get("/openapi.json").json()
    assert doc["openapi"] == "3.1.0"
    validate(doc, cls=OpenAPIV31SpecValidator)
    assert {"get", "patch"} <= set(doc["paths"]["/api/jobs/{job}/settings"])
    params = {p["name"] for p in doc["paths"]["/api/jobs/{job}/hosts"]["get"]["parameters"]}
    assert params == {"job", "sort", "desc", "offset", "limit", "prefix"}
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))

    res = client.get("/metrics")
    assert res.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(res.text)}
    assert {f.type for f in families.values()} <= {"counter", "gauge"}
    pages = families["crawler_job_pages"].samples
    assert [(s.labels["job"], s.value) for s in pages] == [(job, 0.0)]

    page = client.get("/")
    assert page.status_code == 200 and "crawler console" in page.text
    assert "console.js" in page.text
    js = client.get("/static/console.js")
    assert js.status_code == 200 and "textContent" in js.text
    # No CDN: every script and stylesheet is the console's own.
    assert "http" not in "".join(line for line in page.text.splitlines() if "src=" in line or "href=" in line)


def test_event_stream_sends_status_and_log(client: TestClient, tmp_path: Path) -> None:
    job = _submit(client, tmp_path, ["http://127.0.1.1/"])
    client.post(f"/api/jobs/{job}/pause", headers=JSON)
    with client.stream("GET", f"/api/jobs/{job}/events", params={"max": 2}) as res:
        assert res.headers["content-type"].startswith("text/event-stream")
        text = "".join(res.iter_text())
    events = [block for block in text.split("\n\n") if block.strip()]
    statuses = [json.loads(b.split("data: ", 1)[1]) for b in events if b.startswith("event: status")]
    assert len(statuses) == 2 and statuses[0]["status"] == jobs.PAUSED
    assert any(b.startswith("event: log") and '"paused"' in b for b in events)
    assert client.get("/api/jobs/nope/events").status_code == 404


def test_cross_site_state_changes_are_refused(client: TestClient, tmp_path: Path) -> None:
    job = _submit(client, tmp_path, ["http://127.0.1.1/"])
    pause = f"/api/jobs/{job}/pause"
    # What a page on another site can send without a preflight: a form post, a simple fetch.
    for headers in ({"Content-Type": "application/x-www-form-urlencoded"}, {"Content-Type": "text/plain"}, {},
                    {**JSON, "Origin": "http://evil.example"}, {**JSON, "Origin": "null"},
                    {**JSON, "Sec-Fetch-Site": "cross-site"}, {**JSON, "Sec-Fetch-Site": "same-site"}):
        res = client.post(pause, headers=headers)
        assert res.status_code == 403, (headers, res.text)
        assert set(res.json()) == {"error"}
    assert client.get(f"/api/jobs/{job}").json()["status"] == jobs.RUNNING
    # Reading stays open to the console's own page; its own origin may change things.
    res = client.post(pause, headers={**JSON, "Origin": "http://127.0.0.1", "Sec-Fetch-Site": "same-origin"})
    assert res.status_code == 200 and res.json()["status"] == jobs.PAUSED


def test_auth_token_and_basic(r: redis.Redis) -> None:
    with TestClient(create_app(r, Auth(token="s3cret-token")), base_url="http://127.0.0.1") as c:
        res = c.get("/api/jobs")
        assert res.status_code == 401 and res.json() == {"error": "authentication required"}
        assert res.headers["WWW-Authenticate"].startswith("Bearer")
        assert c.get("/api/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/metrics").status_code == 401
        assert c.get("/api/jobs", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
        # The page itself holds no data: it loads, and asks for the token.
        assert c.get("/").status_code == 200 and c.get("/static/console.css").status_code == 200
        assert "s3cret-token" not in c.get("/openapi.json", headers={"Authorization": "Bearer s3cret-token"}).text

    def basic(user: str, pw: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()}

    with TestClient(create_app(r, Auth(user="ops", password="pw:with:colons")), base_url="http://127.0.0.1") as c:
        res = c.get("/")
        assert res.status_code == 401 and res.headers["WWW-Authenticate"].startswith("Basic")
        assert c.get("/api/jobs", headers=basic("ops", "pw")).status_code == 401
        assert c.get("/api/jobs", headers=basic("ops", "pw:with:colons")).status_code == 200
        assert c.get("/", headers=basic("ops", "pw:with:colons")).status_code == 200
        assert c.get("/api/jobs", headers={"Authorization": "Basic !!!"}).status_code == 401


def test_crawler_web_refuses_an_exposed_address_without_auth(redis_url: str, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("CRAWLER_WEB_TOKEN", "CRAWLER_WEB_USER", "CRAWLER_WEB_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["web", "--host", "0.0.0.0", "--port", "8089"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("crawler web: crawler web listens on 0.0.0.0, not only on loopback: set CRAWLER_WEB_TOKEN")
    assert "\n" not in err
    monkeypatch.setenv("CRAWLER_WEB_USER", "ops")
    assert cli.main(["web", "--host", "10.1.2.3"]) == 2
    assert "set both CRAWLER_WEB_USER and CRAWLER_WEB_PASSWORD" in capsys.readouterr().err


def _starts(web: TestWeb, site: int, after: float) -> list[float]:
    return sorted(h.start for h in web.hits() if h.site == site and h.start >= after and h.path != "/robots.txt")


def test_steer_a_real_crawl_through_the_api(client: TestClient, make_web: Callable[..., TestWeb], workers: Workers,
                                            r: redis.Redis, tmp_path: Path) -> None:
    # Big enough to be still running when the delay goes up: at delay 0 a host's runs fetch a
    # few hundred pages in the 5 s the workers may take to read the new one.
    web = make_web(2, 2000)
    workers.start("w0", ALL)
    job = _submit(client, tmp_path, web.seeds(), shards=2, delay="0.05")

    def stored() -> int:
        return int(client.get(f"/api/jobs/{job}").json()["counters"].get("stored", 0))

    deadline = time.monotonic() + 60
    while stored() < 10:
        assert time.monotonic() < deadline, client.get(f"/api/jobs/{job}").json()
        time.sleep(0.2)
    assert client.post(f"/api/jobs/{job}/pause", headers=JSON).json()["status"] == jobs.PAUSED
    time.sleep(2)  # what was in flight finishes
    frozen = stored()
    time.sleep(2)
    assert stored() == frozen
    assert client.post(f"/api/jobs/{job}/resume", headers=JSON).json()["status"] == jobs.RUNNING
    res = client.patch(f"/api/jobs/{job}/settings", headers=JSON, json={"delay": "0"})
    assert res.json()["changed"] == {"delay": [0.05, 0.0]}
    deadline = time.monotonic() + 60
    while stored() <= frozen + 10:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    # A longer delay through the API: within 5 s every worker spaces requests to a host so.
    t1 = time.time()
    client.patch(f"/api/jobs/{job}/settings", headers=JSON, json={"delay": "0.6"})
    deadline = time.monotonic() + 30
    while len(starts := _starts(web, 0, t1 + 5)) < 5:
        assert time.monotonic() < deadline, starts
        time.sleep(0.1)
    gaps = sorted(b - a for a, b in itertools.pairwise(starts))
    assert gaps[len(gaps) // 2] >= 0.55, gaps
    hosts = client.get(f"/api/jobs/{job}/hosts", params={"sort": "fetched"}).json()
    assert hosts["total"] >= 2 and hosts["hosts"][0]["fetched"] > 0
    assert client.get(f"/api/jobs/{job}").json()["status"] == jobs.RUNNING  # steered while it ran
    assert client.post(f"/api/jobs/{job}/stop", headers=JSON).json()["status"] == jobs.STOPPED
    wait_done(r, job)
    pages = client.get(f"/api/jobs/{job}/pages", params={"limit": 5}).json()["pages"]
    assert len(pages) == 5 and all(p["url"].startswith("http://127.0.") for p in pages)
    events = {e["event"] for e in client.get(f"/api/jobs/{job}/logs").json()["entries"]}
    assert {"submitted", "paused", "resumed", "settings_changed", "stopped"} <= events


def test_crawler_web_serves_with_a_token(redis_url: str, tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "CRAWLER_WEB_TOKEN": "t0ken", "CRAWLER_REDIS_URL": redis_url}
    proc = subprocess.Popen([sys.executable, "-m", "crawler", "web", "--port", str(port)], env=env,
                            stderr=open(tmp_path / "web.err", "wb"))  # noqa: SIM115
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                res = httpx.get(f"http://127.0.0.1:{port}/api/jobs", timeout=2)
                break
            except httpx.ConnectError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "web.err").read_text()
                time.sleep(0.1)
        assert res.status_code == 401
        res = httpx.get(f"http://127.0.0.1:{port}/api/jobs", headers={"Authorization": "Bearer t0ken"})
        assert res.json() == {"jobs": []}
        assert "auth required" in (tmp_path / "web.err").read_text()
    finally:
        proc.terminate()
        proc.wait(10)
