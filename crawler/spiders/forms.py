"""HTML forms: finding one on a page, reading its fields as a browser would submit them, and the
request that submits it (Scrapy's ``FormRequest.from_response``), or a plain form request.

``page.form_request(formdata={...})`` reads the form (hidden inputs such as CSRF tokens, text
fields, textareas, selects, the checked checkboxes and radios), lets ``formdata`` replace or add
fields, adds the first submit button (or the one ``clickdata`` picks) unless ``dont_click``, and
builds a ``Request`` to the form's action resolved against the page: a GET with the fields in the
query, or a POST with them urlencoded in the body (``Content-Type:
application/x-www-form-urlencoded``). ``Session.submit_form`` (a spider's ``login`` hook) reads
forms with the same ``form_values``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

from parsel import Selector

from crawler.spiders.request import Request, request

if TYPE_CHECKING:
    from crawler.spiders.page import Page

FORM_TYPE = "application/x-www-form-urlencoded"
# Inputs a browser never submits as a field (buttons are added apart, when clicked).
_NOT_FIELDS = frozenset({"submit", "image", "reset", "button", "file"})
FormData = Mapping[str, Any] | Sequence[tuple[str, Any]]


class FormNotFound(ValueError):
    """The page has no form the arguments describe (Scrapy raises ``ValueError`` too)."""


def _css_to_xpath(css: str) -> str:
    from cssselect import HTMLTranslator

    return str(HTMLTranslator().css_to_xpath(css))


def find_form(root: Selector, *, formname: str | None = None, formid: str | None = None,
              formnumber: int = 0, formxpath: str | None = None, formcss: str | None = None) -> Selector:
    """The form chosen as Scrapy chooses it: by ``name``, else ``id``, else the form holding
    (or being) the first node ``formxpath``/``formcss`` selects, else the ``formnumber``-th."""
    forms = root.xpath("//form")
    if not forms:
        raise FormNotFound("no <form> on the page")
    if formname is not None:
        got = root.xpath("//form[@name=$name]", name=formname)
        if got:
            return got[0]
    if formid is not None:
        got = root.xpath("//form[@id=$id]", id=formid)
        if got:
            return got[0]
    query = formxpath if formxpath is not None else _css_to_xpath(formcss) if formcss is not None else None
    if query is not None:
        for node in root.xpath(query):
            form = node.xpath("ancestor-or-self::form[1]")
            if form:
                return form[0]
        raise FormNotFound(f"no <form> matches {query!r}")
    if formname is not None or formid is not None:
        raise FormNotFound(f"no <form> named {formname!r}" if formname is not None else f"no <form> with id {formid!r}")
    if not 0 <= formnumber < len(forms):
        raise FormNotFound(f"form number {formnumber} not found (the page has {len(forms)})")
    return forms[formnumber]


def _select_values(el: Selector) -> list[str]:
    options = el.xpath(".//option")
    chosen = el.xpath(".//option[@selected]")
    if "multiple" in el.attrib:
        return [_option_value(o) for o in chosen]
    pick = chosen[0] if chosen else options[0] if options else None
    return [_option_value(pick)] if pick is not None else []


def _option_value(opt: Selector) -> str:
    value = opt.attrib.get("value")
    return value if value is not None else " ".join("".join(opt.xpath(".//text()").getall()).split())


def form_values(form: Selector) -> list[tuple[str, str]]:
    """A form's successful controls with their current values, in document order: named, not
    disabled; text-like inputs (hidden ones included), textareas, selects (their selected
    options, else the first), checked checkboxes and radios (``on`` without a value). Buttons
    and file inputs are not fields."""
    out: list[tuple[str, str]] = []
    for el in form.xpath(".//input|.//textarea|.//select"):
        name = el.attrib.get("name")
        if not name or "disabled" in el.attrib:
            continue
        tag = el.root.tag
        if tag == "textarea":
            out.append((name, "".join(el.xpath("text()").getall())))
        elif tag == "select":
            out += [(name, v) for v in _select_values(el)]
        else:
            kind = el.attrib.get("type", "text").strip().lower()
            if kind in _NOT_FIELDS:
                continue
            if kind in ("checkbox", "radio") and "checked" not in el.attrib:
                continue
            out.append((name, el.attrib.get("value", "on" if kind in ("checkbox", "radio") else "")))
    return out


def clicked(form: Selector, clickdata: Mapping[str, Any] | None = None) -> tuple[str, str] | None:
    """The (name, value) of the submit button a click sends: the first, or the one whose
    attributes match ``clickdata`` (``nr``: its index among the form's buttons). None when the
    form has no named button; FormNotFound when ``clickdata`` matches none."""
    found = form.xpath('.//input[translate(@type,"SUBMITAGE","submitage")="submit" or '
                       'translate(@type,"SUBMITAGE","submitage")="image"]'
                       '|.//button[not(@type) or translate(@type,"SUBMIT","submit")="submit"]')
    buttons = [b for b in found if "disabled" not in b.attrib]
    if not buttons:
        return None
    if not clickdata:
        pick = buttons[0]
    else:
        want = dict(clickdata)
        nr = want.pop("nr", None)
        match = [b for b in buttons if all(b.attrib.get(k) == str(v) for k, v in want.items())]
        if nr is not None:
            match = [match[int(nr)]] if 0 <= int(nr) < len(match) else []
        if not match:
            raise FormNotFound(f"no submit button matches {dict(clickdata)!r}")
        pick = match[0]
    name = pick.attrib.get("name")
    return (name, pick.attrib.get("value", "")) if name else None


def _data_pairs(formdata: FormData | None) -> list[tuple[str, str]]:
    """``formdata`` as pairs; a list or tuple value gives the field once per element."""
    if not formdata:
        return []
    items: Iterable[tuple[str, Any]] = formdata.items() if isinstance(formdata, Mapping) else formdata
    out: list[tuple[str, str]] = []
    for k, v in items:
        if v is None:
            continue
        values = v if isinstance(v, (list, tuple)) else [v]
        out += [(str(k), x if isinstance(x, str) else str(x)) for x in values]
    return out


def merge(fields: Sequence[tuple[str, str]], formdata: FormData | None,
          click: tuple[str, str] | None = None) -> list[tuple[str, str]]:
    """The fields to send: the form's own, minus those ``formdata`` names, then the clicked
    button (unless ``formdata`` names it), then ``formdata``."""
    data = _data_pairs(formdata)
    given = {k for k, _ in data}
    out = [(k, v) for k, v in fields if k not in given]
    if click is not None and click[0] not in given:
        out.append(click)
    return out + data


def encode(method: str, url: str, pairs: Sequence[tuple[str, str]],
           headers: Mapping[str, str] | None = None) -> tuple[str, dict[str, str], bytes]:
    """(url, headers, body) of a form sent with ``method``: a GET's fields go in the query (after
    any the URL has, as Scrapy does), another method's in an urlencoded body."""
    query = urlencode(list(pairs), doseq=True)
    out_headers = dict(headers or {})
    if method == "GET":
        if query:
            parts = urlsplit(url)
            url = urlunsplit(parts._replace(query=f"{parts.query}&{query}" if parts.query else query, fragment=""))
        return url, out_headers, b""
    if not any(k.lower() == "content-type" for k in out_headers):
        out_headers["Content-Type"] = FORM_TYPE
    return url, out_headers, query.encode()


