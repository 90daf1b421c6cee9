"""One-command crawls: a private Redis, real Celery worker processes for every shard, a job,
progress until it is done, and a clean shutdown that leaves the output readable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from crawler import jobs
from crawler.redis_server import RedisServer
from crawler.settings import Settings
from crawler.sharding import queue_name

Progress = Callable[[dict[str, Any], float], None]


class CrawlFailed(RuntimeError):
    pass


@dataclass
class Outcome:
    job_id: str
    status: dict[str, Any]
    elapsed: float
    interrupted: bool = False


def worker_command(queues: Sequence[str], name: str, logfile: str | None = None,
                   loglevel: str = "WARNING") -> list[str]:
    # solo pool: the worker process runs tasks itself, no parent/child hand-off per task;
    # parallelism comes from running several worker processes.
    cmd = [sys.executable, "-m", "celery", "-A", "crawler", "worker",
           "-Q", ",".join(queues), "--pool", "solo", "-n", name,
           "--without-gossip", "--without-mingle", "--loglevel", loglevel]
    if logfile:
        cmd += ["--logfile", logfile]
    return cmd


def all_queues(shards: int) -> list[str]:
    return [queue_name(i) for i in range(shards)]


class WorkerProcesses:
    """One Celery worker process per entry of ``queues`` (the queues it consumes)."""

    def __init__(self, queues: Sequence[Sequence[str]], env: dict[str, str], log_dir: str) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log_dir = log_dir
        for i, consume in enumerate(queues):
            log = os.path.join(log_dir, f"worker-{i}.log")
            # A session of their own: Ctrl-C reaches us, and we stop them in order.
            self.procs.append(subprocess.Popen(
                worker_command(consume, f"embedded{i}@%h", log), env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(log + ".stderr", "wb"),  # noqa: SIM115 (the child owns it)
                start_new_session=True))

    def check(self) -> None:
        for i, p in enumerate(self.procs):
            if p.poll() is not None:
                raise CrawlFailed(f"worker {i} exited with status {p.returncode}; see {self.log_dir}/worker-{i}.log")

    def stop(self, timeout: float = 20.0) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # warm shutdown: the running task finishes
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def crawl(settings: Settings, seeds: list[str], out_dir: str, progress: Progress | None = None,
          poll: float = 0.25) -> Outcome:
    out = Path(out_dir).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    settings = settings.replace(store=settings.store or f"sqlite:///{out / 'crawl.db'}",
                                warc_dir=settings.warc_dir or (str(out / "warc") if settings.warc else ""))
    server: RedisServer | None = None
    workers: WorkerProcesses | None = None
    started = time.monotonic()
    job_id = ""
    client: redis.Redis | None = None
    try:
        if not settings.redis_url:
            server = RedisServer().start()
            settings = settings.replace(redis_url=server.url)
        client = redis.Redis.from_url(settings.redis_url)
        client.ping()
        job_id = jobs.submit(client, settings, seeds)
        env = {**os.environ, "CRAWLER_REDIS_URL": settings.redis_url, "CRAWLER_TASK_EVENTS": "0"}
        workers = WorkerProcesses([all_queues(settings.shards)] * settings.workers, env, str(out / "logs"))
        while True:
            st = jobs.status(client, job_id)
            if progress:
                progress(st, time.monotonic() - started)
            if st["status"] in jobs.FINISHED:
                return Outcome(job_id, st, time.monotonic() - started)
            workers.check()
            time.sleep(poll)
    except KeyboardInterrupt:
        if client is not None and job_id:
            jobs.stop(client, job_id)
        if workers is not None:
            workers.stop()
            workers = None
        st = jobs.status(client, job_id) if client is not None and job_id else {"counters": {}}
        return Outcome(job_id, st, time.monotonic() - started, interrupted=True)
    finally:
        if workers is not None:
            workers.stop()
        if client is not None:
            client.close()
        if server is not None:
            server.stop()
