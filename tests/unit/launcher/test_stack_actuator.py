"""A plan's instances as a local stack launches them: a rank of several cores runs on their CPU device."""

import pytest

from services.common.secret import SECRET_ENV
from services.launcher.stack import Stack, StackConfig
from services.launcher.stack_actuator import StackActuator
from services.planner.actuation import InstanceSpec
from services.planner.placement import Stage


def _actuator(devices: tuple[str, ...]) -> StackActuator:
    return StackActuator(Stack(StackConfig(model="unused", devices=devices, extra_env={SECRET_ENV: ""})))


def test_ranks_of_several_cores_run_on_the_cpu_device_of_their_cores():
    actuator = _actuator(tuple(f"cpu:{i}" for i in range(6)))
    assert actuator.rank_devices(InstanceSpec("decode", 1, 1, (Stage(0, (2, 3)),), threads=2)) == ("cpu:2-3",)
    assert actuator.rank_devices(InstanceSpec("prefill", 2, 1, (Stage(0, (0, 1, 4, 5)),), threads=2)) == \
        ("cpu:0-1", "cpu:4-5")
    assert actuator.rank_devices(InstanceSpec("prefill", 2, 1, (Stage(0, (0, 1)),))) == ("cpu:0", "cpu:1")


def test_ranks_of_several_cores_need_single_core_devices():
    with pytest.raises(ValueError, match="single cores"):
        _actuator(("cuda:0", "cuda:1")).rank_devices(InstanceSpec("decode", 1, 1, (Stage(0, (0, 1)),), threads=2))
