"""Which part of the model each rank holds: its query heads, KV heads, MLP columns, experts and layers.

Ranks are numbered stage-major: rank = pp_rank * tp + tp_rank, so a stage's TP ranks are consecutive. A stage's
TP ranks form `ep` expert groups of tp / ep consecutive ranks: each group holds num_experts / ep whole experts,
each of its ranks a 1 / (tp / ep) slice of every one's width (expert tensor parallelism); the shared expert is
split over all the stage's ranks like the dense MLP. EP changes no head and no KV: the pools are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from services.common.model_config import ModelConfig
from services.common.span import Span


class ParallelConfigError(ValueError):
    """A parallel layout the model or the devices cannot take; `flag` names the command-line flag at fault."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")
        self.flag = flag


@dataclass(frozen=True, slots=True)
class Shard:
    """One rank's part of the model."""

    rank: int
    tp: int
    pp: int
    tp_rank: int
    pp_rank: int
    heads: Span        # query heads
    kv_heads: Span     # KV heads (a replica where the model has fewer KV heads than TP ranks)
    columns: Span      # MLP intermediate columns (gate/up/fc1 rows, down/fc2 columns)
    layers: Span       # this stage's decoder layers
    ep: int = 1        # expert groups per stage (MoE)
    experts: Span = Span(0, 0)         # the routed experts of this rank's group
    expert_columns: Span = Span(0, 0)  # its columns of each of them (rows of gate/up, columns of down)
    shared_columns: Span = Span(0, 0)  # its columns of the shared expert(s)

    @property
    def world(self) -> int:
        return self.tp * self.pp

    @property
    def first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1

    def rank_of(self, tp_rank: int, pp_rank: int) -> int:
        return pp_rank * self.tp + tp_rank

    def local_config(self, config: ModelConfig) -> ModelConfig:
        """The model config of this rank's slice: its heads, columns and layers (head size unchanged)."""
        return replace(config, num_heads=self.heads.count, num_kv_heads=self.kv_heads.count,
                       intermediate_size=self.columns.count, num_layers=self.layers.count,
                       layer_types=config.layer_types[self.layers.start : self.layers.stop],
                       moe=config.moe and config.moe.layers(self.layers.start, self.layers.stop).rank_part(
                           range(self.experts.start, self.experts.stop), self.expert_columns.count,
                           self.shared_columns.count),
                       head_dim_override=config.head_dim)


def expert_groups(tp: int, ep: int) -> int:
    """The expert groups of a stage: `ep`, or 0 for one per TP rank (each holding whole experts)."""
    return ep or tp


def check_layout(config: ModelConfig, tp: int, pp: int, devices: int | None = None, ep: int = 0) -> None:
    """Raises ParallelConfigError naming the flag when the model or the devices cannot take TP x PP with `ep`
    expert groups (0: EP = TP)."""
    if tp < 1:
        raise ParallelConfigError("--tp", f"must be >= 1, got {tp}")
    if pp < 1:
        raise ParallelConfigError("--pp", f"must be >= 1, got {pp}")
    if config.num_heads % tp:
        raise ParallelConfigError("--tp", f"{tp} does not divide the model's {config.num_heads} attention heads")
    kv = config.num_kv_heads
    if kv % tp and tp % kv:
        raise ParallelConfigError("--tp", f"{tp} neither divides nor is a multiple of the model's {kv} KV heads")
    _check_experts(config, tp, ep)
    if config.intermediate_size % tp:
        raise ParallelConfigError("--tp", f"{tp} does not divide the MLP width {config.intermediate_size}")
    if pp > config.num_layers:
        raise ParallelConfigError("--pp", f"{pp} stages for a model of {config.num_layers} layers")
    if devices is not None and tp * pp > devices:
        raise ParallelConfigError("--devices", f"TP x PP = {tp} x {pp} = {tp * pp} ranks, but only {devices} devices given")


def _check_experts(config: ModelConfig, tp: int, ep: int) -> None:
    """A dense model takes any `ep` dividing tp (a planner's layout names one for every model) and ignores it."""
    moe, flag = config.moe, "--ep" if ep else "--tp"  # without --ep the experts follow --tp
    if ep < 0:
        raise ParallelConfigError("--ep", f"must be >= 1 (or 0: one expert group per TP rank), got {ep}")
    groups = expert_groups(tp, ep)
    if tp % groups:
        raise ParallelConfigError("--ep", f"{groups} expert groups do not divide the {tp} TP ranks")
    if moe is None:
        return
    if moe.num_experts % groups:
        raise ParallelConfigError(flag, f"{groups} does not divide the model's {moe.num_experts} experts"
                                        + ("" if ep else " (EP = TP; --ep sets fewer expert groups)"))
    if moe.expert_size % (tp // groups):
        raise ParallelConfigError("--ep", f"an expert's width {moe.expert_size} does not split over the "
                                          f"{tp // groups} ranks of an expert group (TP {tp} / EP {groups})")
    if moe.shared_size % tp:
        raise ParallelConfigError("--tp", f"{tp} does not divide the shared expert's width {moe.shared_size}")


def stage_layers(num_layers: int, pp: int, pp_rank: int) -> Span:
    """Contiguous stages; the first `num_layers % pp` stages take one layer more."""
    base, extra = divmod(num_layers, pp)
    start = pp_rank * base + min(pp_rank, extra)
    return Span(start, base + (pp_rank < extra))


def shard_for(config: ModelConfig, tp: int, pp: int, rank: int, ep: int = 0) -> Shard:
    check_layout(config, tp, pp, ep=ep)
    pp_rank, tp_rank = divmod(rank, tp)
    heads = config.num_heads // tp
    kv = config.num_kv_heads
    if kv >= tp:
        kv_span = Span(tp_rank * (kv // tp), kv // tp)
    else:  # tp // kv ranks share (replicate) each KV head
        kv_span = Span(tp_rank // (tp // kv), 1)
    cols = config.intermediate_size // tp
    shard = Shard(rank, tp, pp, tp_rank, pp_rank, Span(tp_rank * heads, heads), kv_span,
                  Span(tp_rank * cols, cols), stage_layers(config.num_layers, pp, pp_rank))
    if config.moe is None:
        return shard
    groups, moe = expert_groups(tp, ep), config.moe
    group, part = divmod(tp_rank, tp // groups)  # this rank's expert group, and its place in it
    experts, width, shared = moe.num_experts // groups, moe.expert_size // (tp // groups), moe.shared_size // tp
    return replace(shard, ep=groups, experts=Span(group * experts, experts), expert_columns=Span(part * width, width),
                   shared_columns=Span(tp_rank * shared, shared))
