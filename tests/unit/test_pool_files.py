"""Pool files: named per instance; a supervisor removes those a killed worker left."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common import pool_files


def test_removes_only_the_dead_instances_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_files, "SHM_DIR", tmp_path)
    dead = [pool_files.shm_path("decode-cpu1-ab12") for _ in range(2)]
    alive = pool_files.shm_path("decode-cpu1-ab123")  # another instance whose id extends the dead one's
    for path in (*dead, alive):
        Path(path).write_bytes(b"kv")
    assert sorted(pool_files.remove_pool_files("decode-cpu1-ab12")) == sorted(dead)
    assert [p.name for p in tmp_path.iterdir()] == [Path(alive).name]
