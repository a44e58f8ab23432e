"""The latency model fitted to the steps a served engine logged (`services/engine/step_log.py`'s `StepRecord`, read
here through `ServedStep`: this core loads no engine), and how well it fits them.

The profile (`distserve profile`) times forward passes on an idle engine; a served step also pays for the step
loop, streaming its tokens over gRPC, and whatever else shares its core. Fitted to served steps, the model
describes the running system: the bench fits it to a calibration load, the planner service to a rolling window of
what the registered instances serve (`services/planner/online_fit.py`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import TPCoefficients
from services.common.step_model.profile_fit import fit_prefill, nonneg_lstsq

MIN_TOKEN_COUNTS = 3  # distinct prefill batch token counts before the prefill terms are fitted to served steps
MIN_BATCH_SIZES = 2  # distinct decode batch sizes before the decode terms are


class ServedStep(Protocol):
    """A served step as the engine's step log records it (`StepRecord`)."""

    @property
    def kind(self) -> str: ...
    @property
    def seqs(self) -> int: ...
    @property
    def tokens(self) -> int: ...
    @property
    def sum_sq(self) -> int: ...
    @property
    def context(self) -> int: ...
    @property
    def start(self) -> float: ...
    @property
    def seconds(self) -> float: ...


@dataclass(frozen=True, slots=True)
class ServedFit:
    coeffs: TPCoefficients
    prefill_steps: int  # steps the prefill terms were fitted to (0: kept as profiled)
    decode_steps: int
    join_s: float = 0.0  # decode-engine seconds one hand-off costs (fitted beside the decode terms)

    def as_dict(self) -> dict[str, float]:
        p, d = self.coeffs.prefill, self.coeffs.decode_small
        return {"prefill_c0": p.c0, "prefill_per_token": p.per_token, "prefill_per_sq": p.per_sq,
                "decode_c0": d.c0, "decode_per_ctx": d.per_ctx, "decode_per_req": d.per_req, "join_s": self.join_s,
                "prefill_steps": self.prefill_steps, "decode_steps": self.decode_steps}


def fit_decode_joins(steps: list[ServedStep], per_ctx: float | None, joins: Counter[float]) -> tuple[DecodeCoeffs, float]:
    """Decode terms and the cost of a hand-off, fitted together. A request joining a decode step may slow the step
    before it (its Decode RPC and the pull's RPC arrive while that one runs), its own and the next one; each
    step's seconds, less the kept attention term, are fitted by non-negative least squares to (1, requests, joins
    at the next step, at this one, at the previous one). The cost is the sum of the three join terms. Fitted
    apart, the fixed and per-request terms would absorb the hand-offs' average cost, which the simulator then
    charged again per hand-off. Steps are taken in time order (neighbours: one decode instance's). With
    `per_ctx` None the attention term is fitted too (a column of context tokens)."""
    dec = sorted(steps, key=lambda s: s.start)
    at = np.array([joins.get(s.start, 0) for s in dec], dtype=float)
    context = np.array([s.context for s in dec], dtype=float)
    seconds = np.array([s.seconds for s in dec])
    columns = [np.ones(len(dec)), np.array([s.seqs for s in dec], dtype=float),
               np.append(at[1:], 0.0), at, np.insert(at[:-1], 0, 0.0)]
    if per_ctx is not None:
        coef = nonneg_lstsq(np.column_stack(columns), seconds - per_ctx * context)
        return DecodeCoeffs(float(coef[0]), per_ctx, float(coef[1])), float(coef[2:].sum())
    coef = nonneg_lstsq(np.column_stack([*columns, context]), seconds)
    return DecodeCoeffs(float(coef[0]), float(coef[5]), float(coef[1])), float(coef[2:5].sum())


def fit_prefill_steps(steps: list[ServedStep], per_sq: float | None) -> PrefillCoeffs | None:
    """Prefill terms fitted to the prefill steps (`per_sq` kept where given); None with fewer than
    MIN_TOKEN_COUNTS distinct batch token counts, too few to tell the fixed cost from the per-token one."""
    pre = [r for r in steps if r.kind == "prefill"]
    if len({r.tokens for r in pre}) < MIN_TOKEN_COUNTS:
        return None
    return fit_prefill([(r.tokens, r.sum_sq, r.seconds) for r in pre], per_sq)


def fit_decode_steps(steps: list[ServedStep], per_ctx: float | None,
                     joins: Counter[float] | None = None) -> tuple[DecodeCoeffs, float] | None:
    """Decode terms (and a hand-off's cost, with `joins`) fitted to the decode steps; None with fewer than
    MIN_BATCH_SIZES distinct batch sizes."""
    dec = [r for r in steps if r.kind == "decode"]
    if len({r.seqs for r in dec}) < MIN_BATCH_SIZES:
        return None
    return fit_decode_joins(dec, per_ctx, joins or Counter())


def fit_steps(steps: list[ServedStep], profiled: TPCoefficients, joins: Counter[float] | None = None) -> ServedFit:
    """The latency model fitted to served prefill and decode steps, by the profiler's least squares (steps that
    mix the two phases, as chunked prefill's do, are left out: the model composes their cost from both).

    The attention terms stay as profiled (prefill's per squared prompt token, decode's per context token: the
    profile measures them over prompts and contexts up to thousands of tokens, which one workload's served
    batches do not span, so fitted they extrapolate badly); the fixed, per-token and per-request terms, which
    carry what serving adds per step and per streamed token, are fitted. A phase whose steps show too few
    distinct shapes keeps its profiled terms. With `joins` (the requests that joined each decode step, by the
    step's start), the hand-off's cost to the decode engine is fitted beside the decode terms."""
    p = fit_prefill_steps(steps, profiled.prefill.per_sq)
    d = fit_decode_steps(steps, profiled.decode_small.per_ctx, joins)
    decode, join_s = d if d is not None else (profiled.decode_small, 0.0)
    coeffs = TPCoefficients(prefill=p or profiled.prefill, decode_small=decode, decode_large=decode)
    return ServedFit(coeffs, sum(r.kind == "prefill" for r in steps) if p else 0,
                     sum(r.kind == "decode" for r in steps) if d else 0, join_s)


@dataclass(frozen=True, slots=True)
class Residuals:
    """How far the fitted step times are from the served ones."""

    steps: int
    rmse_s: float
    mean_abs_rel: float  # mean |predicted − served| / served
    max_abs_s: float

    @classmethod
    def of(cls, predicted: np.ndarray, served: np.ndarray) -> Residuals:
        err = predicted - served
        return cls(len(served), float(np.sqrt(np.mean(err ** 2))), float(np.mean(np.abs(err) / served)),
                   float(np.max(np.abs(err))))


def residuals(steps: list[ServedStep], prefill: PrefillCoeffs | None, decode: DecodeCoeffs | None) -> dict[str, Residuals]:
    """Residuals of each fitted phase over its steps (steps of no time are left out)."""
    out: dict[str, Residuals] = {}
    pre = [s for s in steps if s.kind == "prefill" and s.seconds > 0]
    if prefill is not None and pre:
        got = np.array([prefill.seconds(s.tokens, s.sum_sq) for s in pre])
        out["prefill"] = Residuals.of(got, np.array([s.seconds for s in pre]))
    dec = [s for s in steps if s.kind == "decode" and s.seconds > 0]
    if decode is not None and dec:
        got = np.array([decode.seconds(s.context, s.seqs) for s in dec])
        out["decode"] = Residuals.of(got, np.array([s.seconds for s in dec]))
    return out
