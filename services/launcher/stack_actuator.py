"""The planner's Actuator for a local stack (`distserve up`): start, drain and stop instances as processes.

The placement's device ids index the stack's devices (`--devices`, else the host's cores, round robin),
so a plan for more devices than a small host has shares them. An instance of TP x PP runs as that many rank
processes, stage-major on its stages' devices; a rank of several cores (`InstanceSpec.threads`) runs on the CPU
device of those cores (`cpu:0-1`: a thread on each).
"""

from __future__ import annotations

from functools import cached_property

from services.common.devices import cpu_cores, cpu_device
from services.common.model_config import ModelConfig
from services.launcher.stack import Stack
from services.planner.actuation import InstanceSpec, RunningInstance
from services.planner.placement import Stage


class StackActuator:
    def __init__(self, stack: Stack, drain_timeout_s: float = 60.0) -> None:
        self.stack = stack
        self.drain_timeout_s = drain_timeout_s

    @cached_property
    def dense(self) -> bool:
        """A plan names ep = 1 for a dense model; an MoE instance started without --ep holds whole experts (EP = TP)."""
        return ModelConfig.from_folder(self.stack.config.model).moe is None

    def _slots(self, device: str) -> list[int]:
        """The stack's device slots a rank's device takes: one, or one per core of a multi-core CPU device."""
        if device.startswith("cpu") and len(cores := cpu_cores(device)) > 1:
            return [self.stack.device_index(f"cpu:{core}") for core in cores]
        return [self.stack.device_index(device)]

    def running(self) -> list[RunningInstance]:
        out = []
        for proc in self.stack.procs:
            if proc.role in ("prefill", "decode") and proc.running():
                tp, pp, ep = proc.parallel
                ranks = proc.rank_devices or (proc.device,)
                slots = [slot for device in ranks for slot in self._slots(device)]
                per_stage = len(slots) // pp
                stages = tuple(Stage(0, tuple(slots[s * per_stage:(s + 1) * per_stage])) for s in range(pp))
                out.append(RunningInstance(proc.name, InstanceSpec(proc.role, tp, pp, stages,
                                                                   ep=1 if self.dense else ep or tp,
                                                                   threads=len(self._slots(ranks[0])))))
        return out

    def rank_devices(self, spec: InstanceSpec) -> tuple[str, ...]:
        """Each rank's device: its slot's, or the CPU device of its `threads` slots' cores."""
        slots = [g for stage in spec.stages for g in stage.gpus]
        devices = [self.stack.device(g) for g in slots]
        if spec.threads == 1:
            return tuple(devices)
        if not all(d.startswith("cpu:") and len(cpu_cores(d)) == 1 for d in devices):
            raise ValueError(f"a rank of {spec.threads} cores needs the stack's devices to be single cores, "
                             f"not {', '.join(sorted(set(devices)))}")
        return tuple(cpu_device(tuple(sorted({cpu_cores(d)[0] for d in devices[r:r + spec.threads]})))
                     for r in range(0, len(devices), spec.threads))

    def start(self, spec: InstanceSpec) -> str:
        if any(stage.node != 0 for stage in spec.stages):
            raise ValueError("a local stack is one node; the plan places stages on other nodes")
        ranks = self.rank_devices(spec)
        return self.stack.add_instance(spec.role, ranks[0], rank_devices=ranks, parallel=(spec.tp, spec.pp, spec.ep)).name

    def drain(self, instance_id: str) -> None:
        """SIGTERM: the instance deregisters (no new requests), reports NOT_SERVING, and finishes what it has."""
        self.stack.drain_instance(instance_id, self.drain_timeout_s)

    def stop(self, instance_id: str) -> None:
        self.stack.stop_instance(instance_id, timeout_s=self.drain_timeout_s)
