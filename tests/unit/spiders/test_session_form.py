"""Form filling as a browser does it (Session.submit_form's values)."""

from __future__ import annotations

from crawler.spiders.page import Page
from crawler.spiders.session import form_values

FORM = b"""<html><body>
<form id=search action="/s"><input name=q value="first form"></form>
<form id=login action="/login" method=post>
  <input type=hidden name=csrf value="tok123">
  <input name=username>
  <input type=password name=password value="">
  <input type=checkbox name=remember value=yes>
  <input type=checkbox name=terms checked>
  <input type=radio name=lang value=en><input type=radio name=lang value=de checked>
  <select name=region><option value=eu>Europe</option><option value=us selected>US</option></select>
  <select name=empty></select>
  <textarea name=note>hello</textarea>
  <input name=off value=x disabled>
  <input type=submit name=go value=Go><button name=b>b</button>
</form></body></html>"""


def test_successful_controls_and_their_values() -> None:
    page = Page("http://127.0.1.1/login", body=FORM, headers=[("Content-Type", "text/html")])
    [form] = page.css("form#login")
    assert form_values(form) == [("csrf", "tok123"), ("username", ""), ("password", ""), ("terms", "on"),
                                 ("lang", "de"), ("region", "us"), ("note", "hello")]
    assert form_values(page.css("form")[0]) == [("q", "first form")]
