"""Forms through real workers: a spider fills a search form (GET, and POST with a CSRF token) and
logs in through a form with a CSRF token; the login's cookie lands in the job's session, so the
pages after it are a signed-in reader's."""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis

from crawler import jobs
from crawler.config.settings import Settings
from crawler.testweb import TestWeb
from crawler.testweb.quotes import QuotesSite
from tests.conftest import Workers, stored_items, wait_done

SHARDS = "shard-0,shard-1,shard-2,shard-3"
FORMS = b"""<html><body>
<form id=by-get action="/search"><input type=hidden name=lang value=en>
  <input name=q><select name=sort><option value=new>New</option><option value=old selected>Old</option></select>
  <input type=submit name=go value=Find></form>
<form id=by-post action="/search" method=post><input type=hidden name=csrf value="t0k"><input name=q></form>
</body></html>"""


def _send(h: BaseHTTPRequestHandler, body: bytes) -> None:
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def _results(h: BaseHTTPRequestHandler) -> None:
    if h.command == "POST":
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0)).decode()
        if h.headers.get("Content-Type") != "application/x-www-form-urlencoded":
            raw = "bad content type"
    else:
        raw = urlsplit(h.path).query
    fields = json.dumps(sorted(parse_qsl(raw, keep_blank_values=True)))
    _send(h, f"<p id=method>{h.command}</p><p id=fields>{fields}</p>".replace('"', "&quot;").encode())


def _items(tmp_path: Path, job_id: str) -> list[dict[str, Any]]:
    return stored_items(f"sqlite:///{tmp_path}/c.db", job_id)


def test_a_spider_fills_a_get_and_a_post_search_form(make_web: Callable[..., TestWeb], workers: Workers,
                                                       r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 1)
    web.route(0, "/find", lambda h: _send(h, FORMS))
    web.route(0, "/search", _results, any_query=True)
    web.route(0, "/search", _results, method="POST")
    workers.start("w", SHARDS)
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db",
                                              spider="tests/spiders/form_spiders.py:SearchSpider"),
                         [web.origin(0) + "/find"])
    st = wait_done(r, job_id)
    assert st["status"] == jobs.DONE, st
    got = sorted(_items(tmp_path, job_id), key=lambda i: i["via"])
    assert got == [
        {"via": "get", "method": "GET",
         "fields": json.dumps([["go", "Find"], ["lang", "en"], ["q", "ada"], ["sort", "old"]])},
        {"via": "post", "method": "POST", "fields": json.dumps([["csrf", "t0k"], ["q", "grace hopper"]])},
    ]


def test_a_form_login_with_a_csrf_token_keeps_its_cookie_in_the_session(
        make_web: Callable[..., TestWeb], workers: Workers, r: redis.Redis, tmp_path: Path) -> None:
    web = make_web(1, 1)
    site = QuotesSite()
    site.mount(web, 0)
    workers.start("a", SHARDS)
    workers.start("b", SHARDS)  # whichever fetches the favourites uses the cookie the other may have got
    job_id = jobs.submit(r, Settings.from_env(store=f"sqlite:///{tmp_path}/c.db", cookies=True,
                                              spider="examples/quotes_login_spider.py:QuotesLoginSpider"),
                         [web.origin(0) + "/login"])
    st = wait_done(r, job_id)
    assert st["status"] == jobs.DONE, st
    assert (site.logins, site.refused_logins) == (1, 0)  # the form's token went back with the POST
    expected = [{"user": site.user, **f} for f in site.favourites()]
    assert sorted(_items(tmp_path, job_id), key=lambda i: i["text"]) == sorted(expected, key=lambda i: i["text"])
