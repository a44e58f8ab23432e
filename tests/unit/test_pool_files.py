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


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(pool_files, "SHM_DIR", tmp_path)
    return tmp_path


def test_a_pool_file_maps_read_write(shm: Path) -> None:
    path = pool_files.shm_path("prefill-0")
    Path(path).write_bytes(bytes(64))
    data = pool_files.map_pool_file(path, 64)
    data[3] = 7
    del data
    assert Path(path).read_bytes()[3] == 7


@pytest.mark.parametrize("name", ["../victim", f"{pool_files.PREFIX}x/../../victim", "victim", "sub/distserve-kv-x"])
def test_paths_outside_the_pool_files_are_refused_and_untouched(shm: Path, name: str) -> None:
    victim = shm.parent / "victim"
    victim.write_bytes(bytes(64))
    (shm / "victim").write_bytes(bytes(64))
    with pytest.raises(ValueError, match="is not a"):
        pool_files.map_pool_file(f"{shm}/{name}", 64)
    assert victim.read_bytes() == bytes(64)


def test_a_symlink_named_like_a_pool_file_is_refused(shm: Path) -> None:
    victim = shm.parent / "victim"
    victim.write_bytes(bytes(64))
    link = Path(pool_files.shm_path("prefill-0"))
    link.symlink_to(victim)
    with pytest.raises(ValueError, match="cannot be opened"):
        pool_files.map_pool_file(str(link), 64)


def test_a_pool_file_of_the_wrong_size_is_refused(shm: Path) -> None:
    path = pool_files.shm_path("prefill-0")
    Path(path).write_bytes(bytes(32))
    with pytest.raises(ValueError, match="32 bytes"):
        pool_files.map_pool_file(path, 64)
