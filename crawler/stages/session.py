"""A job's session as the fetch stage uses it: log in once for all workers, send the session's
cookies, default headers and credentials with every hop, share the cookies pages set, and notice
when the session has ended so its pages are fetched again after a new login.

One worker logs in while holding the job's login lock; the others wait for it (at most
``login_wait``) and then read the cookies it stored. Logins per job are bounded (``max_logins``),
so a wrong password cannot loop: past the bound, pages are stored as they came.

The cookies sit in Redis sealed with the workers' key (``crawler.config.secretbox``). A worker without
one refuses a job that keeps a session (``NoSessionKey``: the job is stopped with the reason
before this worker fetches anything), rather than keep cookies in the clear; a cookie that does
not open with its key (sealed under another, or changed in Redis) is dropped, counted
``session_undecryptable`` and logged in one line, and a spider's session is then as good as
absent: it logs in again.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from crawler.config.credentials import AuthRule, MissingSecret, Secrets, parse_auth, parse_header
from crawler.config.secretbox import require_box
from crawler.fetch.client import FetchConfig, Fetcher, FetchResult
from crawler.fetch.jar import CookieJar
from crawler.frontier import Entry
from crawler.spiders.base import Spider
from crawler.spiders.page import Page
from crawler.spiders.run import overrides
from crawler.spiders.session import LoginFailed, Requester, Session, SessionHops
from crawler.spiders.sessionstate import SessionState
from crawler.stages.context import Context
from crawler.state.jobconf import Job

log = logging.getLogger(__name__)

Run = Callable[[Coroutine[Any, Any, Any]], Any]
POLL = 0.05  # seconds between looks at a login another worker is running
REFETCH_AFTER = 0.1  # seconds before a page whose session ended is fetched again


def logs_in(spider: Spider | None) -> bool:
    return spider is not None and overrides(spider, "login")


def spider_headers(spider: Spider | None, urls: Sequence[str],
                   counts: Counter[str]) -> dict[str, list[tuple[str, str]]]:
    """The spider's own request headers per URL (its ``headers`` hook; with or without a session).
    A hook that raises is counted ``spider_error`` and that URL is fetched without them."""
    if spider is None or not overrides(spider, "headers"):
        return {}
    out: dict[str, list[tuple[str, str]]] = {}
    for url in urls:
        try:
            out[url] = [(str(k), str(v)) for k, v in spider.headers(url).items()]
        except Exception:
            counts["spider_error"] += 1
            counts["spider_error:headers"] += 1
            log.exception("spider %s: headers raised on %s", type(spider).__qualname__, url)
    return out


def uses_session(job: Job, spider: Spider | None) -> bool:
    s = job.settings
    return bool(s.cookies or s.auth or s.session_headers or logs_in(spider))


class JobSession:
    """One fetch task's view of the job's session."""

    def __init__(self, job: Job, spider: Spider | None, state: SessionState, generation: int, hops: SessionHops,
                 exhausted: bool, counts: Counter[str]) -> None:
        self.job = job
        self.spider = spider
        self.state = state
        self.generation = generation
        self.hops = hops
        self.exhausted = exhausted  # no live session and no login attempt left
        self.counts = counts

    def first_hop_headers(self, urls: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """The spider's own headers per URL (its ``headers`` hook)."""
        return spider_headers(self.spider, urls, self.counts)

    def ended(self, entry: Entry, result: FetchResult) -> bool:
        """Did this response come back because the session is over? (the spider's
        ``session_ended``; only asked of jobs whose spider logs in)."""
        spider = self.spider
        if spider is None or result.status is None or not logs_in(spider):
            return False
        page = Page(entry.url, final_url=result.final_url, status=result.status, headers=result.headers,
                    body=result.body, error=result.error, depth=entry.depth, referrer=entry.referrer)
        try:
            return bool(spider.session_ended(page))
        except Exception:
            self.counts["spider_error"] += 1
            self.counts["spider_error:session_ended"] += 1
            log.exception("spider %s: session_ended raised on %s", type(spider).__qualname__, entry.url)
            return False

    def refetch(self, entry: Entry, max_attempts: int) -> bool:
        """A page saw the session end: end it (once, however many pages saw it) and say whether
        to fetch the page again after the next login (False: store it as it came, counted)."""
        if self.state.end(self.generation):
            self.counts["session_ended"] += 1
            log.info("job %s: session %d ended", self.job.id, self.generation)
        # A page that ends every session (a 403 whatever the cookies) is kept after the job's
        # attempts, as any failing page is.
        if self.exhausted or entry.attempts + 1 >= max_attempts:
            self.counts["session_ended_stored"] += 1
            return False
        self.counts["session_refetch"] += 1
        return True

    def share(self, now: float) -> None:
        """Share the cookies this task's responses have set so far: before a host they came
        from may go again, its next request (another task's) must find them."""
        dropped = self.state.save(self.generation, self.hops.changed, now)
        self.hops.changed.clear()
        if dropped > 0:
            self.counts["cookies_dropped"] += dropped

    def finish(self, now: float) -> None:
        """Share the cookies this task's responses set."""
        self.share(now)
        self.counts["cookies_dropped"] += self.hops.jar.overflow


