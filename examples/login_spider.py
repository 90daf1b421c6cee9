"""A spider behind a form login: it signs in once per session (the crawler shares the cookies
with every worker and logs in again when the site ends the session), then turns member pages
into records.

The user name and password are secrets each worker reads from its own environment (or its
secrets file), never from the job:

    export CRAWLER_SECRET_LOGIN_USER=reader CRAWLER_SECRET_LOGIN_PASSWORD=...
    crawler crawl http://site.example/members/ --spider examples/login_spider.py:LoginSpider \\
        --spider-arg login_url=http://site.example/login --out members
    crawler export members --items --format jsonl
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crawler.spiders import LoginFailed, Page, Session, Spider


class LoginSpider(Spider):
    name = "login-example"
    version = "1"
    # Set per job with --spider-arg login_url=...: where the form is, and where the site sends
    # a request whose session has ended (the default session_ended looks for that redirect).
    login_url = ""

    def login(self, session: Session) -> None:
        form = session.get(self.login_url)
        page = session.submit_form(form, {"username": session.secret("LOGIN_USER"),
                                          "password": session.secret("LOGIN_PASSWORD")}, form_css="form#login")
        if page.css("form#login") or page.status != 200:
            raise LoginFailed(f"still on the login form after signing in ({page.status} {page.final_url})")

    def parse(self, page: Page) -> Iterator[Any]:
        record = page.css("div.record")
        if record:
            yield {
                "id": record.attrib.get("data-id"),
                "title": record.css("h1::text").get(),
                "owner": record.css("dd.owner::text").get(),
                "amount": float(record.css("dd.amount::text").get("nan")),
                "url": page.url,
            }
