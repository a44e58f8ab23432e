"""The prefix that runs a stack's process on its second host: that host's namespace, /dev/shm and environment."""

from __future__ import annotations

import subprocess

import pytest

from services.launcher.remote_host import remote_entry


def test_the_prefix_names_namespace_shared_memory_and_environment() -> None:
    assert remote_entry("", "", {}) == []
    assert remote_entry("nsb", "", {"A": "1"}) == ["ip", "netns", "exec", "nsb", "env", "A=1"]
    entry = remote_entry("nsb", "/tmp/shm-b", {"A": "x y"})
    assert entry[:4] == ["ip", "netns", "exec", "nsb"] and entry[-1] == "/tmp/shm-b"
    assert "'A=x y'" in entry[-2]


def test_a_process_of_the_second_host_sees_its_own_shm_folder(tmp_path) -> None:
    """Without a namespace (the mount namespace alone): a file made in its /dev/shm lands in the folder."""
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"mount namespaces cannot be made here: {probe.stderr.decode().strip()}")
    done = subprocess.run([*remote_entry("", str(tmp_path), {"PROBE": "b"}), "sh", "-c",
                           'echo "$PROBE" > /dev/shm/dsx-probe'], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "dsx-probe").read_text() == "b\n"
