"""Applying a plan: the `Actuator` Protocol a deployment implements (start, drain, stop instances), and the
difference between what runs and what a placement wants."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from services.planner.placement import Placement, Stage


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """One instance to run: its phase, parallelism, and the node and GPU ids of each pipeline stage (on a CPU
    host, core ids: each rank `threads` consecutive ones of its stage)."""

    role: str  # "prefill" | "decode"
    tp: int
    pp: int
    stages: tuple[Stage, ...]
    ep: int = 1  # MoE: expert groups per stage, dividing tp (1: each expert split over the tp GPUs; tp: whole)
    threads: int = 1  # cores per rank (CPU)

    def parallel_flags(self) -> list[str]:
        """The instance command's flags of this layout (none for a single rank)."""
        if self.tp * self.pp == 1:
            return []
        return ["--tp", str(self.tp), "--pp", str(self.pp), *(["--ep", str(self.ep)] if self.tp > 1 else [])]


@dataclass(frozen=True, slots=True)
class RunningInstance:
    id: str
    spec: InstanceSpec


class Actuator(Protocol):
    """What the planner needs from a deployment (local `distserve up` launcher, compose, ...)."""

    def running(self) -> list[RunningInstance]:
        """The prefill and decode instances running now."""
        ...

    def start(self, spec: InstanceSpec) -> str:
        """Start an instance and return its id once it is healthy and registered."""
        ...

    def drain(self, instance_id: str) -> None:
        """Stop routing new requests to the instance and return when its in-flight requests are done."""
        ...

    def stop(self, instance_id: str) -> None:
        """Stop a drained instance and free its devices."""
        ...


@dataclass(slots=True)
class Actuation:
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def specs_of(placement: Placement) -> list[InstanceSpec]:
    """The instances to launch (`--ep` as planned: expert groups dividing the TP ranks); ValueError for a layout the
    engine cannot run: experts spread over more GPUs than its tensor-parallel ranks."""
    par = {"prefill": placement.prefill, "decode": placement.decode}
    for role, layout in par.items():
        if layout.width > layout.tp or layout.tp % layout.ep:
            raise ValueError(f"placement: {role} EP {layout.ep} over TP {layout.tp} cannot be launched (the engine "
                             "splits the experts over expert groups dividing its TP ranks; attention replicated "
                             "over more GPUs than TP, DP attention, is not built)")
    return [InstanceSpec(inst.role, par[inst.role].tp, par[inst.role].pp, inst.stages, ep=par[inst.role].ep,
                         threads=par[inst.role].threads) for inst in placement.instances]


def gpu_ranks(spec: InstanceSpec, deployment: str) -> InstanceSpec:
    """`spec` when each of its ranks is one device; ValueError for CPU ranks of several cores, which only a local
    stack launches (a `deployment` of containers reserves GPUs)."""
    if spec.threads > 1:
        raise ValueError(f"{deployment}: ranks of {spec.threads} CPU cores each run on a local stack (`distserve up`), "
                         "not in containers reserving GPUs")
    return spec


def _relabel(spec: InstanceSpec, planned: InstanceSpec, running: InstanceSpec) -> InstanceSpec:
    """`spec` after the GPUs of `planned` and of `running` (same shape) swap places."""
    swap: dict[tuple[int, int], tuple[int, int]] = {}
    for a, b in zip(planned.stages, running.stages):
        for ga, gb in zip(a.gpus, b.gpus):
            swap[a.node, ga], swap[b.node, gb] = (b.node, gb), (a.node, ga)
    stages = []
    for stage in spec.stages:
        moved = [swap.get((stage.node, g), (stage.node, g)) for g in stage.gpus]
        stages.append(Stage(moved[0][0], tuple(g for _, g in moved)))
    return replace(spec, stages=tuple(stages))


def apply_placement(actuator: Actuator, placement: Placement) -> Actuation:
    """Keep running instances that the placement also wants (same role, tp, pp, ep and threads; they stay on their
    GPUs and
    the planned GPUs are relabelled around them), start the missing ones first so capacity never dips, then
    drain and stop the rest. An instance needing GPUs that a surplus instance holds starts after it stops."""
    wanted = specs_of(placement)
    done = Actuation()
    running = actuator.running()
    surplus = []
    for exact in (True, False):
        for inst in list(running):
            shape = (inst.spec.role, inst.spec.tp, inst.spec.pp, inst.spec.ep, inst.spec.threads)
            match = next((w for w in wanted
                          if (w == inst.spec if exact else (w.role, w.tp, w.pp, w.ep, w.threads) == shape)),
                         None)
            if match is None:
                continue
            wanted.remove(match)
            wanted = [_relabel(w, match, inst.spec) for w in wanted]
            running.remove(inst)
            done.kept.append(inst.id)
    surplus = running
    held = {(s.node, g) for inst in surplus for s in inst.spec.stages for g in s.gpus}
    blocked = [spec for spec in wanted if any((s.node, g) in held for s in spec.stages for g in s.gpus)]
    for spec in wanted:
        if spec not in blocked:
            done.started.append(actuator.start(spec))
    for inst in surplus:
        actuator.drain(inst.id)
        actuator.stop(inst.id)
        done.stopped.append(inst.id)
    done.started += [actuator.start(spec) for spec in blocked]
    return done
