"""`python -m benchmarks.engine`: the engine's prefill and decode speed beside the same core's matmul and memcpy rates.

Prefill is compared with plain matmuls of the model's own shapes (how close to compute-bound it runs);
decode at batch 1 with the bytes a step must read (weights + KV) at memcpy bandwidth (memory-bound).
Every time is this thread's CPU time, best of several runs, so other processes sharing the core do not
count against the engine or the references (on an idle core it equals wall time); on a multi-core device
(`cpu:0-1`) it is wall time, the other threads' work being no part of this thread's.

`--layouts 1x1,2x1,1x2` times TP x PP instances instead: prefill and decode step wall times (the ranks run in other
processes), best of several runs; each rank pinned to one core, the cores taken in order and reused round robin
when the layout has more ranks than the host has cores. A suffix `epE` sets a MoE instance's expert groups
(`2x1ep1,2x1ep2`: each expert split over both ranks, or whole experts on each; none: EP = TP). `--devices cpu:0,cpu:0-1` times one instance on each device
the same way (threads on several cores), with its speed-up over the first and the host's load average beside it.

    python3 -m benchmarks.engine [--model small-llama] [--device cpu:0] [--json] [--layouts 1x1,2x1,1x2]
    python3 -m benchmarks.engine --model small-mixtral --layouts 2x1ep1,2x1ep2 --rounds 3
    python3 -m benchmarks.engine --model medium-llama --devices cpu:0,cpu:0-1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from services.common import defaults
from services.common.devices import split_devices
from services.common.model_config import ModelConfig
from services.common.sampling import SamplingParams
from services.engine.device import setup_device
from services.engine.engine import EngineConfig, LLMEngine

PREFILL_TOKENS = 512
DECODE_BATCHES = (1, 8, 32)
DECODE_CONTEXT = 128  # prompt tokens of each decoding request
DECODE_STEPS = 16
REPEATS = 3
MEMCPY_BYTES = 256 << 20  # well past the last-level cache
GOAL = 0.5


def clock() -> float:
    """This thread's CPU time where torch runs single-threaded in it (`cpu:N`: all the work, and other processes on
    the core do not count), else wall time (`cpu:a-b`: the other threads' work is not this thread's)."""
    return time.thread_time() if torch.get_num_threads() == 1 else time.perf_counter()


def _best_seconds(fn: Callable[[], object], repeats: int = REPEATS, timer: Callable[[], float] = clock) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = timer()
        fn()
        times.append(timer() - t0)
    return min(times)


def linear_shapes(mc: ModelConfig) -> list[tuple[int, int]]:
    """(in, out) of one decoder layer's matmuls."""
    h, q, kv, i = mc.hidden_size, mc.num_heads * mc.head_dim, mc.num_kv_heads * mc.head_dim, mc.intermediate_size
    if mc.arch == "opt":
        return [(h, h)] * 4 + [(h, i), (i, h)]
    return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]


def prefill_flops(mc: ModelConfig, tokens: int) -> float:
    """Useful FLOPs of one prompt: the layers' matmuls, causal attention, and the head for the last token."""
    linear = 2 * tokens * mc.num_layers * sum(a * b for a, b in linear_shapes(mc))
    attention = 2 * 2 * mc.num_layers * mc.num_heads * mc.head_dim * tokens * (tokens + 1) / 2
    return linear + attention + 2 * mc.hidden_size * mc.vocab_size


def matmul_flops_per_s(mc: ModelConfig, tokens: int, dtype: torch.dtype) -> float:
    """Plain `F.linear` over one layer's weight shapes at `tokens` rows: the core's attainable matmul rate."""
    weights = [torch.randn(b, a, dtype=dtype) for a, b in linear_shapes(mc)]
    inputs = {a: torch.randn(tokens, a, dtype=dtype) for a, _ in linear_shapes(mc)}
    seconds = _best_seconds(lambda: [F.linear(inputs[w.shape[1]], w) for w in weights])
    return 2 * tokens * sum(a * b for a, b in linear_shapes(mc)) / seconds


