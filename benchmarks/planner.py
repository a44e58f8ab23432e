"""`python -m benchmarks.planner`: the planner's figures — M/D/1 agreement, the authors' reference result, search
runtime, mixture-of-experts layouts — printed as a table and as JSON.

    python3 -m benchmarks.planner [--what mdl|reference|search|moe|all] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from services.common.slo import SLO
from services.common.step_model import DecodeCoeffs, PrefillCoeffs
from services.common.step_model.latency import TPCoefficients
from services.planner.goodput import Scenario, phase_goodput
from services.planner.hardware import load_latency_model
from services.planner.placement import Cluster, Parallel, pack
from services.planner.search import candidates, high_affinity, low_affinity
from services.planner.shapes import load_shape
from services.planner.simulator import simulate, simulate_prefill
from services.planner.workload import Workload, unit_arrivals


def mdl(requests: int = 200000, d: float = 0.1, k: float = 1.6) -> list[dict]:
    """Mean TTFT of the simulator against the paper's Eq. 1 (one device), Eq. 2 (2-way inter-op) and
    Eq. 3 (2-way intra-op with speed-up k), utilisation 0.3 to 0.8, no batching."""
    zero = DecodeCoeffs(0, 0, 0)
    one = TPCoefficients(PrefillCoeffs(d, 0, 0), zero, zero)
    fast = TPCoefficients(PrefillCoeffs(d / k, 0, 0), zero, zero)
    prompts = np.full(requests, 512)
    rows = []
    for rho in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        lam = rho / d
        arrivals = unit_arrivals(requests, np.random.default_rng(7)) / lam
        cases = (("eq1", one, 1, d + lam * d * d / (2 * (1 - lam * d))),
                 ("eq2", one, 2, d + lam * d * d / (4 * (2 - lam * d))),
                 ("eq3", fast, 1, d / k + lam * d * d / (2 * k * (k - lam * d))))
        for name, coeffs, pp, closed in cases:
            sim = float(simulate_prefill(coeffs, pp, 512, prompts, arrivals).mean())
            rows.append({"case": name, "utilisation": rho, "closed_form_s": closed, "simulated_s": sim,
                         "error_pct": 100 * (sim / closed - 1)})
    return rows


def authors_bisection(scn: Scenario, placement, requests: int = 300, high: float = 5.0, esp: float = 0.25) -> float:
    """The authors' search on our simulator: exactly `requests` requests, per-GPU rate bisected on [0, high]
    until hi − lo < esp, `lo` reported."""
    prompts, outputs, unit = (a[:requests] for a in scn.pool)
    lo, hi = 0.0, high
    while hi - lo > esp:
        mid = (lo + hi) / 2
        result = simulate(scn.model, placement, scn.cluster, prompts, outputs, unit / (mid * placement.num_gpus),
                          scn.max_batch_tokens)
        lo, hi = (mid, hi) if result.attainment(scn.slo) >= scn.slo.attainment else (lo, mid)
    return lo


def reference(seeds: int = 5, workers: int | None = None) -> list[dict]:
    """OPT-13B, one node of 4 A100-80GB, TTFT 0.2 s, TPOT 0.1 s at 90%, chatbot: per-GPU goodput per seed,
    with our Lm batching and with the authors' (batch all queued prompts)."""
    model = load_latency_model("a100-80gb", load_shape("opt-13b"))
    rows = []
    for lm_name, lm in (("Lm (ours)", None), ("all queued (authors')", 10**7)):
        for seed in range(seeds):
            scn = Scenario(model, Cluster(1, 4), Workload("chatbot"), SLO(0.2, 0.1, 0.9), 2000, seed,
                           max_batch_tokens=lm)
            plan = high_affinity(scn, workers=workers)
            unit = pack(Cluster(1, 4), Parallel(2, 1), 1, Parallel(1, 1), 1)
            p = plan.placement
            rows.append({"batching": lm_name, "seed": seed,
                         "prefill": f"tp{p.prefill.tp} pp{p.prefill.pp} x{p.n_prefill}",
                         "decode": f"tp{p.decode.tp} pp{p.decode.pp} x{p.n_decode}",
                         "goodput_per_gpu": plan.goodput_per_gpu,
                         "authors_bisection_300": authors_bisection(scn, unit)})
    return rows


