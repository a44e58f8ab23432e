"""The planner's Actuator for a local stack (`distserve up`): start, drain and stop instances as processes.

The placement's device ids index the stack's devices (`--devices`, else the host's cores, round robin),
so a plan for more devices than a small host has shares them. An instance of TP x PP runs as that many rank
processes, stage-major on its stages' devices.
"""

from __future__ import annotations

from services.common.model_config import ModelConfig
from services.launcher.stack import Stack
from services.planner.actuation import InstanceSpec, RunningInstance
from services.planner.placement import Stage


class StackActuator:
    def __init__(self, stack: Stack, drain_timeout_s: float = 60.0) -> None:
        self.stack = stack
        self.drain_timeout_s = drain_timeout_s
        # a plan names ep = 1 for a dense model; an MoE instance started without --ep holds whole experts (EP = TP)
        self.dense = ModelConfig.from_folder(stack.config.model).moe is None

    def running(self) -> list[RunningInstance]:
        out = []
        for proc in self.stack.procs:
            if proc.role in ("prefill", "decode") and proc.running():
                tp, pp, ep = proc.parallel
                gpus = [self.stack.device_index(d) for d in proc.rank_devices or (proc.device,)]
                stages = tuple(Stage(0, tuple(gpus[s * tp:(s + 1) * tp])) for s in range(pp))
                out.append(RunningInstance(proc.name, InstanceSpec(proc.role, tp, pp, stages, 1 if self.dense else ep or tp)))
        return out

    def start(self, spec: InstanceSpec) -> str:
        if any(stage.node != 0 for stage in spec.stages):
            raise ValueError("a local stack is one node; the plan places stages on other nodes")
        ranks = tuple(self.stack.device(g) for stage in spec.stages for g in stage.gpus)
        return self.stack.add_instance(spec.role, ranks[0], rank_devices=ranks, parallel=(spec.tp, spec.pp, spec.ep)).name

    def drain(self, instance_id: str) -> None:
        """SIGTERM: the instance deregisters (no new requests), reports NOT_SERVING, and finishes what it has."""
        self.stack.drain_instance(instance_id, self.drain_timeout_s)

    def stop(self, instance_id: str) -> None:
        self.stack.stop_instance(instance_id, timeout_s=self.drain_timeout_s)
