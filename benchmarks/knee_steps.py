"""Why a bench run's fitted simulator misses at the knee: its points' prefill steps against the calibration's fit.

    python3 -m benchmarks.knee_steps RESULTS.json [...]

Per point of a `distserve bench --simulate` results.json: the prefill steps (kept in `points[].prefill_steps`, or
for an older file recovered from the per-request records: the first tokens of a batch reach the client together,
a step starts at the previous one's end or at its first prompt's arrival), whose fit must match the run's own
`served_fit`; the fit with a squared-token or a per-prompt term (is the model's form right?), with a term for a
step that starts while its predecessor ran (does a queue cost more per step?), and on each half of the point (how
far the host's step cost moves within minutes); then the simulator at the point with the calibration's prefill
terms scaled (how much a cost error moves the predicted attainment).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import numpy as np

from services.bench.predict import Predictor
from services.bench.runner import BenchConfig, bench_sample, point_sample
from services.bench.slo import ScaledSLO
from services.common.slo import SLO
from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import TPCoefficients
from services.planner.serving import ServingOverheads

SAME_BATCH_S = 0.045  # first tokens of one batch reach the client within this; a prefill step takes longer
SCALES = (0.95, 1.0, 1.05, 1.1, 1.15)


def recovered(sample, rate: float, per_request: list, hops: dict) -> list[tuple[int, int, int, float, float, bool]]:
    """(prompts, tokens, Σ prompt², start, seconds, back-to-back) of each prefill step, from the requests' TTFTs."""
    arrival = sample.arrivals(rate)
    end = arrival + np.array([r[2] for r in per_request]) - hops["first_token"]
    came = arrival + hops["to_prefill"]
    groups: list[list[int]] = []
    for i in np.argsort(end):
        if groups and end[i] - end[groups[-1][0]] < SAME_BATCH_S:
            groups[-1].append(int(i))
        else:
            groups.append([int(i)])
    out, previous = [], -np.inf
    for g in groups:
        queued = min(came[g]) < previous
        start = previous if queued else float(min(came[g]))
        stop = float(min(end[g]))
        p = sample.prompts[g]
        out.append((len(g), int(p.sum()), int((p.astype(float) ** 2).sum()), start, stop - start, bool(queued)))
        previous = stop
    return out


def kept(rows: list) -> list[tuple[int, int, int, float, float, bool]]:
    """Kept rows with the back-to-back flag: the step began where its predecessor's period ended."""
    out, previous = [], -np.inf
    for n, t, sq, start, seconds in sorted(rows, key=lambda r: r[3]):
        out.append((n, t, sq, start, seconds, start - previous < 1e-3))
        previous = start + seconds
    return out


def ols(columns: list[np.ndarray], y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.column_stack(columns)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    res = y - x @ coef
    return coef, np.sqrt(np.diag(np.linalg.inv(x.T @ x) * (res @ res) / (len(y) - x.shape[1])))


def level(steps, per_sq: float, prompt: float) -> tuple[float, float]:
    """The fitted (1, t) cost of one prompt of `prompt` tokens, and its standard error."""
    a = np.array(steps, dtype=float)
    x = np.column_stack([np.ones(len(a)), a[:, 1]])
    y = a[:, 4] - per_sq * a[:, 2]
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    res = y - x @ coef
    cov = np.linalg.inv(x.T @ x) * (res @ res) / (len(a) - 2)
    v = np.array([1.0, prompt])
    return float(v @ coef + per_sq * prompt ** 2), float(np.sqrt(v @ cov @ v))


def main(path: str) -> None:
    doc = json.load(open(path))
    cfg = BenchConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in doc["config"].items()})
    for result in doc["results"]:
        calib = result["calibration"]
        fit, hops = calib["served_fit"], calib["overheads"]
        per_sq = fit["prefill_per_sq"]
        sample = bench_sample(cfg, result["workload"], cfg.num_requests)
        at = point_sample(cfg, sample)
        prompt = float(sample.prompts.mean())
        print(f"{path} {result['mode']}: calibration {level([(*r, False) for r in calib['prefill_steps']], per_sq, prompt)[0]:.3f} s"
              if calib.get("prefill_steps") else
              f"{path} {result['mode']}: calibration fit {fit['prefill_c0'] + fit['prefill_per_token'] * prompt + per_sq * prompt ** 2:.3f} s",
              f"for a {prompt:.0f}-token prompt")
        pooled = []
        base = Predictor.from_profile(cfg.profile, cfg.num_blocks * cfg.block_size, cfg.max_batch_tokens,
                                      calib["link_gbps"], result["mode"])
        decode = DecodeCoeffs(fit["decode_c0"], fit["decode_per_ctx"], fit["decode_per_req"])
        serving = replace(ServingOverheads(**hops), join=fit["join_s"])
        slo = ScaledSLO(SLO(result["slo"]["ttft_s"], result["slo"]["tpot_s"], result["slo"]["target"]), result["slo"]["scale"])
        for k, p in enumerate(result["points"]):
            steps = kept(p["prefill_steps"]) if p.get("prefill_steps") else recovered(at(p["rate"]), p["rate"], p["per_request"], hops)
            a = np.array(steps, dtype=float)
            n, t, y = a[:, 0], a[:, 1], a[:, 4] - per_sq * a[:, 2]
            one = np.ones(len(a))
            (_, _, t2), (_, _, t2_se) = ols([one, t, t * t], y)
            (_, _, per_prompt), (_, _, pp_se) = ols([one, t, n], y)
            coef, _ = ols([one, t], y)
            big = t >= 400
            halves = [level(h, per_sq, prompt) for h in (steps[: len(steps) // 2], steps[len(steps) // 2:])]
            own = level(steps, per_sq, prompt)
            sim = [base.fitted(TPCoefficients(PrefillCoeffs(fit["prefill_c0"] * s, fit["prefill_per_token"] * s, per_sq),
                                              decode, decode), serving).attainment(at(p["rate"]), p["rate"], slo)
                   for s in SCALES]
            print(f"  {p['rate']:.3g} req/s: {len(steps)} steps (served fit {p['served_fit']['prefill_steps']}), {a[:, 5].mean():.0%} back-to-back; "
                  f"{own[0]:.3f}±{own[1]:.3f} s for the prompt (halves {halves[0][0]:.3f}±{halves[0][1]:.3f}, "
                  f"{halves[1][0]:.3f}±{halves[1][1]:.3f}); t² {t2 * 1e6:+.2f}±{t2_se * 1e6:.2f} µs/token², "
                  f"per prompt {per_prompt * 1e3:+.0f}±{pp_se * 1e3:.0f} ms, steps of 400+ tokens "
                  f"{(y - coef[0] - coef[1] * t)[big].mean() * 1e3 if big.any() else 0:+.0f} ms off the line")
            print(f"    measured {p['attainment']:.3f} ({p['attainment_ci'][0]:.3f}-{p['attainment_ci'][1]:.3f}); calibration's "
                  f"prefill terms x{'/'.join(f'{s:g}' for s in SCALES)}: {' '.join(f'{v:.3f}' for v in sim)}")
            pooled += [(k, *s) for s in steps]
        a = np.array(pooled, dtype=float)
        points = [(a[:, 0] == k).astype(float) for k in range(len(result["points"]))]
        coef, se = ols([*points, a[:, 2], a[:, 6]], a[:, 5] - per_sq * a[:, 3])
        print(f"  a step that starts while its predecessor ran: {coef[-1] * 1e3:+.0f}±{se[-1] * 1e3:.0f} ms (all points)")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        main(arg)
