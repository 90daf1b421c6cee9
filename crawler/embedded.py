"""One-command crawls: a private Redis, real Celery worker processes for every shard, a job,
progress until it is done, and a clean shutdown that leaves the output readable. Without a
session key in the environment (``CRAWLER_SECRET_KEY``, ``CRAWLER_SECRET_KEY_FILE``), the workers
get a random one for the run, so a crawl that logs in keeps its cookies sealed in Redis too."""

from __future__ import annotations

import logging
import os
import secrets
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
from crawler.config.brokers import parse_brokers
from crawler.config.redact import password_of, redact
from crawler.config.secretbox import KEY_FILE_VAR, KEY_VAR, new_key
from crawler.config.settings import Settings
from crawler.errors import ConfigError, CrawlerError
from crawler.frontier.sharding import RENDER_QUEUE, queue_name
from crawler.local.lifeline import PARENT_ENV
from crawler.local.redis_server import RedisServer
from crawler.local.signals import StopSignals, stop_in
from crawler.render.browser import chromium_path
from crawler.spiders.loader import PATHS_ENV, prepare_local
from crawler.state.conn import OUTAGE, OUTAGE_GRACE, check_version, connect, is_cluster, through_outage
from crawler.store import open_store
from crawler.store.export import write_feed
from crawler.store.place import StoreNotAllowed, place_dir, place_store

log = logging.getLogger(__name__)

Progress = Callable[[dict[str, Any], float], None]


class CrawlFailed(CrawlerError, RuntimeError):
    pass


@dataclass
class Outcome:
    job_id: str
    status: dict[str, Any]
    elapsed: float
    interrupted: bool = False
    signum: int = 0  # the signal that interrupted the crawl (SIGINT for Ctrl-C)
    spider: str = ""  # the job's spider, if any
    items: int = 0  # items in the feed written beside the store (``items.jsonl``)


def _stop_failed(client: redis.Redis | None, job_id: str, exc: BaseException) -> None:
    """Stop the job of a crawl that failed, unless it had ended (a failure after its end, writing
    the items' feed, say) or Redis is what failed (asking it again would only wait longer)."""
    if client is None or not job_id or isinstance(exc, OUTAGE):
        return
    try:
        if jobs.raw_status(client, job_id) in jobs.FINISHED:
            return
        jobs.stop(client, job_id, error=redact(f"crawler crawl failed: {type(exc).__name__}: {exc}")[:300],
                  by="crawler crawl")
    except Exception as err:  # the error being raised is the one to show
        log.warning("crawler crawl: could not stop job %s after its failure: %s", job_id, err)


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

    def stop(self, timeout: float = 20.0, hurry: Callable[[], bool] = lambda: False) -> None:
        """Warm shutdown (the running task finishes); killed after ``timeout`` seconds, or as
        soon as ``hurry()`` says so (a second Ctrl-C)."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline and not hurry():
            time.sleep(0.05)
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


STORE_ROOT_ENV = "CRAWLER_STORE_ROOT"


def _writes_only_under(settings: Settings, out: Path) -> bool:
    """Whether the job's SQLite store (or PostgreSQL) and WARC directory are all under ``out``:
    then its workers' store root can be ``out`` whatever the environment says."""
    try:
        place_store(settings.store, str(out), ())
        if settings.warc and settings.warc_dir:
            place_dir(settings.warc_dir, str(out))
    except StoreNotAllowed:
        return False
    return True


def _feed(settings: Settings, job_id: str, out: Path) -> int:
    """A spider job's items as ``items.jsonl`` beside the store: what a feed export gives a
    Scrapy user, written from the store once the job is over (so it holds every item exactly
    once, however often pages were redelivered)."""
    if not settings.spider or not job_id:
        return 0
    store = open_store(settings.store)
    try:
        return write_feed(store.items(job_id), str(out / "items.jsonl"))
    finally:
        store.close()


