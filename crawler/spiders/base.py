"""The spider API: a class per site or job whose event-named hooks the stages call.

Every hook is optional; the base class's defaults crawl exactly as a job without a spider does.
Hooks run inside the stage that needs them, on whichever worker holds the page, so a spider
keeps no state it expects to see again on the next page: another process may get that page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from crawler.spiders.request import Follow as Follow  # the old name of a plain Request, kept importable here
from crawler.spiders.request import Request

if TYPE_CHECKING:
    from crawler.spiders.page import Page
    from crawler.spiders.session import Session

# What a callback, ``parse`` and ``on_error`` may yield: items (a dict, or a dataclass instance,
# stored as its fields) and requests (``Request``, ``page.follow(...)``; ``Follow(url)`` is the old
# name of a plain request). A request passes the same scope, pattern and ``allow`` checks as an
# extracted link.
Yielded = Mapping[str, Any] | Request | Any


class Spider:
    """Subclass this and override the hooks you need.

    Class attributes:
      ``name``: how ``crawler crawl --spider NAME`` finds it when installed (entry-point group
        ``crawler.spiders``); defaults to the class name.
      ``version``: recorded with the job; a worker whose copy has another version refuses the job
        instead of crawling with different code. Read from the source, never by running it: a
        literal string in the class body, else a digest of the spider's source file.
      ``follow_links``: True (default) follows the links the crawler extracts *and* those
        ``parse`` yields; False follows only those ``parse`` yields.
      ``start_urls``, ``allowed_domains``: used when ``crawl``/``submit`` are given no seeds or no
        ``--allow-domain``, as in Scrapy (``submit`` reads them from the source: literal lists).
      ``login_url``: where the login form lives; a page redirected there means the session ended.

    Spider arguments (``--spider-arg key=value``) arrive as keyword arguments of the constructor
    and, by default, become attributes, as in Scrapy. They travel in the job's settings, readable
    by anyone who can read Redis: never pass a secret this way (see ``Session.secret``).
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = ""
    follow_links: ClassVar[bool] = True
    start_urls: ClassVar[tuple[str, ...] | list[str]] = ()
    allowed_domains: ClassVar[tuple[str, ...] | list[str]] = ()
    login_url: ClassVar[str] = ""
    # Item pipelines, in order, before the job's ``item_pipelines``: classes or "module:Class"
    # strings (``crawler.spiders.pipelines``).
    pipelines: ClassVar[Sequence[type | str]] = ()

    def __init__(self, **kwargs: str) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)

    # --- start requests (``crawler.spiders.starts``) ---

    def start_requests(self) -> Iterable[Request | str] | AsyncIterator[Request | str]:
        """The requests the crawl starts with: a generator or an async generator of ``Request``
        objects or URLs, as long as you like (one worker at a time reads it, a batch at a time,
        while the job's queue has room: ``start_requests_backlog``). They pass the job's scope
        rules and ``allow``. The default yields ``start_urls``, which a job without seeds takes
        as its seeds; a spider that overrides it starts from what it yields (and any seeds given)."""
        return (Request(url) for url in self.start_urls)

    # --- scope and requests (fetch side) ---

    def allow(self, url: str) -> bool:
        """Follow ``url``? Asked for every link after the job's own scope rules; seeds are exempt.
        A refused link is counted ``links_denied_spider``."""
        return True

    def headers(self, url: str) -> Mapping[str, str]:
        """Extra request headers for ``url`` (first hop only; the session's cookies and
        credentials are added by the session, not here)."""
        return {}

    def render(self, url: str) -> bool | str | None:
        """Render ``url`` in a browser before parsing it (jobs with ``--render auto`` or
        ``always``)? None: let the job decide; True: render it; a CSS selector: render it and
        wait until the selector matches; False: do not."""
        return None

    # --- sessions (see crawler.spiders.session) ---

    def login(self, session: Session) -> None:
        """Log in, through ``session`` (its ``get``/``post``/``submit_form`` keep the cookies the
        site sets). Runs once per session on one worker while the others wait, and again when
        ``session_ended`` says so (at most ``max_logins`` times per job). Raise ``LoginFailed``
        when the site refuses; secrets come from ``session.secret(NAME)``, never from spider
        arguments. The base class does not log in."""

    def session_ended(self, page: Page) -> bool:
        """Did this page come back because the session is over? Default: a 401 or 403, or a
        redirect to ``login_url``. Such a page is fetched again after a new login, not stored."""
        if page.status in (401, 403):
            return True
        if self.login_url:
            login = self.login_url.split("#", 1)[0]
            return page.final_url != page.url and page.final_url.split("?", 1)[0] == login.split("?", 1)[0]
        return False

    # --- pages (parse side) ---

    def parse(self, page: Page) -> Iterable[Yielded]:
        """Items and requests from a response that answered 2xx (HTML, JSON, XML, text, binary)
        whose request names no other callback; a request's ``callback`` names another method of
        the spider, called as ``callback(page, **cb_kwargs)``. The default yields nothing: the
        page is stored and its extracted links followed as without a spider."""
        return ()

    def check_item(self, item: dict[str, Any], page: Page) -> dict[str, Any] | None:
        """Fix or drop an item before it is stored: return it (changed or not), or None to drop
        it (counted ``items_dropped``)."""
        return item

    def on_error(self, page: Page) -> Iterable[Yielded]:
        """Called instead of the callback for a page that failed (``page.error`` set: a 4xx/5xx
        that is not retried any more, a timeout, too large, a refused type...) whose request
        names no other ``errback``; ``page.status``, ``headers`` and ``body`` are the response's
        when the server answered. May yield items and requests too."""
        return ()