def from_page(page: Page, formdata: FormData | None = None, *, formname: str | None = None,
              formid: str | None = None, formnumber: int = 0, formxpath: str | None = None,
              formcss: str | None = None, clickdata: Mapping[str, Any] | None = None, dont_click: bool = False,
              method: str | None = None, callback: Any = None, **kwargs: Any) -> Request:
    """The request that submits a form of ``page`` (see the module's docstring);
    ``FormNotFound`` when there is no such form. ``method`` overrides the form's; other keyword
    arguments (``cb_kwargs``, ``meta``, ``headers``, ``priority``, ``dont_filter``, ``errback``)
    are the Request's."""
    form = find_form(page.selector, formname=formname, formid=formid, formnumber=formnumber,
                     formxpath=formxpath, formcss=formcss)
    click = None if dont_click else clicked(form, clickdata)
    pairs = merge(form_values(form), formdata, click)
    action = form.attrib.get("action")
    url = page.final_url if action is None else urljoin(page.base_url, action.strip())
    verb = (method or form.attrib.get("method") or "GET").strip().upper()
    if verb not in ("GET", "POST"):
        verb = "GET"  # what a browser does with a method it does not know (dialog too)
    return _build(url, verb, pairs, callback, kwargs)


def form_request(url: str, formdata: FormData | None = None, *, method: str = "POST", callback: Any = None,
                 **kwargs: Any) -> Request:
    """A request sending ``formdata`` as a form would: POST (default) with an urlencoded body, or
    GET with it in the query (Scrapy's ``FormRequest(url, formdata=...)``)."""
    return _build(url, (method or "POST").upper(), _data_pairs(formdata), callback, kwargs)


def _build(url: str, method: str, pairs: Sequence[tuple[str, str]], callback: Any, kwargs: dict[str, Any]) -> Request:
    url, headers, body = encode(method, url, pairs, kwargs.pop("headers", None))
    unknown = set(kwargs) - {"cb_kwargs", "meta", "priority", "dont_filter", "errback"}
    if unknown:
        raise TypeError(f"form_request() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    return request(url, callback, method=method, headers=headers, body=body, **kwargs)
