"""The ``extract`` setting, its flag, and the page message fields that carry the text."""

from __future__ import annotations

import pytest

from crawler.cli import _settings, build_parser
from crawler.config.settings import SettingError, Settings
from crawler.stages.messages import VERSION, FetchedPage


def test_extract_is_off_by_default_and_travels_with_the_job() -> None:
    s = Settings.from_env({})
    assert s.extract == "" and "extract" in s.job_settings()
    assert Settings.from_env({"CRAWLER_EXTRACT": "markdown"}).extract == "markdown"


@pytest.mark.parametrize("bad", ["html", "TEXT", " text"])
def test_a_bad_extract_value_is_one_line_naming_the_setting(bad: str) -> None:
    with pytest.raises(SettingError, match=r"^setting extract: must be text or markdown \(empty: off\), got ") as e:
        Settings.from_env({"CRAWLER_EXTRACT": bad})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("command", ["crawl", "submit"])
def test_the_extract_flag_sets_the_setting(command: str) -> None:
    extra = ["--out", "x"] if command == "crawl" else ["--store", "sqlite:///x.db"]
    args = build_parser().parse_args([command, "http://e.com/", "--extract", "markdown", *extra])
    assert _settings(args).extract == "markdown"
    args = build_parser().parse_args([command, "http://e.com/", "--extract", "pdf", *extra])
    with pytest.raises(SettingError, match="setting extract"):
        _settings(args)


def test_a_page_message_without_main_text_fields_still_reads() -> None:
    # What a worker that predates --extract sends: the same schema version, no main_* keys.
    old = {"v": VERSION, "url": "http://e.com/", "status": 200, "title": "T"}
    page = FetchedPage.from_json(old)
    assert page.main_text is None and page.main_format == ""
    assert "main_text" not in page.to_json()
    with_text = FetchedPage(url="http://e.com/", main_text="Hello", main_format="markdown", main_title="T",
                            main_author="A", main_date="2024-01-02", main_language="en")
    assert FetchedPage.from_json(with_text.to_json()) == with_text
