"""The console's auth and cross-site rules, as pure functions."""

from __future__ import annotations

import base64

import pytest

from crawler.errors import ConfigError
from crawler.web.auth import Auth, allowed_origins, check_listen, cross_site_refusal, is_loopback

JSON = {"content-type": "application/json"}


def test_credentials_from_the_environment() -> None:
    assert Auth.from_env({}) is None
    assert Auth.from_env({"CRAWLER_WEB_TOKEN": "t"}) == Auth(token="t")
    assert Auth.from_env({"CRAWLER_WEB_USER": "u", "CRAWLER_WEB_PASSWORD": "p"}) == Auth(user="u", password="p")
    with pytest.raises(ConfigError, match="set both CRAWLER_WEB_USER and CRAWLER_WEB_PASSWORD"):
        Auth.from_env({"CRAWLER_WEB_PASSWORD": "p"})


def test_authorization_headers() -> None:
    both = Auth(token="tok", user="u", password="p:q")
    basic = "Basic " + base64.b64encode(b"u:p:q").decode()
    assert both.allows("Bearer tok") and both.allows("bearer  tok ") and both.allows(basic)
    for wrong in ("", "Bearer", "Bearer tok2", "Token tok", "Basic " + base64.b64encode(b"u:p").decode(),
                  "Basic " + base64.b64encode(b"x:p:q").decode(), "Basic %%%",
                  "Basic " + base64.b64encode(b"\xff").decode()):
        assert not both.allows(wrong), wrong
    assert not Auth(token="tok").allows(basic)  # no user configured: basic never passes
    assert Auth(token="tok").scheme == "Bearer" and Auth(user="u", password="p").scheme == "Basic"


def test_listening_off_loopback_needs_credentials() -> None:
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
        check_listen([host], None)
    for host in ("0.0.0.0", "::", "10.0.0.5", "example.org", "127.0.0.1.example.org"):
        assert not is_loopback(host), host
        with pytest.raises(ConfigError, match=f"listens on {host}, not only on loopback"):
            check_listen(["127.0.0.1", host], None)
        check_listen([host], Auth(token="t"))


def test_cross_site_rules() -> None:
    own = ("http", "127.0.0.1:8089")
    assert cross_site_refusal("GET", {"origin": "http://evil"}, *own) == ""  # reads are guarded by auth only
    assert cross_site_refusal("POST", JSON, *own) == ""  # curl, scripts: no Origin
    assert cross_site_refusal("POST", {**JSON, "origin": "http://127.0.0.1:8089"}, *own) == ""
    assert cross_site_refusal("DELETE", {**JSON, "sec-fetch-site": "same-origin"}, *own) == ""
    assert cross_site_refusal("PATCH", {"content-type": "application/json; charset=utf-8"}, *own) == ""
    refused = [
        {"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"},
        {"content-type": "multipart/form-data; boundary=x"}, {},
        {**JSON, "origin": "http://127.0.0.1:8090"}, {**JSON, "origin": "https://127.0.0.1:8089"},
        {**JSON, "origin": "null"}, {**JSON, "sec-fetch-site": "cross-site"}, {**JSON, "sec-fetch-site": "same-site"},
    ]
    for headers in refused:
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            assert cross_site_refusal(method, headers, *own), (method, headers)


def test_a_console_behind_a_proxy_names_its_public_origin() -> None:
    allowed = allowed_origins({"CRAWLER_WEB_ORIGINS": "https://Console.example/, https://ops.example:8443"})
    assert allowed == {"https://console.example", "https://ops.example:8443"}
    headers = {**JSON, "origin": "https://console.example"}
    assert cross_site_refusal("POST", headers, "http", "console:8089", allowed) == ""
    assert cross_site_refusal("POST", headers, "http", "console:8089")
    assert cross_site_refusal("POST", {**JSON, "origin": "https://evil.example"}, "http", "console:8089", allowed)
