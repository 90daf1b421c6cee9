"""page.form_request as Scrapy's FormRequest.from_response, and form_request for a plain form."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest

from crawler.spiders import Page, Spider, form_request
from crawler.spiders.forms import FORM_TYPE, FormNotFound

HTML = b"""<html><head><base href="http://127.0.1.1/app/"></head><body>
<form id=search name=find action="search"><input name=q value="old"><input type=hidden name=page value=1>
  <select name=sort multiple><option value=a selected>A</option><option selected>B  c</option></select>
  <button>Search</button></form>
<form id=login action=" /login?next=%2F " method=post>
  <input type=hidden name=csrf value="tok123">
  <input name=username><input type=password name=password>
  <input type=checkbox name=remember value=yes><input type=checkbox name=terms checked>
  <input type=radio name=lang value=en><input type=radio name=lang value=de checked>
  <select name=region><option value=eu>Europe</option><option value=us>US</option></select>
  <textarea name=note>hi there</textarea>
  <input name=off value=x disabled><input type=file name=upload>
  <input type=submit name=go value=Go><input type=submit name=alt value=Other>
  <button type=button name=js>js</button>
</form>
<form><div class=inner><input name=only value=1></div></form>
</body></html>"""


class S(Spider):
    def after(self, page: Page) -> None: ...


def _page() -> Page:
    return Page("http://127.0.1.1/app/start", body=HTML, headers=[("Content-Type", "text/html")])


def _fields(body: bytes) -> list[tuple[str, str]]:
    return parse_qsl(body.decode(), keep_blank_values=True)


def test_a_post_login_form_with_its_csrf_token() -> None:
    req = _page().form_request(formdata={"username": "ann", "password": "pw", "remember": ["yes", "also"]},
                               formid="login", callback=S().after, cb_kwargs={"k": 1})
    assert (req.method, req.url, req.callback, dict(req.cb_kwargs)) == (
        "POST", "http://127.0.1.1/login?next=%2F", "after", {"k": 1})
    assert req.headers["Content-Type"] == FORM_TYPE
    # The form's own fields in order (formdata's removed), the first button, then formdata.
    assert _fields(req.body) == [("csrf", "tok123"), ("terms", "on"), ("lang", "de"), ("region", "eu"),
                                 ("note", "hi there"), ("go", "Go"), ("username", "ann"), ("password", "pw"),
                                 ("remember", "yes"), ("remember", "also")]


def test_a_get_search_form_puts_its_fields_in_the_query() -> None:
    req = _page().form_request(formdata={"q": "shoes"}, formcss="input[name=q]")
    assert req.method == "GET" and req.body == b""
    # Resolved against <base href>; a multiple select sends each selected option (text as value).
    assert req.url == "http://127.0.1.1/app/search?page=1&sort=a&sort=B+c&q=shoes"
    assert _page().form_request(formname="find").url.startswith("http://127.0.1.1/app/search?q=old")


def test_choosing_the_form_and_the_button() -> None:
    page = _page()
    assert page.form_request(formnumber=2, dont_click=True).url == "http://127.0.1.1/app/start?only=1"
    assert page.form_request(formxpath="//div[@class='inner']").url == "http://127.0.1.1/app/start?only=1"
    alt = page.form_request(formid="login", clickdata={"name": "alt"})
    assert ("alt", "Other") in _fields(alt.body) and ("go", "Go") not in _fields(alt.body)
    assert ("alt", "Other") in _fields(page.form_request(formid="login", clickdata={"nr": 1}).body)
    assert not [k for k, _ in _fields(page.form_request(formid="login", dont_click=True).body) if k in ("go", "alt")]
    assert page.form_request(formid="login", method="GET").method == "GET"
    for bad in ({"formnumber": 7}, {"formcss": "form#nope"}, {"formid": "nope"}, {"formname": "nope"}):
        with pytest.raises(FormNotFound):
            page.form_request(**bad)  # type: ignore[arg-type]
    with pytest.raises(FormNotFound):
        page.form_request(formid="login", clickdata={"name": "nope"})
    with pytest.raises(ValueError):  # FormNotFound is a ValueError, as Scrapy's is
        Page("http://h/", body=b"<p>no form</p>", headers=[("Content-Type", "text/html")]).form_request()


def test_a_plain_form_request() -> None:
    post = form_request("http://127.0.1.1/api", {"a": "1", "b": ["2", "3"], "skip": None}, callback="done",
                        meta={"m": 1}, dont_filter=True)
    assert (post.method, post.body, post.callback, post.dont_filter) == ("POST", b"a=1&b=2&b=3", "done", True)
    assert post.headers == {"Content-Type": FORM_TYPE}
    get = form_request("http://127.0.1.1/api?x=0", {"a": "é"}, method="get")
    assert (get.method, get.url, get.body) == ("GET", "http://127.0.1.1/api?x=0&a=%C3%A9", b"")
    with pytest.raises(TypeError, match="nonsense"):
        form_request("http://127.0.1.1/", {}, nonsense=1)
