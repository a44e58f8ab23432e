"""Pool files: named per instance in this user's pool directory; a supervisor removes those a killed worker
left; kvxfer maps nothing outside the directory, through no link, in no directory others can write."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from services.common import pool_files


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(pool_files, "SHM_DIR", tmp_path)
    return tmp_path


def test_removes_only_the_dead_instances_files(shm: Path) -> None:
    dead = [pool_files.shm_path("decode-cpu1-ab12") for _ in range(2)]
    alive = pool_files.shm_path("decode-cpu1-ab123")  # another instance whose id extends the dead one's
    for path in (*dead, alive):
        Path(path).write_bytes(b"kv")
    assert sorted(pool_files.remove_pool_files("decode-cpu1-ab12")) == sorted(dead)
    assert [p.name for p in pool_files.pool_dir().iterdir()] == [Path(alive).name]


def test_pool_files_live_in_a_private_directory_and_are_made_0600(shm: Path) -> None:
    path = pool_files.shm_path("prefill-0")
    assert Path(path).parent == shm / f"distserve-{os.geteuid()}"
    assert stat.S_IMODE(Path(path).parent.stat().st_mode) == 0o700
    pool_files.create_pool_file(path)
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600


def test_a_pool_file_maps_read_write(shm: Path) -> None:
    path = pool_files.shm_path("prefill-0")
    Path(path).write_bytes(bytes(64))
    data = pool_files.map_pool_file(path, 64)
    data[3] = 7
    del data
    assert Path(path).read_bytes()[3] == 7


@pytest.mark.parametrize("name", ["../victim", f"{pool_files.PREFIX}x/../../victim", "victim", "sub/distserve-kv-x",
                                  f"../{pool_files.PREFIX}victim", f"./{pool_files.PREFIX}victim"])
def test_paths_outside_the_pool_directory_are_refused_and_untouched(shm: Path, name: str) -> None:
    pool_dir = Path(pool_files.shm_path("x")).parent
    victims = [shm / "victim", pool_dir / "victim", shm / f"{pool_files.PREFIX}victim"]
    for victim in victims:
        victim.write_bytes(bytes(64))
    with pytest.raises(ValueError, match="is not a"):
        pool_files.map_pool_file(f"{pool_dir}/{name}", 64)
    assert [v.read_bytes() for v in victims] == [bytes(64)] * 3


def test_a_symlink_named_like_a_pool_file_is_refused(shm: Path) -> None:
    victim = shm / "victim"
    victim.write_bytes(bytes(64))
    link = Path(pool_files.shm_path("prefill-0"))
    link.symlink_to(victim)
    with pytest.raises(ValueError, match="cannot be opened"):
        pool_files.map_pool_file(str(link), 64)
    assert victim.read_bytes() == bytes(64)


def test_a_pool_directory_that_is_a_symlink_or_open_to_others_is_refused(shm: Path) -> None:
    elsewhere = shm / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    victim = elsewhere / f"{pool_files.PREFIX}prefill-0-00000000"
    victim.write_bytes(bytes(64))
    pool_files.pool_dir().symlink_to(elsewhere)
    with pytest.raises(ValueError, match="cannot be opened"):
        pool_files.map_pool_file(str(pool_files.pool_dir() / victim.name), 64)
    assert victim.read_bytes() == bytes(64)
    pool_files.pool_dir().unlink()
    path = pool_files.shm_path("prefill-0")
    Path(path).write_bytes(bytes(64))
    pool_files.pool_dir().chmod(0o777)
    with pytest.raises(ValueError, match="mode 0700"):
        pool_files.map_pool_file(path, 64)


def test_a_pool_file_of_the_wrong_size_is_refused(shm: Path) -> None:
    path = pool_files.shm_path("prefill-0")
    Path(path).write_bytes(bytes(32))
    with pytest.raises(ValueError, match="32 bytes"):
        pool_files.map_pool_file(path, 64)
