"""Which part of the model each rank holds: its query heads, KV heads, MLP columns and layers.

Ranks are numbered stage-major: rank = pp_rank * tp + tp_rank, so a stage's TP ranks are consecutive.
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
                       moe=config.moe and config.moe.layers(self.layers.start, self.layers.stop).expert_shard(
                           self.tp, self.tp_rank),
                       head_dim_override=config.head_dim)


def check_layout(config: ModelConfig, tp: int, pp: int, devices: int | None = None) -> None:
    """Raises ParallelConfigError naming the flag when the model or the devices cannot take TP x PP."""
    if tp < 1:
        raise ParallelConfigError("--tp", f"must be >= 1, got {tp}")
    if pp < 1:
        raise ParallelConfigError("--pp", f"must be >= 1, got {pp}")
    if config.num_heads % tp:
        raise ParallelConfigError("--tp", f"{tp} does not divide the model's {config.num_heads} attention heads")
    kv = config.num_kv_heads
    if kv % tp and tp % kv:
        raise ParallelConfigError("--tp", f"{tp} neither divides nor is a multiple of the model's {kv} KV heads")
    if config.moe is not None and config.moe.num_experts % tp:
        raise ParallelConfigError("--tp", f"{tp} does not divide the model's {config.moe.num_experts} experts (EP = TP)")
    if config.intermediate_size % tp:
        raise ParallelConfigError("--tp", f"{tp} does not divide the MLP width {config.intermediate_size}")
    if pp > config.num_layers:
        raise ParallelConfigError("--pp", f"{pp} stages for a model of {config.num_layers} layers")
    if devices is not None and tp * pp > devices:
        raise ParallelConfigError("--devices", f"TP x PP = {tp} x {pp} = {tp * pp} ranks, but only {devices} devices given")


def stage_layers(num_layers: int, pp: int, pp_rank: int) -> Span:
    """Contiguous stages; the first `num_layers % pp` stages take one layer more."""
    base, extra = divmod(num_layers, pp)
    start = pp_rank * base + min(pp_rank, extra)
    return Span(start, base + (pp_rank < extra))


def shard_for(config: ModelConfig, tp: int, pp: int, rank: int) -> Shard:
    check_layout(config, tp, pp)
    pp_rank, tp_rank = divmod(rank, tp)
    heads = config.num_heads // tp
    kv = config.num_kv_heads
    if kv >= tp:
        kv_span = Span(tp_rank * (kv // tp), kv // tp)
    else:  # tp // kv ranks share (replicate) each KV head
        kv_span = Span(tp_rank // (tp // kv), 1)
    cols = config.intermediate_size // tp
    return Shard(rank, tp, pp, tp_rank, pp_rank, Span(tp_rank * heads, heads), kv_span,
                 Span(tp_rank * cols, cols), stage_layers(config.num_layers, pp, pp_rank))
