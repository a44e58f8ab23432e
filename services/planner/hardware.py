"""Shipped coefficient sets (the DistServe authors' A100-80GB fits) and resolution of a `hardware` argument."""

from __future__ import annotations

import csv
import json
from functools import cache
from pathlib import Path

from services.planner.latency import (
    DecodeCoeffs,
    LatencyModel,
    PrefillCoeffs,
    TPCoefficients,
)
from services.planner.shapes import ModelShape

DATA = Path(__file__).parent / "data"
SHIPPED = {"a100-80gb": ("a100-80gb.json", "a100-80gb-kv-tokens.csv", 80.0)}


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
    """A shipped set for a paper model (`opt-13b`, `opt-66b`, `opt-175b`)."""
    coeffs, kv = _table(name)
    key = f"facebook/{shape.name}"
    if key not in coeffs:
        raise ValueError(f"hardware: {name!r} has no coefficients for model {shape.name!r} "
                         f"(it has {', '.join(k.split('/')[-1] for k in coeffs)})")
    by_tp = {int(tp): _coeffs(entry) for tp, entry in coeffs[key].items()}
    return LatencyModel(shape, by_tp, source=f"shipped:{name}", kv_tokens=kv.get(key, {}),
                        gpu_memory_gb=SHIPPED[name][2])


def load_latency_model(hardware: str, shape: ModelShape, gpu_memory_gb: float = 80.0) -> LatencyModel:
    """`hardware` is a shipped set name or a profile file written by `distserve profile`."""
    if hardware in SHIPPED:
        return shipped_model(hardware, shape)
    if not Path(hardware).is_file():
        raise ValueError(f"hardware: {hardware!r} is neither a shipped set ({', '.join(SHIPPED)}) nor a profile file")
    from services.planner.profile import fit_profile, read_profile

    return fit_profile(read_profile(hardware), shape, gpu_memory_gb)