def memcpy_bytes_per_s() -> float:
    """Bytes read plus written per second by one large copy (the STREAM convention)."""
    src = torch.ones(MEMCPY_BYTES // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    return 2 * MEMCPY_BYTES / _best_seconds(lambda: dst.copy_(src))


def gemv_bytes_per_s(engine: LLMEngine) -> float:
    """Weight bytes per second of plain `F.linear` at batch 1 over the model's own linear layers."""
    linears = [m for m in engine.runner.model.modules() if isinstance(m, nn.Linear)]
    inputs = {m.in_features: torch.randn(1, m.in_features, dtype=m.weight.dtype) for m in linears}
    with torch.inference_mode():
        seconds = _best_seconds(lambda: [F.linear(inputs[m.in_features], m.weight) for m in linears])
    return sum(m.weight.numel() * m.weight.element_size() for m in linears) / seconds


def weight_bytes(engine: LLMEngine) -> int:
    """Parameter bytes a decode step reads; an untied embedding table is only looked up, a row per token."""
    model, mc = engine.runner.model, engine.model_config
    lookups = {"model.decoder.embed_positions.weight"} | (set() if mc.tie_embeddings else {
        "model.embed_tokens.weight", "model.decoder.embed_tokens.weight"})
    return sum(p.numel() * p.element_size() for name, p in model.named_parameters() if name not in lookups)


def kv_bytes(engine: LLMEngine, tokens: int) -> int:
    return engine.layout.block_bytes // engine.layout.block_size * tokens


def _prompt(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(3, vocab) for _ in range(n)]


def bench_prefill(engine: LLMEngine, rng: random.Random, timer: Callable[[], float] = clock) -> float:
    """Seconds of one step that prefills a PREFILL_TOKENS prompt (and samples its first token)."""
    vocab = engine.model_config.vocab_size

    def one() -> None:
        engine.add_request(f"prefill-{rng.getrandbits(32)}", _prompt(rng, PREFILL_TOKENS, vocab), SamplingParams(max_tokens=1))
        engine.step()

    return _best_seconds(one, timer=timer)


def bench_decode(engine: LLMEngine, batch: int, rng: random.Random, timer: Callable[[], float] = clock) -> float:
    """Seconds of one decode step of `batch` requests at about DECODE_CONTEXT tokens of context."""
    vocab = engine.model_config.vocab_size
    rids = [f"decode-{batch}-{i}" for i in range(batch)]
    for rid in rids:
        engine.add_request(rid, _prompt(rng, DECODE_CONTEXT, vocab), SamplingParams(max_tokens=DECODE_STEPS + 2, ignore_eos=True))
    while engine.scheduler.waiting or any(s.num_computed < len(s.prompt_ids) for s in engine.scheduler.running):
        engine.step()
    engine.step()  # warm-up decode
    seconds = float("inf")
    for _ in range(DECODE_STEPS):  # best step, as the references are best runs: a shared core has bursts
        t0 = timer()
        engine.step()
        seconds = min(seconds, timer() - t0)
    for rid in rids:
        engine.abort(rid)
    return seconds


def _engine(model_dir: str, device: str, dev: torch.device) -> LLMEngine:
    block_size = defaults.BLOCK_SIZE
    tokens = DECODE_BATCHES[-1] * (DECODE_CONTEXT + DECODE_STEPS + 2) + PREFILL_TOKENS
    config = EngineConfig(model_dir, device=device, block_size=block_size, num_blocks=tokens // block_size + 64,
                          max_batch_tokens=PREFILL_TOKENS, max_num_seqs=DECODE_BATCHES[-1])
    return LLMEngine(config, dev)


def measure(model_dir: str, device: str) -> dict:
    dev = setup_device(device)
    mc = ModelConfig.from_folder(model_dir)
    engine = _engine(model_dir, device, dev)
    rng = random.Random(0)

    def references() -> tuple[float, float, float]:
        return matmul_flops_per_s(mc, PREFILL_TOKENS, torch.float32), memcpy_bytes_per_s(), gemv_bytes_per_s(engine)

    try:
        before = references()
        prefill_s = bench_prefill(engine, rng)
        decode = []
        for batch in DECODE_BATCHES:
            step_s = bench_decode(engine, batch, rng)
            read = weight_bytes(engine) + batch * kv_bytes(engine, DECODE_CONTEXT + DECODE_STEPS // 2)
            decode.append({"batch": batch, "step_ms": 1e3 * step_s, "tokens_per_s": batch / step_s,
                           "bytes_per_step": read, "gb_per_s": read / step_s / 1e9})
        # references before and after the engine, the best kept: a burst of other load cannot flatter a ratio
        matmul, memcpy, gemv = (max(a, b) for a, b in zip(before, references()))
    finally:
        engine.close()
    for d in decode:
        d["bandwidth_ratio"] = d["gb_per_s"] * 1e9 / memcpy
    prefill_rate = prefill_flops(mc, PREFILL_TOKENS) / prefill_s
    return {
        "model": model_dir, "device": device, "threads": torch.get_num_threads(),
        "clock": "thread CPU time" if torch.get_num_threads() == 1 else "wall time",
        "matmul_gflops": matmul / 1e9, "memcpy_gb_per_s": memcpy / 1e9, "gemv_gb_per_s": gemv / 1e9,
        "prefill": {"tokens": PREFILL_TOKENS, "seconds": prefill_s, "tokens_per_s": PREFILL_TOKENS / prefill_s,
                    "gflops": prefill_rate / 1e9},
        "decode": decode,
        "prefill_flops_ratio": prefill_rate / matmul,
        "decode_bandwidth_ratio": decode[0]["bandwidth_ratio"],
        "decode_vs_gemv": decode[0]["gb_per_s"] * 1e9 / gemv,  # what plain torch reaches on these weights
        "goal": GOAL,
    }


def _table(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"benchmarks.engine {r['model']} on {r['device']} ({r['threads']} thread(s), {r['clock']})")
    for col in ("phase", "time", "tokens/s", "achieved", "core reference", "ratio"):
        table.add_column(col, justify="right" if col != "phase" else "left")
    p = r["prefill"]
    table.add_row(f"prefill {p['tokens']} tokens", f"{p['seconds'] * 1e3:.1f} ms", f"{p['tokens_per_s']:.0f}",
                  f"{p['gflops']:.1f} GFLOP/s", f"matmul {r['matmul_gflops']:.1f} GFLOP/s", f"{r['prefill_flops_ratio']:.2f}")
    for d in r["decode"]:
        table.add_row(f"decode batch {d['batch']}", f"{d['step_ms']:.1f} ms/step", f"{d['tokens_per_s']:.0f}",
                      f"{d['gb_per_s']:.2f} GB/s read", f"memcpy {r['memcpy_gb_per_s']:.2f} GB/s", f"{d['bandwidth_ratio']:.2f}")
    table.add_row("plain F.linear, batch 1", "", "", f"{r['gemv_gb_per_s']:.2f} GB/s read",
                  f"memcpy {r['memcpy_gb_per_s']:.2f} GB/s", f"{r['gemv_gb_per_s'] / r['memcpy_gb_per_s']:.2f}")
    console = Console()
    console.print(table)
    console.print(f"goals (>= {r['goal']:.0%}): prefill of matmul {r['prefill_flops_ratio']:.0%}, "
                  f"decode batch 1 of memory bandwidth {r['decode_bandwidth_ratio']:.0%} "
                  f"({r['decode_vs_gemv']:.0%} of plain F.linear on the same weights)")


def run_bench_engine(model_dir: str, device: str, as_json: bool) -> int:
    result = measure(model_dir, device)
    if as_json:
        print(json.dumps(result))
    else:
        _table(result)
    return 0



LAYOUT_BATCHES = (1, 8)


def parse_layouts(text: str) -> list[tuple[int, int, int]]:
    """`2x1,1x2,2x1ep1` → [(2, 1, 0), (1, 2, 0), (2, 1, 1)] (TP x PP, expert groups; 0: EP = TP)."""
    try:
        return [(int(tp), int(pp), int(ep or 0)) for tp, rest in (item.split("x") for item in text.split(",") if item)
                for pp, _, ep in [rest.partition("ep")]]
    except ValueError:
        raise SystemExit(f"--layouts: {text!r} is not a list of TPxPP[epE] such as 1x1,2x1,1x2,2x1ep1") from None


def measure_layout(model_dir: str, tp: int, pp: int, devices: tuple[str, ...], ep: int = 0) -> dict:
    """Wall times of an instance of TP x PP ranks on `devices` (one per rank), `ep` expert groups (0: EP = TP)."""
    setup_device(devices[0])
    blocks = (max(LAYOUT_BATCHES) * (DECODE_CONTEXT + DECODE_STEPS + 2) + PREFILL_TOKENS) // 16 + 64
    engine = LLMEngine(EngineConfig(model_dir, block_size=16, num_blocks=blocks, max_batch_tokens=PREFILL_TOKENS,
                                    max_num_seqs=max(LAYOUT_BATCHES), tp=tp, pp=pp, ep=ep, devices=devices))
    rng = random.Random(0)
    load = os.getloadavg()[0]
    try:
        prefill = bench_prefill(engine, rng, timer=time.perf_counter)
        decode = {b: bench_decode(engine, b, rng, timer=time.perf_counter) for b in LAYOUT_BATCHES}
    finally:
        engine.close()
    return {"tp": tp, "pp": pp, "ep": ep or tp, "devices": list(devices), "threads": torch.get_num_threads(),
            "load_1min": [round(load, 2), round(os.getloadavg()[0], 2)], "prefill_ms": round(prefill * 1e3, 2),
            **{f"decode_b{b}_ms": round(s * 1e3, 2) for b, s in decode.items()}}


def with_speedups(rows: list[dict]) -> list[dict]:
    """Each row's speed over the first row's (its time divided by theirs), per phase."""
    first = rows[0]
    keys = [k for k in first if k.endswith("_ms")]
    return [{**r, **{f"{k[:-3]}_speedup": round(first[k] / r[k], 2) for k in keys}} for r in rows]


def run_bench_layouts(model_dir: str, layouts: list[tuple[int, int, int]], devices: tuple[str, ...], as_json: bool,
                      rounds: int = 1) -> int:
    """`layouts`: TP x PP instances on one core per rank; else one instance on each of `devices`. With `rounds`,
    every one is measured that many times in turn (A, B, A, B...) and each phase's best kept: a drift of the host
    between two sets' measurements then shows in neither."""
    cores = sorted(os.sched_getaffinity(0))  # before the first layout pins this process
    if layouts:
        runs = [(tp, pp, ep, tuple(f"cpu:{cores[r % len(cores)]}" for r in range(tp * pp))) for tp, pp, ep in layouts]
    else:
        runs = [(1, 1, 0, (device,)) for device in devices]
    best: list[dict] = []
    for _ in range(rounds):
        for i, (tp, pp, ep, on) in enumerate(runs):
            os.sched_setaffinity(0, cores)  # the previous instance's pinning is not this one's
            row = measure_layout(model_dir, tp, pp, on, ep)
            if i == len(best):
                best.append(row)
            else:  # the best of each phase; the load column spans the rounds
                best[i] = {**row, **{k: min(best[i][k], row[k]) for k in row if k.endswith("_ms")},
                           "load_1min": [best[i]["load_1min"][0], row["load_1min"][1]]}
    rows = with_speedups(best)
    if as_json:
        print(json.dumps(rows))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"benchmarks.engine {model_dir}: wall ms, best of runs and {rounds} round(s); speed-up over "
                        "the first row")
    for col in ("TP x PP", "EP", "devices", "threads", "load 1 min", f"prefill {PREFILL_TOKENS}",
                *(f"decode step b{b}" for b in LAYOUT_BATCHES)):
        table.add_column(col, justify="left" if col in ("TP x PP", "devices") else "right")
    for r in rows:
        table.add_row(f"{r['tp']} x {r['pp']}", str(r["ep"]), " ".join(r["devices"]), str(r["threads"]),
                      " → ".join(map(str, r["load_1min"])), f"{r['prefill_ms']:.1f} ({r['prefill_speedup']:.2f}x)",
                      *(f"{r[f'decode_b{b}_ms']:.2f} ({r[f'decode_b{b}_speedup']:.2f}x)" for b in LAYOUT_BATCHES))
    Console().print(table)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model folder or preset")
    parser.add_argument("--device", default="cpu:0")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--layouts", default="", help="TPxPP instances to time instead, e.g. 1x1,2x1,1x2: prefill and "
                                                      "decode step wall times, a core per rank; 2x1ep1: a MoE "
                                                      "instance's expert groups")
    parser.add_argument("--devices", default="", help="one instance on each of these devices to time instead, e.g. "
                                                      "cpu:0,cpu:0-1: wall times and speed-ups over the first")
    parser.add_argument("--rounds", type=int, default=1, help="with --layouts/--devices: measure each that many times "
                                                              "in turn and keep each phase's best")
    args = parser.parse_args(argv)
    from services.engine.presets import resolve_model

    if args.layouts or args.devices:
        layouts = parse_layouts(args.layouts) if args.layouts else []
        return run_bench_layouts(resolve_model(args.model), layouts, split_devices(args.devices), args.json,
                                 max(args.rounds, 1))
    return run_bench_engine(resolve_model(args.model), args.device, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