def search_runtime(workers: int | None = None) -> list[dict]:
    """Alg. 1 and Alg. 2 for OPT-66B on 4 nodes × 8 A100 (25 Gbps between nodes), chatbot, TTFT 2.5 s,
    TPOT 0.15 s at 90%."""
    model = load_latency_model("a100-80gb", load_shape("opt-66b"))
    scn = Scenario(model, Cluster(4, 8, inter_node_gbps=25), Workload("chatbot"), SLO(2.5, 0.15, 0.9), 2000)
    rows = []
    for algorithm in (high_affinity, low_affinity):
        began = time.perf_counter()
        plan = algorithm(scn, workers=workers)
        p = plan.placement
        rows.append({"algorithm": plan.algorithm, "seconds": time.perf_counter() - began,
                     "configs": len(plan.evaluated), "prefill": f"tp{p.prefill.tp} pp{p.prefill.pp} x{p.n_prefill}",
                     "decode": f"tp{p.decode.tp} pp{p.decode.pp} x{p.n_decode}", "num_gpus": p.num_gpus,
                     "goodput_per_gpu": plan.goodput_per_gpu})
    return rows


def moe() -> list[dict]:
    """Mixture-of-experts layouts (pp 1) that fit, Mixtral 8x7B on 1 × 8 and DeepSeek-V3 on 4 × 8 A100-80GB (the
    OPT-66B fit scaled): weights per GPU, KV tokens of an instance, decode step at 1/16/128/512 requests of 1000
    context tokens, and each phase's goodput per GPU (chatbot, TTFT 0.2 s, TPOT 0.1 s at 90%)."""
    rows = []
    for name, cluster in (("mixtral-8x7b", Cluster(1, 8)), ("deepseek-v3", Cluster(4, 8))):
        model = load_latency_model("a100-80gb", load_shape(name))
        scn = Scenario(model, cluster, Workload("chatbot"), SLO(0.2, 0.1, 0.9), 2000)
        for par in (p for p in candidates(scn, cluster.num_gpus) if p.pp == 1):
            coeffs = scn.coeffs(par)
            rows.append({"model": name, "tp": par.tp, "ep": par.ep, "gpus": par.gpus,
                         "weights_gb_per_gpu": model.weight_bytes_per_gpu(par.tp, par.pp, par.ep) / 1e9,
                         "kv_tokens": model.kv_capacity(par.tp, par.pp, par.ep),
                         **{f"step_ms_b{b}": 1e3 * coeffs.decode_time(1000 * b, b) for b in (1, 16, 128, 512)},
                         "decode_per_gpu": phase_goodput(scn, "decode", par) / par.gpus,
                         "prefill_per_gpu": phase_goodput(scn, "prefill", par) / par.gpus})
    return rows


def _table(rows: list[dict]) -> str:
    cols = list(rows[0])
    cell = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)
    widths = [max(len(c), *(len(cell(r[c])) for r in rows)) for c in cols]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(cell(r[c]).ljust(w) for c, w in zip(cols, widths)) for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.planner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--what", choices=["mdl", "reference", "search", "moe", "all"], default="all")
    parser.add_argument("--workers", type=int, default=None, help="search processes (default: CPU cores)")
    args = parser.parse_args(argv)
    runs = {"mdl": lambda: mdl(), "reference": lambda: reference(workers=args.workers),
            "search": lambda: search_runtime(args.workers), "moe": moe}
    results = {}
    for name, run in runs.items():
        if args.what in (name, "all"):
            results[name] = run()
            print(f"\n== {name}\n{_table(results[name])}")
    print("\n" + json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
