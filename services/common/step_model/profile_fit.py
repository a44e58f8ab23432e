"""Profile files (`distserve profile` writes them) and the least-squares fit of the latency model to them.

File format (JSON): {"version": 1, "model": ModelShape fields, "device": "cpu:0", "tp": 1,
"prefill": [{"prompt_lens": [...], "seconds": s}, ...], "decode": [{"context_lens": [...], "seconds": s}, ...]}.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from services.common.devices import cpu_cores
from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import LatencyModel, TPCoefficients
from services.common.step_model.shape import ModelShape


class PrefillPoint(BaseModel):
    prompt_lens: list[int] = Field(min_length=1, description="prompt lengths of the batch")
    seconds: float = Field(gt=0, description="measured time of the prefill forward pass")


class DecodePoint(BaseModel):
    context_lens: list[int] = Field(min_length=1, description="context length of each request in the batch")
    seconds: float = Field(gt=0, description="measured time of one decode step")


class ProfileFile(BaseModel):
    version: int = 1
    model: dict = Field(description="ModelShape fields of the profiled model")
    device: str = Field(description="device the points were measured on, e.g. cpu:0, cpu:0-1 (one instance on two "
                                    "cores) or cuda:0; a TP/PP instance's: every rank's cores, shared out evenly")
    tp: int = Field(default=1, ge=1, description="tensor-parallel degree of the profiled instance")
    pp: int = Field(default=1, ge=1, description="pipeline stages of the profiled instance (times are of the "
                                                 "whole pipeline, its micro-batches included)")
    prefill: list[PrefillPoint] = Field(min_length=3)
    decode: list[DecodePoint] = Field(min_length=3)

    @property
    def threads(self) -> int:
        """Cores per rank (intra-op threads): a CPU device's cores shared over the tp × pp ranks; 1 elsewhere."""
        cores = len(cpu_cores(self.device)) if self.device.startswith("cpu") else 1
        return max(1, cores // (self.tp * self.pp))


def read_profile(path: str | Path) -> ProfileFile:
    return ProfileFile.model_validate_json(Path(path).read_text())


def write_profile(profile: ProfileFile, path: str | Path) -> None:
    Path(path).write_text(profile.model_dump_json(indent=1))


def nonneg_lstsq(features: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient ≥ 0 (drop a column that wants to go negative, refit)."""
    active = list(range(features.shape[1]))
    while True:
        coef, *_ = np.linalg.lstsq(features[:, active], target, rcond=None)
        if (coef >= 0).all() or len(active) == 1:
            full = np.zeros(features.shape[1])
            full[active] = np.clip(coef, 0, None)
            return full
        active.pop(int(np.argmin(coef)))


def fit_prefill(points: list[tuple[int, float, float]], per_sq: float | None = None) -> PrefillCoeffs:
    """Prefill coefficients from (tokens in the batch, Σ squared prompt lengths, seconds) by non-negative least
    squares on (1, t, t2); with `per_sq` given, that term is kept and the other two are fitted."""
    rows = np.array(points, dtype=float)
    if per_sq is None:
        return PrefillCoeffs(*map(float, nonneg_lstsq(np.column_stack([np.ones(len(rows)), rows[:, :2]]), rows[:, 2])))
    c0, per_token = nonneg_lstsq(np.column_stack([np.ones(len(rows)), rows[:, 0]]), rows[:, 2] - per_sq * rows[:, 1])
    return PrefillCoeffs(float(c0), float(per_token), per_sq)


def fit_decode(points: list[tuple[float, int, float]], per_ctx: float | None = None) -> DecodeCoeffs:
    """Decode coefficients from (context tokens in the batch, requests, seconds) by non-negative least squares
    on (1, context tokens, requests); with `per_ctx` given, that term is kept and the other two are fitted."""
    rows = np.array(points, dtype=float)
    if per_ctx is None:
        return DecodeCoeffs(*map(float, nonneg_lstsq(np.column_stack([np.ones(len(rows)), rows[:, :2]]), rows[:, 2])))
    c0, per_req = nonneg_lstsq(np.column_stack([np.ones(len(rows)), rows[:, 1]]), rows[:, 2] - per_ctx * rows[:, 0])
    return DecodeCoeffs(float(c0), per_ctx, float(per_req))


def fit_coefficients(profile: ProfileFile) -> TPCoefficients:
    """Fit prefill (1, t, t2) and decode (1, context tokens, batch) by non-negative least squares; t2 and the
    context as the profiled model's layers attend (a sliding layer to its window: `ModelShape.attended`)."""
    attended = ModelShape(**profile.model).attended
    prefill = fit_prefill([(sum(p.prompt_lens), sum(attended.prompt_sq(x, 0) for x in p.prompt_lens), p.seconds)
                           for p in profile.prefill])
    decode = fit_decode([(sum(attended.context(x) for x in p.context_lens), len(p.context_lens), p.seconds)
                         for p in profile.decode])
    return TPCoefficients(prefill=prefill, decode_small=decode, decode_large=decode)


def fit_profile(profile: ProfileFile, shape: ModelShape | None = None, gpu_memory_gb: float = 80.0) -> LatencyModel:
    """A latency model from a profile; `shape` defaults to the profiled model's own."""
    profiled = ModelShape(**profile.model)
    coeffs = fit_coefficients(profile)
    if shape is not None and replace(shape, name=profiled.name) != profiled:
        raise ValueError(f"hardware: profile is of model {profiled.name!r}, not {shape.name!r}")
    return LatencyModel(profiled, {profile.tp: coeffs}, source=f"profile:{profile.device}",
                        gpu_memory_gb=gpu_memory_gb)


def appendix_a_constants(coeffs: TPCoefficients, shape: ModelShape, tp: int, block: int = 16) -> dict[str, float]:
    """C1..C6 of appendix A from per-token coefficients (h and m divided by tp; decode's fixed cost as C4)."""
    h, m = shape.hidden / tp, shape.ffn / tp
    return {
        "C1": coeffs.prefill.per_token / (4 * h * h + 2 * h * m),
        "C2": coeffs.prefill.per_sq / (3 * h / block),
        "C3": coeffs.prefill.c0,
        "C4": coeffs.decode_small.c0 / (4 * h * h + 2 * h * m),
        "C5": coeffs.decode_small.per_ctx / (3 * h),
        "C6": 0.0,
    }
