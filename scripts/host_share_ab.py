"""The host's share of the prefill core in the fitted simulator: the same served steps fitted without it and with it.

Starts a disaggregated stack (cpu:0 prefill, cpu:1 decode, services on the prefill core), warms it up, serves the
bench's calibration load, then the bench's chatbot requests (seed 0) once at each RATE, keeping every step each
instance served and the rate it was served at. Then, for each rate, it predicts the attainment from the steps
served before it, as `distserve bench --simulate` does, (A) with the prefill terms fitted alone and (B) with the
host's share fitted beside them (`served.fit_prefill_shared`), beside the replay on the point's own steps.
`--save FILE` keeps the steps (pickle) and `--load FILE` predicts from a saved run without serving.

    python3 scripts/host_share_ab.py [--ttft 2.5 --tpot 0.0152] [--save F | --load F] 1.6 2.4 3.6 4.5 4.95 5.4
"""

from __future__ import annotations

import argparse
import pickle
import time
from collections import Counter
from dataclasses import replace

from services.bench.cli import ensure_profile
from services.bench.results import summarize
from services.bench.runner import Bench, BenchConfig, calibrate, run_requests, serving, warm_up
from services.bench.served import Load, fit_steps, joins_of, served_steps
from services.engine.cli import resolve_model


def serve(bench: Bench, rates: list[float]) -> dict:
    """Steps, loads, hand-offs and measured attainments of the calibration load and one run at each rate."""
    cfg, slo = bench.cfg, bench.slos["chatbot"]
    with serving(cfg, "disagg") as served:
        warm = warm_up(cfg, served, bench.samples["chatbot"], bench.kv_bytes, None)
        profiled = bench._predictor(warm.link_gbps, "disagg").model.at(1)
        calib = calibrate(served, warm, bench.calibration_sample, bench.calibration_rate, profiled, None)
        run = {"link_gbps": warm.link_gbps, "overheads": calib.overheads, "calibration": (calib.load, calib.joins),
               "steps": served_steps(served.redis_url, calib.began), "points": []}
        for i, rate in enumerate(rates):  # the step log is bounded: read each point's steps after it
            began = time.time()
            results = run_requests(served, bench.sample_at("chatbot")(rate).requests(rate, f"ab-{i}"), None, "")
            load = Load(began, time.time(), rate)
            run["steps"] += served_steps(served.redis_url, began)
            run["points"].append((load, joins_of(results), summarize(rate, results, slo, 0.0).attainment))
            print(f"served {rate:g} req/s", flush=True)
    return run


def compare(bench: Bench, run: dict) -> None:
    slo = bench.slos["chatbot"]
    fitted = bench._predictor(run["link_gbps"], "disagg")
    profiled = fitted.model.at(1)
    fitted = fitted.fitted(profiled, run["overheads"])
    load, joins = run["calibration"]
    loads, joins = [load], Counter(joins)
    steps = sorted(run["steps"], key=lambda s: s.start)
    print("rate   measured | A: prefill alone  | B: with the host's share      | replayed")
    for load, handed, measured in run["points"]:
        part = bench.sample_at("chatbot")(load.rate)
        before = [s for s in steps if loads[0].began <= s.start < load.began]
        own = [s for s in steps if load.began <= s.start <= load.end]
        cells = []
        for fit in (fit_steps(before, profiled, joins), fit_steps(before, profiled, joins, loads),
                    fit_steps(own, profiled, handed)):
            predicted = fitted.fitted(fit.coeffs, replace(fitted.serving, join=fit.join_s), fit.host_s)
            att = predicted.attainment(part, load.rate, slo)
            cells.append(f"{att:.3f} ({100 * (att - measured):+5.1f})" + (f" h {fit.host_s * 1e3:4.1f} ms" if fit.host_s else ""))
        print(f"{load.rate:5.2f}  {measured:.3f}    | " + " | ".join(cells), flush=True)
        joins.update(handed)
        loads.append(load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rates", type=float, nargs="+")
    parser.add_argument("--ttft", type=float, default=2.5)
    parser.add_argument("--tpot", type=float, default=0.0152)
    parser.add_argument("--save", default="")
    parser.add_argument("--load", default="")
    args = parser.parse_args()
    model = resolve_model("small-llama")
    cfg = BenchConfig(model=model, num_requests=200, window_s=150, ttft=args.ttft, tpot=args.tpot, simulate=True,
                      profile=ensure_profile(model, "cpu:0", None), start_rate=args.rates[0])
    bench = Bench(cfg)
    if args.load:
        with open(args.load, "rb") as f:
            run = pickle.load(f)
    else:
        run = serve(bench, args.rates)
    if args.save:
        with open(args.save, "wb") as f:
            pickle.dump(run, f)
    compare(bench, run)


if __name__ == "__main__":
    main()
