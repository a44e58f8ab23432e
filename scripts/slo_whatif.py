"""Goodput per device of each mode across SLOs, as the fitted simulator of a bench run predicts it.

Reads a `distserve bench --simulate --json` result and rebuilds each mode's fitted predictor from what the run
recorded (the latency model fitted to its calibration load's served steps, the path's overheads, the KV transfer
rate), then finds each mode's simulated goodput on the run's own requests for every TTFT × TPOT objective given.
The last column is disaggregated goodput with the hand-off's hops (to the decode instance, the reservation, the
admission, the transfer) taken out: what a free hand-off would buy.

    python3 scripts/slo_whatif.py RUN.json --ttft 0.975,2.5 --tpot 0.0152,0.02
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from services.bench.predict import Predictor
from services.bench.runner import BLOCK_SIZE, BenchConfig, bench_sample, point_sample
from services.bench.slo import SLO
from services.planner.latency import DecodeCoeffs, PrefillCoeffs, TPCoefficients
from services.planner.serving import ServingOverheads


def predictors(results: list[dict], cfg: BenchConfig) -> dict[str, Predictor]:
    """Each mode's fitted predictor as the run recorded it."""
    out = {}
    for r in results:
        cal = r["calibration"]
        f = cal["served_fit"]
        decode = DecodeCoeffs(f["decode_c0"], f["decode_per_ctx"], f["decode_per_req"])
        coeffs = TPCoefficients(PrefillCoeffs(f["prefill_c0"], f["prefill_per_token"], f["prefill_per_sq"]), decode,
                                decode)
        base = Predictor.from_profile(cfg.profile, cfg.num_blocks * BLOCK_SIZE, cfg.max_batch_tokens, cal["link_gbps"],
                                      r["mode"])
        out[r["mode"]] = base.fitted(coeffs, ServingOverheads(**cal["overheads"]))
    return out


def free_hand_off(p: Predictor) -> Predictor:
    hops = replace(p.serving, to_decode=0.0, reserve=0.0, admit=0.0)
    return replace(p, serving=hops, cluster=replace(p.cluster, intra_node_gbps=float("inf")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="JSON of `distserve bench --simulate --json`")
    ap.add_argument("--ttft", default="", help="TTFT objectives in seconds, comma-separated (default: the run's)")
    ap.add_argument("--tpot", default="", help="TPOT objectives in seconds, comma-separated (default: the run's)")
    args = ap.parse_args()
    run = json.loads(Path(args.run).read_text())
    cfg = BenchConfig(**run["config"])
    sample_at = point_sample(cfg, bench_sample(cfg, cfg.workloads[0], cfg.num_requests))
    modes = predictors(run["results"], cfg)
    devices = len(cfg.devices)
    ttfts = [float(x) for x in args.ttft.split(",")] if args.ttft else [cfg.ttft]
    tpots = [float(x) for x in args.tpot.split(",")] if args.tpot else [cfg.tpot]
    print("TTFT s  TPOT ms  " + "  ".join(modes) + "  (req/s per device)  disagg ÷ colocated  free hand-off")
    for ttft in ttfts:
        for tpot in tpots:
            slo = SLO(ttft=ttft, tpot=tpot, target=cfg.target)
            got = {m: p.goodput(sample_at, slo) / devices for m, p in modes.items()}
            free = free_hand_off(modes["disagg"]).goodput(sample_at, slo) / devices if "disagg" in modes else 0.0
            ratio = got.get("disagg", 0.0) / got["colocated"] if got.get("colocated") else float("nan")
            print(f"{ttft:6.3g}  {1000 * tpot:7.1f}  " + "  ".join(f"{g:.2f}" for g in got.values())
                  + f"  {ratio:.2f}x  {free:.2f}")


if __name__ == "__main__":
    main()
