"""The planner's Actuator for a local stack (`distserve up`): start, drain and stop instances as processes.

The placement's device ids index the stack's devices (`--devices`, else the host's cores, round robin),
so a plan for more devices than a small host has shares them. The local engine runs TP = PP = 1.
"""

from __future__ import annotations

import signal
import time

from services.launcher.health import is_serving
from services.launcher.stack import Stack
from services.planner.actuator import InstanceSpec, RunningInstance
from services.planner.placement import Stage


class StackActuator:
    def __init__(self, stack: Stack, drain_timeout_s: float = 60.0) -> None:
        self.stack = stack
        self.drain_timeout_s = drain_timeout_s

    def running(self) -> list[RunningInstance]:
        out = []
        for proc in self.stack.procs:
            if proc.role in ("prefill", "decode") and proc.process.poll() is None:
                gpu = self.stack.device_index(proc.device)
                out.append(RunningInstance(proc.name, InstanceSpec(proc.role, 1, 1, (Stage(0, (gpu,)),))))
        return out

    def start(self, spec: InstanceSpec) -> str:
        if spec.tp != 1 or spec.pp != 1 or len(spec.stages) != 1:
            raise ValueError(f"the local engine runs tp=pp=1 instances; the plan asks tp={spec.tp} pp={spec.pp}")
        return self.stack.add_instance(spec.role, self.stack.device(spec.stages[0].gpus[0])).name

    def drain(self, instance_id: str) -> None:
        """SIGTERM: the instance deregisters (no new requests), reports NOT_SERVING, and finishes what it has."""
        proc = next(p for p in self.stack.procs if p.name == instance_id)
        proc.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.drain_timeout_s
        while proc.process.poll() is None and is_serving(proc.address) and time.monotonic() < deadline:
            time.sleep(0.1)

    def stop(self, instance_id: str) -> None:
        self.stack.stop_instance(instance_id, timeout_s=self.drain_timeout_s)
