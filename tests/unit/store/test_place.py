import os
from pathlib import Path

import pytest

from crawler.store.place import StoreNotAllowed, place_dir, place_store


def test_unset_means_anywhere(tmp_path: Path) -> None:
    for url in ("sqlite:////etc/x.db", "sqlite:///rel.db", "postgresql://u@evil.example:5432/db"):
        assert place_store(url, "", ()) == url
    assert place_dir("/etc", "") == "/etc"


def test_sqlite_and_warc_resolve_under_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    assert place_store("sqlite:///jobs/a.db", str(root), ()) == f"sqlite:///{root}/jobs/a.db"
    assert place_store(f"sqlite:///{root}/a.db", str(root), ()) == f"sqlite:///{root}/a.db"
    assert place_dir("warc", str(root)) == f"{root}/warc"
    (root / "out").symlink_to(tmp_path)  # a link inside the root pointing out of it
    for bad in ("sqlite:////etc/x.db", "sqlite:///../x.db", f"sqlite:///{root}/../x.db", "sqlite:///out/x.db"):
        with pytest.raises(StoreNotAllowed, match="outside this worker's store root"):
            place_store(bad, str(root), ())
    with pytest.raises(StoreNotAllowed):
        place_dir("/tmp", str(root))
    assert not os.path.exists(tmp_path / "x.db")


def test_postgres_hosts_must_be_allowed() -> None:
    hosts = ("postgres", "10.0.0.5")
    assert place_store("postgresql://crawler@postgres:5432/crawl", "/data", hosts)
    assert place_store("postgresql://crawler@10.0.0.5/crawl", "", hosts)
    for bad in ("postgresql://u@evil:5432/db", "postgresql://u:pw@postgres,evil:5433/db",
                "postgresql://u@postgres/db?host=evil", "postgresql://u@postgres/db?hostaddr=169.254.169.254",
                "postgres://u@[::1]:5432/db"):
        with pytest.raises(StoreNotAllowed, match="CRAWLER_STORE_HOSTS") as info:
            place_store(bad, "", hosts)
        assert ":pw@" not in str(info.value)
