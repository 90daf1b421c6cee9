import pytest

from crawler.config.redact import has_password, password_of, redact, redact_settings_json, strip_password


@pytest.mark.parametrize(("url", "shown", "kept"), [
    ("postgresql://crawler:s3cret@db:5432/crawl", "postgresql://crawler:***@db:5432/crawl",
     "postgresql://crawler@db:5432/crawl"),
    ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("postgres://u:p%40ss@h/db?sslmode=require", "postgres://u:***@h/db?sslmode=require",
     "postgres://u@h/db?sslmode=require"),
    ("postgresql://u@h/db?password=s3cret&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require",
     "postgresql://u@h/db?sslmode=require"),
    ("postgresql://u:s3cret@h/db?options=-c%20search_path%3Dx+y", "postgresql://u:***@h/db?options=-c%20search_path%3Dx+y",
     "postgresql://u@h/db?options=-c%20search_path%3Dx+y"),
])
def test_passwords_are_masked_for_output_and_stripped_for_storage(url: str, shown: str, kept: str) -> None:
    assert has_password(url)
    assert redact(url) == shown
    assert strip_password(url) == kept and not has_password(kept)
    assert password_of(url) in ("s3cret", "p@ss")


@pytest.mark.parametrize("url", ["sqlite:////data/crawl.db", "postgresql://crawler@db:5432/crawl",
                                 "redis://127.0.0.1:6379/0", "postgresql://db:5432/crawl", "", "http://a/b:c@d"])
def test_urls_without_passwords_are_untouched(url: str) -> None:
    assert redact(url) == url and strip_password(url) == url and not has_password(url)


def test_passwords_inside_text_and_settings_json_are_masked() -> None:
    text = "cannot open store 'postgresql://u:hunter2@db/x' (and redis://:pw2@r:6379/0 too)"
    assert redact(text) == "cannot open store 'postgresql://u:***@db/x' (and redis://:***@r:6379/0 too)"
    raw = '{"store": "postgresql://u:hunter2@db/x", "shards": 2, "allow_domains": ["a.org"]}'
    assert "hunter2" not in redact_settings_json(raw)
    assert '"shards": 2' in redact_settings_json(raw)


def test_request_and_response_headers_lose_credentials_and_cookie_values() -> None:
    from crawler.config.redact import redact_request_headers, redact_response_headers

    sent = [("User-Agent", "ua"), ("Cookie", "sid=s3cret"), ("authorization", "Basic dTpw"),
            ("Proxy-Authorization", "Bearer t")]
    assert redact_request_headers(sent) == [("User-Agent", "ua"), ("Cookie", "***"), ("authorization", "***"),
                                            ("Proxy-Authorization", "***")]
    got = [("Content-Type", "text/html"), ("Set-Cookie", "sid=s3cret; Path=/; HttpOnly"), ("set-cookie", "x=1")]
    assert redact_response_headers(got) == [("Content-Type", "text/html"), ("Set-Cookie", "sid=***; Path=/; HttpOnly"),
                                            ("set-cookie", "x=***")]
