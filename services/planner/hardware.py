"""Shipped coefficient sets (the DistServe authors' A100-80GB fits, scaled to mixture-of-experts models) and
resolution of a `hardware` argument."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from functools import cache
from pathlib import Path

from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import LatencyModel, TPCoefficients
from services.common.step_model.moe_scaling import moe_from_dense
from services.common.step_model.shape import ModelShape
from services.planner.shapes import PRESETS

DATA = Path(__file__).parent / "data"
SHIPPED = {"a100-80gb": ("a100-80gb.json", "a100-80gb-kv-tokens.csv", 80.0)}
MOE_BASE = "opt-66b"  # the shipped fit a mixture-of-experts model is scaled from: the largest measured one


def _coeffs(entry: dict) -> TPCoefficients:
    """The authors' JSON entry (milliseconds) as seconds."""
    ms = 1e-3
    p, s, large = entry["prefill"], entry["decoding_smallbs"], entry["decoding_largebs"]
    return TPCoefficients(
        prefill=PrefillCoeffs(p[0] * ms, p[1] * ms, p[2] * ms),
        decode_small=DecodeCoeffs(s[0] * ms, s[1] * ms, s[2] * ms),
        decode_large=DecodeCoeffs(large[0] * ms, large[1] * ms, large[2] * ms),
        large_batch=int(entry["decoding_large_small_bs_threshold"]),
    )


@cache
def _table(name: str) -> tuple[dict, dict]:
    coeff_file, kv_file, _ = SHIPPED[name]
    coeffs = json.loads((DATA / coeff_file).read_text())
    kv: dict[str, dict[tuple[int, int], int]] = {}
    with open(DATA / kv_file) as f:
        for row in csv.DictReader(f):
            kv.setdefault(row["model"], {})[int(row["tp"]), int(row["pp"])] = int(row["max_num_tokens"])
    return coeffs, kv


def shipped_model(name: str, shape: ModelShape) -> LatencyModel:
    """A shipped set for a paper model (`opt-13b`, `opt-66b`, `opt-175b`); for a mixture-of-experts model of at
    least a tenth of `MOE_BASE`'s parameters, that set scaled to it (`services.common.step_model.moe_scaling`;
    smaller ones, such as the CPU test presets, would be all fixed costs: refused like any unshipped model)."""
    base = PRESETS[MOE_BASE]
    if shape.experts and shape.params >= base.params / 10:
        return moe_from_dense(shipped_model(name, base), shape)
    coeffs, kv = _table(name)
    key = f"facebook/{shape.name}"
    if key not in coeffs:
        raise ValueError(f"hardware: {name!r} has no coefficients for model {shape.name!r} "
                         f"(it has {', '.join(k.split('/')[-1] for k in coeffs)})")
    by_tp = {int(tp): _coeffs(entry) for tp, entry in coeffs[key].items()}
    return LatencyModel(shape, by_tp, source=f"shipped:{name}", kv_tokens=kv.get(key, {}),
                        gpu_memory_gb=SHIPPED[name][2])


def profile_files(spec: str) -> list[Path]:
    """The profile files a folder (its *.json) or a comma-separated list names; ValueError if any is missing."""
    files = sorted(Path(spec).glob("*.json")) if Path(spec).is_dir() else [Path(f) for f in spec.split(",") if f]
    missing = [str(f) for f in files if not f.is_file()]
    if missing or not files:
        raise ValueError("profile files" + (f" ({', '.join(missing)} missing)" if missing else ""))
    return files


def load_latency_model(hardware: str, shape: ModelShape, gpu_memory_gb: float = 80.0) -> LatencyModel:
    """`hardware` is a shipped set name, a profile file written by `distserve profile`, or several (comma-separated,
    or a folder of *.json) of one model at TP/PP layouts, TP 1 x PP 1 among them: the parallel model is then
    fitted to them (`services.common.step_model.parallel_fit`)."""
    if hardware in SHIPPED:
        return shipped_model(hardware, shape)
    from services.common.step_model.profile_fit import fit_profile, read_profile

    try:
        files = profile_files(hardware)
    except ValueError as e:
        raise ValueError(f"hardware: {hardware!r} is neither a shipped set ({', '.join(SHIPPED)}) nor {e}") from e
    if len(files) == 1:
        return fit_profile(read_profile(files[0]), shape, gpu_memory_gb)
    from services.common.step_model.parallel_fit import fit_parallel

    model = fit_parallel([read_profile(f) for f in files])
    if replace(shape, name=model.shape.name) != model.shape:
        raise ValueError(f"hardware: profiles are of model {model.shape.name!r}, not {shape.name!r}")
    model.gpu_memory_gb = gpu_memory_gb
    return model
