"""The planner's parallel model fitted to `distserve profile --tp/--pp` files of one model on one device.

The paper's model (§3.1, appendix A): an instance at tensor-parallel degree 2 runs a step K times faster
(1 < K ≤ 2: the all-reduces eat the rest), so a degree the profiles lack is reached by dividing the size-dependent
terms by K per doubling; a pipeline of pp stages takes the whole model's compute plus pp − 1 stage hand-offs
(a send of the batch's hidden states each), which add to a step's time.

From the files: K = the median ratio of TP 1 to TP 2 times over the points both measured (prefill and decode
apart: decode steps are small and pay the all-reduces' latency); the stage cost per hand-off = a least-squares
line in the batch's tokens (prefill) or requests (decode) through (PP time − PP 1 time) / (pp − 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from services.common.step_model.latency import LatencyModel, ParallelCost
from services.common.step_model.profile_fit import ProfileFile, fit_coefficients, nonneg_lstsq
from services.common.step_model.shape import ModelShape


@dataclass(frozen=True, slots=True)
class Matched:
    """Points both profiles measured: the batch, and the two times."""

    batches: list[list[int]]
    base: np.ndarray
    other: np.ndarray


def _match(base: ProfileFile, other: ProfileFile, phase: str) -> Matched:
    key = "prompt_lens" if phase == "prefill" else "context_lens"
    theirs = {tuple(getattr(p, key)): p.seconds for p in getattr(other, phase)}
    pairs = [(getattr(p, key), p.seconds, theirs[tuple(getattr(p, key))]) for p in getattr(base, phase)
             if tuple(getattr(p, key)) in theirs]
    if len(pairs) < 3:
        raise ValueError(f"profiles TP {other.tp} x PP {other.pp} and TP 1 x PP 1 share {len(pairs)} {phase} "
                         "points (need 3: record both with the same --max-tokens)")
    return Matched([b for b, _, _ in pairs], np.array([s for _, s, _ in pairs]), np.array([s for _, _, s in pairs]))


def speedup(base: ProfileFile, tp: ProfileFile, phase: str) -> float:
    """K per doubling of the tensor-parallel degree: the median time ratio, to the power 1 / log2(tp)."""
    m = _match(base, tp, phase)
    return float(np.median(m.base / m.other)) ** (1 / math.log2(tp.tp))


def stage_cost(base: ProfileFile, pp: ProfileFile, phase: str) -> tuple[float, float]:
    """Seconds per stage hand-off: (fixed, per batch token) for prefill, (fixed, per request) for decode."""
    m = _match(base, pp, phase)
    size = [sum(b) if phase == "prefill" else len(b) for b in m.batches]
    extra = (m.other - m.base) / (pp.pp - 1)
    fixed, per = nonneg_lstsq(np.column_stack([np.ones(len(size)), size]), extra)
    return float(fixed), float(per)


def fit_parallel(profiles: Sequence[ProfileFile]) -> LatencyModel:
    """A latency model from profiles of one model on one device kind: the coefficients of every PP 1 degree
    profiled, K from TP 2^n × PP 1 beside TP 1 × PP 1, the stage cost from TP 1 × PP p beside it. Profiles of
    ranks on several CPU cores each (`ProfileFile.threads`, PP 1) are kept as measured, per (tp, cores per rank)."""
    one_core = [p for p in profiles if p.threads == 1]
    by_layout = {(p.tp, p.pp): p for p in one_core}
    threaded = {(p.tp, p.threads): p for p in profiles if p.threads > 1}
    if len(by_layout) + len(threaded) != len(profiles):
        raise ValueError("hardware: two profiles of the same TP x PP and cores per rank")
    if any(p.pp > 1 for p in threaded.values()):
        raise ValueError("hardware: a profile of several cores per rank is planned at PP 1 only")
    base = by_layout.get((1, 1))
    if base is None:
        raise ValueError("hardware: a TP 1 x PP 1 profile is needed beside the others (one core per rank)")
    shape = ModelShape(**base.model)
    for p in profiles:
        if ModelShape(**p.model) != shape:
            raise ValueError(f"hardware: profiles of different models ({shape.name}, {p.model.get('name')})")
    tps = sorted(tp for tp, pp in by_layout if pp == 1 and tp > 1 and tp & (tp - 1) == 0)
    pps = sorted(pp for tp, pp in by_layout if tp == 1 and pp > 1)
    cost = ParallelCost(
        k_prefill=speedup(base, by_layout[tps[0], 1], "prefill") if tps else 2.0,
        k_decode=speedup(base, by_layout[tps[0], 1], "decode") if tps else 2.0,
        stage_prefill=stage_cost(base, by_layout[1, pps[0]], "prefill") if pps else (0.0, 0.0),
        stage_decode=stage_cost(base, by_layout[1, pps[0]], "decode") if pps else (0.0, 0.0),
        measured=tuple(sorted(by_layout)))
    by_tp = {tp: fit_coefficients(p) for (tp, pp), p in by_layout.items() if pp == 1}
    layouts = [f"{t}x{p}" for t, p in cost.measured] + [f"{t}x1 on {c} cores each" for t, c in sorted(threaded)]
    return LatencyModel(shape, by_tp, source=f"profiles:{base.device} {'/'.join(layouts)}", parallel=cost,
                        threaded={key: fit_coefficients(p) for key, p in threaded.items()})
