"""The private PostgreSQL the tests start when CRAWLER_TEST_POSTGRES names none."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from crawler.local.pg_server import PgServer, PgServerError, find_pg_bin


def test_a_stopped_server_starts_again_with_its_data_on_its_port() -> None:
    with PgServer() as server:
        with psycopg.connect(server.admin_url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (7)")
        server.stop()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.admin_url, connect_timeout=2)
        port = server.port
        server.start()
        assert server.port == port
        with psycopg.connect(server.admin_url) as conn:
            assert conn.execute("SELECT x FROM kept").fetchall() == [(7,)]
        workdir = server.dir
    assert not workdir.exists()


def test_no_binaries_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CRAWLER_PG_BIN", str(tmp_path))
    with pytest.raises(PgServerError, match=r"no PostgreSQL initdb and postgres found in CRAWLER_PG_BIN="):
        find_pg_bin()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root needs another account to run postgres as")
def test_root_without_the_account_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLER_PG_USER", "no-such-user-here")
    with pytest.raises(PgServerError, match=r"refuses to run as root.*useradd --system no-such-user-here"):
        PgServer()
