"""Device strings: a CPU instance on one core or several, and device lists that keep `cpu:0,1` together."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from services.common.devices import cpu_cores, device_units, split_devices
from services.engine.parallel.runner import rank_devices
from services.engine.parallel.shard import ParallelConfigError
from services.launcher.cores import host_service_cores


@pytest.mark.parametrize("spec, cores", [("cpu", ()), ("cpu:2", (2,)), ("cpu:0-3", (0, 1, 2, 3)), ("cpu:0,2", (0, 2)),
                                         ("cpu:4-5,0", (4, 5, 0))])
def test_cpu_cores(spec: str, cores: tuple[int, ...]) -> None:
    assert cpu_cores(spec) == cores


@pytest.mark.parametrize("spec", ["cpu:", "cpu:a", "cpu:3-1", "cpu:0-", "cpu:-1", "cpu:0,0", "cpu:0-2,1", "cuda:0"])
def test_cpu_cores_refuses_what_is_not_a_core_list_and_names_the_device(spec: str) -> None:
    with pytest.raises(ValueError, match=spec):
        cpu_cores(spec)


@pytest.mark.parametrize("text, devices", [
    ("cpu:0,cpu:1", ("cpu:0", "cpu:1")), ("cpu:0,1", ("cpu:0,1",)), ("cpu:0,1,cpu:2-3", ("cpu:0,1", "cpu:2-3")),
    ("cuda:0,cuda:1", ("cuda:0", "cuda:1")), ("", ()), ("cpu:0-1,", ("cpu:0-1",)),
])
def test_split_devices_keeps_a_core_list_with_its_device(text: str, devices: tuple[str, ...]) -> None:
    assert split_devices(text) == devices


def test_a_multi_core_instance_shares_its_cores_out_among_its_ranks() -> None:
    assert rank_devices("cpu:0-3", 2) == ["cpu:0,1", "cpu:2,3"]
    assert rank_devices("cpu:0-1", 2) == ["cpu:0", "cpu:1"]
    with pytest.raises(ParallelConfigError, match="--devices"):
        rank_devices("cpu:0-2", 2)


def test_disaggregated_services_go_to_every_core_of_the_prefill_instances() -> None:
    assert host_service_cores("disagg", ["prefill", "decode"], ["cpu:0-1", "cpu:2,3"]) == (0, 1)


def test_per_device_figures_count_each_core_of_a_multi_core_device() -> None:
    assert device_units(("cpu:0-1",)) == device_units(("cpu:0", "cpu:1")) == 2
    assert device_units(("cpu", "cuda:0", "cpu:2,3,5")) == 5


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_multi_core_device_pins_the_process_with_a_thread_per_core() -> None:
    """In a child process: pinning is for the life of the process."""
    first, second = sorted(os.sched_getaffinity(0))[:2]
    script = (f"import os, torch; from services.engine.device import setup_device; setup_device('cpu:{first},{second}'); "
              "print(torch.get_num_threads(), sorted(os.sched_getaffinity(0)))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[0] == f"2 [{first}, {second}]"


def test_a_core_the_host_lacks_is_named() -> None:
    from services.engine.device import setup_device

    with pytest.raises(ValueError, match="cpu:0-4096: this host has"):
        setup_device("cpu:0-4096")
