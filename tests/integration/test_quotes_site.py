"""The quotes test site (shaped like quotes.toscrape.com) serves what its model says, and
Scrapy itself, running the example Scrapy spiders on it, extracts exactly the model's records:
the oracle the crawler's own runs of the same spiders are compared with
(``tests/integration/test_scrapy_compat.py``).

``run_scrapy`` runs a spider with real Scrapy in a subprocess: loopback IP literals only (no DNS),
no proxy from the environment, tldextract kept off the network (Scrapy's cookie middleware would
fetch the public suffix list), items written as JSON lines."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crawler.testweb import TestWeb
from crawler.testweb.quotes import PASSWORD, USER, QuotesSite
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"

_RUN = """
import importlib, json, os, sys
from scrapy.crawler import CrawlerProcess
path, name, out, args = sys.argv[1:]
sys.path.insert(0, os.path.dirname(path))  # as scrapy runspider does: its pipelines import by name
module = importlib.import_module(os.path.basename(path)[:-3])
process = CrawlerProcess(settings={"FEEDS": {out: {"format": "jsonlines", "encoding": "utf-8"}},
                                   "LOG_LEVEL": "WARNING", "TELNETCONSOLE_ENABLED": False})
process.crawl(getattr(module, name), **json.loads(args))
process.start()
"""


def run_scrapy(file: Path, name: str, tmp_path: Path, **args: str) -> list[dict[str, Any]]:
    """The items Scrapy itself gets from spider ``name`` of ``file`` (its arguments ``args``, as
    ``-a``)."""
    out = tmp_path / f"scrapy-{name}.jsonl"
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS"] = ""  # the bundled snapshot, never the network
    res = subprocess.run([sys.executable, "-c", _RUN, str(file), name, str(out), json.dumps(args)],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def as_set(items: list[dict[str, Any]]) -> set[str]:
    """Items compared as a set: each as canonical JSON."""
    return {json.dumps(i, sort_keys=True, ensure_ascii=False) for i in items}


def quotes_web(make_web: Callable[..., TestWeb]) -> tuple[TestWeb, QuotesSite, str]:
    web = make_web(1, 1)
    site = QuotesSite()
    site.mount(web, 0)
    return web, site, web.origin(0)


def expected(site: QuotesSite, spider: str) -> list[dict[str, Any]]:
    """What each example spider (Scrapy's or ours) should extract, from the site's model."""
    authors = {a["name"]: a for a in site.author_records()}
    quotes = site.quotes()
    if spider == "quotes":
        return [{**q, **{k: v for k, v in authors[q["author"]].items() if k != "name"}} for q in quotes]
    if spider == "author":
        return list(authors.values())
    if spider == "tags":
        tagged = [{"tag": t, "text": q["text"]} for q in quotes for t in q["tags"]]
        return [*tagged, {"missing": "no-such-tag", "status": 404}]
    if spider == "quotes-api":  # through its pipeline: untagged quotes dropped, tags counted
        return [{**q, "tag_count": len(q["tags"])} for q in quotes if q["tags"]]
    if spider == "quotes-login":
        return [{"user": USER, **f} for f in site.favourites()]
    raise KeyError(spider)


# -- the site ------------------------------------------------------------------------------

def _get(opener: urllib.request.OpenerDirector, url: str, data: bytes | None = None) -> tuple[int, str]:
    try:
        with opener.open(url, data=data, timeout=10) as res:
            return res.status, res.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_site_serves_paged_quotes_authors_tags_and_a_json_api(make_web: Callable[..., TestWeb]) -> None:
    _, site, origin = quotes_web(make_web)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    assert len(site.quotes()) == 100 and len({q["text"] for q in site.quotes()}) == 100
    assert len({q["author"] for q in site.quotes()}) == 50
    status, first = _get(opener, origin + "/page/1/")
    assert status == 200 and first.count('<div class="quote"') == 10
    assert '<li class="next"><a href="/page/2/">' in first
    status, last = _get(opener, origin + "/page/10/")
    assert status == 200 and 'class="next"' not in last and 'class="previous"' in last
    assert _get(opener, origin + "/page/11/")[0] == 404
    status, author = _get(opener, origin + "/author/Ada-Lovelace/")
    assert status == 200 and '<h3 class="author-title">Ada Lovelace</h3>' in author
    assert all(_get(opener, origin + p)[0] == 200 for p in site.tag_paths())
    pages = []
    n = 1
    while True:
        status, body = _get(opener, f"{origin}/api/quotes?page={n}")
        assert status == 200
        doc = json.loads(body)
        pages.append(doc)
        if not doc["has_next"]:
            break
        n += 1
    assert [d["page"] for d in pages] == list(range(1, 11))
    assert [q["text"] for d in pages for q in d["quotes"]] == [q["text"] for q in site.quotes()]
    assert _get(opener, origin + "/api/quotes?page=zero")[0] == 400


def test_the_login_needs_the_forms_token_and_the_right_password(make_web: Callable[..., TestWeb]) -> None:
    _, site, origin = quotes_web(make_web)
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPCookieProcessor(jar))
    assert "/login" in _get(opener, origin + "/favourites/")[1]  # redirected to the form

    def login(password: str, token: str | None) -> str:
        form = {"username": USER, "password": password}
        if token is not None:
            form["csrf_token"] = token
        return _get(opener, origin + "/login", urllib.parse.urlencode(form).encode())[1]

    def token() -> str:
        found = re.search(r'name="csrf_token" value="([0-9a-f]+)"', _get(opener, origin + "/login")[1])
        assert found
        return found.group(1)

    assert "Error while logging in" in login(PASSWORD, None)
    assert "Error while logging in" in login(PASSWORD, "forged")
    assert "Error while logging in" in login("wrong", token())
    used = token()
    assert "Error while logging in" not in login(PASSWORD, used)
    assert "Error while logging in" in login(PASSWORD, used)  # a token serves once
    assert (site.logins, site.refused_logins) == (1, 4)
    status, page = _get(opener, origin + "/favourites/")
    assert status == 200 and page.count('<li class="favourite">') == len(site.favourites()) > 0


SCRAPY_SPIDERS = [("scrapy_quotes.py", "QuotesSpider", "quotes"), ("scrapy_quotes.py", "AuthorSpider", "author"),
                  ("scrapy_quotes.py", "TagSpider", "tags"), ("scrapy_quotes_api.py", "QuotesApiSpider", "quotes-api"),
                  ("scrapy_quotes_login.py", "QuotesLoginSpider", "quotes-login")]


@pytest.mark.parametrize(("file", "cls", "name"), SCRAPY_SPIDERS)
def test_scrapy_itself_extracts_what_the_model_says(make_web: Callable[..., TestWeb], tmp_path: Path, file: str,
                                                   cls: str, name: str) -> None:
    pytest.importorskip("scrapy")
    _, site, origin = quotes_web(make_web)
    got = run_scrapy(EXAMPLES / file, cls, tmp_path, base=origin)
    assert len(got) == len(as_set(got))  # no item twice
    assert as_set(got) == as_set(expected(site, name))