def crawl(settings: Settings, seeds: list[str], out_dir: str, progress: Progress | None = None,
          poll: float = 0.25) -> Outcome:
    """Run one job to its end on a private Redis (unless ``settings.redis_url`` names one) and
    worker processes of its own. SIGTERM, SIGHUP and SIGINT (Ctrl-C) stop it the same way: the
    job is stopped, the workers shut down warm, Redis stops, and the Outcome says which signal
    came (``interrupted``, ``signum``). No child outlives it, even if it is killed outright
    (``crawler.local.lifeline``). Bad settings or seeds raise before anything is created or started."""
    # The operator's own spider on their own machine: imported here, its directory listed for
    # the crawl's own workers (``spider_paths``).
    settings, seeds = prepare_local(settings.validated(), seeds)
    if seeds or not settings.spider_start_requests:  # a spider's start_requests may be all it starts from
        jobs.canonical_seeds(seeds, settings.max_url_length)
    if settings.render != "never":
        chromium_path(settings.chromium)  # no Chromium: say what to install before starting anything
    out = Path(out_dir).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    settings = settings.replace(store=settings.store or f"sqlite:///{out / 'crawl.db'}",
                                warc_dir=settings.warc_dir or (str(out / "warc") if settings.warc else ""))
    server: RedisServer | None = None
    workers: WorkerProcesses | None = None
    started = time.monotonic()
    job_id = ""
    client: redis.Redis | None = None
    with StopSignals() as signals:
        try:
            if not settings.redis_url:
                # Held while it starts: interrupted half-way, nobody would know its process.
                with signals.deferred():
                    # Anything on this host could otherwise talk to it, a crawled page that
                    # redirects to loopback included.
                    server = RedisServer(password=secrets.token_urlsafe(24))
                    server.start()
                print(f"redis: started {server.binary} on 127.0.0.1:{server.port}", file=sys.stderr)
                settings = settings.replace(redis_url=server.url)
            if is_cluster(settings.redis_url) and len(parse_brokers(settings.broker_url, "", "")) > 1:
                # Its workers consume every shard, which Celery does from one broker only.
                raise ConfigError("crawler crawl with its state on a Redis Cluster runs its workers on one broker: "
                                  "CRAWLER_BROKER_URL names several")
            client = connect(settings.redis_url)
            check_version(client)
            job_id = jobs.submit(client, settings, seeds)
            # Its Redis is its broker too (these workers consume every shard, so one broker), but
            # a Redis Cluster, which cannot be one: then the broker it was given.
            broker = settings.broker_url if is_cluster(settings.redis_url) else ""
            env = {**os.environ, "CRAWLER_REDIS_URL": settings.redis_url, "CRAWLER_BROKER_URL": broker,
                   "CRAWLER_TASK_EVENTS": "0",
                   PARENT_ENV: str(os.getpid()), PATHS_ENV: os.pathsep.join(settings.spider_paths)}
            # The job carries its store URL without the password (jobs.submit): these workers
            # are ours, so they get it the way any worker would, from their environment.
            if password_of(settings.store) and settings.store.startswith("postgres"):
                env["PGPASSWORD"] = password_of(settings.store)
            if _writes_only_under(settings, out):
                env[STORE_ROOT_ENV] = str(out)  # its workers may write only where it was told to
            if not (env.get(KEY_VAR, "").strip() or env.get(KEY_FILE_VAR)):
                # A session key for this run's workers only: through their environment, never on
                # a command line, in Redis or in a log; gone with them, as their cookies go with the job.
                env[KEY_VAR] = new_key()
            with signals.deferred():
                # Rendering gets a worker of its own (one browser), as it would on a cluster.
                render = [[RENDER_QUEUE]] if settings.render != "never" else []
                workers = WorkerProcesses([all_queues(settings.shards)] * settings.workers + render, env,
                                          str(out / "logs"))
            # A private Redis does not come back; an external one may be failing over.
            grace = 0 if server is not None else OUTAGE_GRACE
            while True:
                signals.check()
                st = through_outage(lambda: jobs.status(client, job_id), grace,
                                    lambda line: print(f"crawler: {line}", file=sys.stderr))
                if progress:
                    progress(st, time.monotonic() - started)
                if st["status"] in jobs.FINISHED:
                    signals.hold()
                    return Outcome(job_id, st, time.monotonic() - started, spider=settings.spider,
                                   items=_feed(settings, job_id, out))
                workers.check()
                time.sleep(poll)
        except BaseException as exc:
            stop = stop_in(exc)
            if stop is None and not isinstance(exc, KeyboardInterrupt):
                # Its workers are going: a job left running would wait for ever in that Redis
                # (``status --wait`` with it), so it ends stopped, saying why. Signals from
                # here on are noted, not raised: the failure is what the caller must see.
                signals.hold()
                _stop_failed(client, job_id, exc)
                raise
            signals.hold()
            signum = stop.signum if stop is not None else signal.SIGINT
            last: dict[str, Any] = {"counters": {}}
            try:
                if client is not None and job_id:
                    jobs.stop(client, job_id)
                if workers is not None:
                    workers.stop(hurry=signals.hurry)
                    workers = None
                if client is not None and job_id:
                    last = jobs.status(client, job_id)
            except redis.RedisError as err:
                # An external Redis may have gone with the same signal; the store is what counts.
                print(f"crawler: could not record the stop in Redis ({err})", file=sys.stderr)
            return Outcome(job_id, last, time.monotonic() - started, interrupted=True, signum=signum,
                           spider=settings.spider, items=_feed(settings, job_id, out))
        finally:
            signals.hold()
            if workers is not None:
                workers.stop(hurry=signals.hurry)
            if client is not None:
                client.close()
            if server is not None:
                server.stop()
