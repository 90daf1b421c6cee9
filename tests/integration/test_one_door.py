"""The operations the REST API gained so that it offers what the CLI does (reset-seen, shards
set, stored main text) and the one the CLI gained (metrics), each through both faces over a real
Redis, with the same effect and the same record in the job's log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from crawler import cli, jobs
from crawler.config.settings import Settings
from crawler.state import keys
from crawler.web import create_app

JSON = {"Content-Type": "application/json"}


@pytest.fixture
def client(r: redis.Redis) -> Iterator[TestClient]:
    with TestClient(create_app(r), base_url="http://127.0.0.1") as c:
        yield c


def _job(r: redis.Redis, tmp_path: Path, shards: int = 2) -> str:
    return jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path / 'c.db'}", shards=shards),
                       ["http://127.0.1.1/", "http://127.0.1.2/"])


def _events(r: redis.Redis, job_id: str) -> list[str]:
    return [fields[b"event"].decode() for _id, fields in r.xrange(keys.job_log(job_id))]


def test_reset_seen_and_reshard_through_the_api_and_the_cli(client: TestClient, r: redis.Redis, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(r, tmp_path)
    assert r.exists(keys.seen(job)) or r.exists(keys.bloom_meta(job))  # the seeds were marked seen
    r.sadd(keys.query_variants(job, "abc"), "d1")  # a query-variant group goes with the seen-set
    res = client.post(f"/api/jobs/{job}/reset-seen", headers=JSON)
    assert res.status_code == 200 and res.json()["deleted"] >= 2, res.text
    assert not r.exists(keys.query_variants(job, "abc"))
    assert cli.main(["reset-seen", job]) == 0
    assert "seen-set cleared" in capsys.readouterr().out
    assert _events(r, job).count("seen_reset") == 2

    res = client.post("/api/shards", headers=JSON, json={"count": 3, "jobs": [job]})
    assert res.status_code == 200, res.text
    [moved] = res.json()["jobs"]
    assert moved["job"] == job and moved["shards"] == 3 and moved["hosts_total"] == 2
    assert jobs.load(r, job, max_age=0).settings.shards == 3
    assert cli.main(["shards", "set", "2", "--job", job]) == 0
    assert jobs.load(r, job, max_age=0).settings.shards == 2
    assert _events(r, job).count("resharded") == 2
    for body, words in (({"count": 0}, "shards"), ({"count": "3"}, "count"), ({"count": 2, "jobs": "x"}, "jobs"),
                        ({"count": 3, "jobs": []}, "no job named")):
        res = client.post("/api/shards", headers=JSON, json=body)
        assert res.status_code == 400 and words in res.json()["error"], (body, res.text)
    # Every job named is checked before any is changed.
    res = client.post("/api/shards", headers=JSON, json={"count": 3, "jobs": [job, "nope"]})
    assert res.status_code == 404 and jobs.load(r, job, max_age=0).settings.shards == 2
    assert client.post("/api/jobs/nope/reset-seen", headers=JSON).status_code == 404


def test_status_has_shards_content_is_served_and_metrics_print(client: TestClient, r: redis.Redis, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(r, tmp_path)
    st = client.get(f"/api/jobs/{job}").json()
    assert [s["shard"] for s in st["shards"]] == [0, 1]  # as `crawler status --json` has them
    assert client.get(f"/api/jobs/{job}/content").json() == {"content": []}
    assert cli.main(["metrics"]) == 0
    families = {f.name: f for f in text_string_to_metric_families(capsys.readouterr().out)}
    assert families["crawler_job_running"].samples[0].labels["job"] == job