def open_session(ctx: Context, job: Job, spider: Spider | None, fetcher: Fetcher, config: FetchConfig,
                 run: Run) -> JobSession | None:
    """The job's session for one fetch task (None for a job without one), logged in first if the
    spider logs in and no session is live. NoSessionKey, before anything is fetched, if this
    worker has no key to seal the session's cookies with."""
    if not uses_session(job, spider):
        return None
    s = job.settings
    counts: Counter[str] = Counter()
    state = SessionState(ctx.redis, job.id, box=require_box())
    secrets = Secrets()
    auth = _usable_auth(job, secrets, counts)
    defaults = [parse_header(h) for h in s.session_headers]
    status = state.status()
    generation, jar = state.jar()
    unreadable = state.unreadable
    if unreadable and logs_in(spider) and status.live:
        state.end(generation)  # cookies this worker cannot open: as good as no session
        status = state.status()
    if logs_in(spider) and not status.live:
        assert spider is not None
        _ensure_login(ctx, job, spider, state, fetcher, config, run, secrets, counts)
        status = state.status()
        generation, jar = state.jar()
        unreadable += state.unreadable
    if unreadable:
        counts["session_undecryptable"] += unreadable
        log.error("job %s: %d session cookie(s) did not decrypt with this worker's key (sealed under "
                  "another key, or changed in Redis): dropped", job.id, unreadable)
    exhausted = logs_in(spider) and not status.live and status.attempts >= s.max_logins
    return JobSession(job, spider, state, generation, SessionHops(jar, secrets, auth, defaults), exhausted, counts)


def _usable_auth(job: Job, secrets: Secrets, counts: Counter[str]) -> list[AuthRule]:
    """The job's credentials whose secrets this worker has; one it lacks is counted and logged
    (naming the secret), and that host is fetched without credentials."""
    usable = []
    for rule in (parse_auth(a) for a in job.settings.auth):
        try:
            secrets.get(rule.secret)
        except MissingSecret as exc:
            counts["secret_missing"] += 1
            log.error("job %s: no credentials for %s: %s", job.id, rule.host, exc)
            continue
        usable.append(rule)
    return usable


def _ensure_login(ctx: Context, job: Job, spider: Spider, state: SessionState, fetcher: Fetcher,
                  config: FetchConfig, run: Run, secrets: Secrets, counts: Counter[str]) -> None:
    s = job.settings
    # Not past half the lease: this task's URLs must not be handed to another fetch meanwhile.
    # Pages fetched without a session after the wait come back as ended and are fetched again.
    deadline = time.monotonic() + min(s.login_wait, s.lease_timeout / 2)
    while True:
        status = state.status()
        if status.live or status.attempts >= s.max_logins:
            return
        token = state.lock(s.login_wait)
        if token is not None:
            try:
                status = state.status()  # another worker may have logged in just before
                if status.live or status.attempts >= s.max_logins:
                    return
                if state.attempt() < 0:
                    return  # the job has ended meanwhile
                jar = _login(ctx, job, spider, fetcher, config, run, secrets, counts)
                if jar is not None:
                    generation = state.live(token, jar)
                    if generation == -2:
                        counts["login_failed:job_ended"] += 1
                    elif generation < 0:
                        counts["login_failed:lock_lapsed"] += 1
                    else:
                        counts["logins"] += 1
                        log.info("job %s: logged in (session %d, %d cookies)", job.id, generation, len(jar))
            finally:
                state.unlock(token)
            return
        if time.monotonic() > deadline:
            counts["login_wait_timeout"] += 1
            return
        if not counts["login_waits"]:
            counts["login_waits"] += 1  # tasks that waited for another worker's login
        time.sleep(POLL)


def _login(ctx: Context, job: Job, spider: Spider, fetcher: Fetcher, config: FetchConfig, run: Run,
           secrets: Secrets, counts: Counter[str]) -> CookieJar | None:
    """Run the spider's login hook; the jar it filled, or None (counted, logged) if it failed."""
    if not hasattr(fetcher, "request"):
        counts["login_failed:no_client"] += 1
        log.error("job %s: this worker's fetcher cannot log in", job.id)
        return None
    s = job.settings
    requester: Requester = fetcher  # type: ignore[assignment]  # checked just above
    hops = SessionHops(CookieJar(), secrets, _usable_auth(job, secrets, Counter()),
                       [parse_header(h) for h in s.session_headers])
    session = Session(requester, config, run, hops, ctx.politeness.hop_check(job, fetcher, config, {}))
    try:
        spider.login(session)
    except LoginFailed as exc:
        counts[f"login_failed:{exc.reason}"] += 1
        log.warning("job %s: login failed (%s): %s", job.id, exc.reason, exc)
        return None
    except MissingSecret as exc:
        counts["login_failed:secret"] += 1
        log.error("job %s: login failed: %s", job.id, exc)
        return None
    except Exception:
        counts["spider_error"] += 1
        counts["spider_error:login"] += 1
        counts["login_failed:error"] += 1
        log.exception("spider %s: login raised", type(spider).__qualname__)
        return None
    return hops.jar
