"""`distserve bench-engine --layouts 1x1,2x1,1x2`: prefill and decode step times of TP x PP instances.

Wall-clock times (the ranks run in other processes), best of several runs; each rank pinned to one core, the
cores taken in order and reused round robin when the layout has more ranks than the host has cores.
"""

from __future__ import annotations

import json
import os
import random
import time

from services.engine.bench import DECODE_CONTEXT, DECODE_STEPS, PREFILL_TOKENS, bench_decode, bench_prefill
from services.engine.device import setup_device
from services.engine.engine import EngineConfig, LLMEngine

BATCHES = (1, 8)


def parse_layouts(text: str) -> list[tuple[int, int]]:
    """`2x1,1x2` → [(2, 1), (1, 2)] (TP x PP)."""
    try:
        return [(int(tp), int(pp)) for tp, pp in (item.split("x") for item in text.split(",") if item)]
    except ValueError:
        raise SystemExit(f"--layouts: {text!r} is not a list of TPxPP such as 1x1,2x1,1x2") from None


def measure_layout(model_dir: str, tp: int, pp: int, cores: list[int]) -> dict:
    devices = tuple(f"cpu:{cores[r % len(cores)]}" for r in range(tp * pp))
    setup_device(devices[0])
    blocks = (max(BATCHES) * (DECODE_CONTEXT + DECODE_STEPS + 2) + PREFILL_TOKENS) // 16 + 64
    engine = LLMEngine(EngineConfig(model_dir, block_size=16, num_blocks=blocks, max_batch_tokens=PREFILL_TOKENS,
                                    max_num_seqs=max(BATCHES), tp=tp, pp=pp, devices=devices))
    rng = random.Random(0)
    try:
        prefill = bench_prefill(engine, rng, timer=time.perf_counter)
        decode = {b: bench_decode(engine, b, rng, timer=time.perf_counter) for b in BATCHES}
    finally:
        engine.close()
    return {"tp": tp, "pp": pp, "devices": list(devices), "prefill_ms": round(prefill * 1e3, 2),
            **{f"decode_b{b}_ms": round(s * 1e3, 2) for b, s in decode.items()}}


def run_bench_layouts(model_dir: str, layouts: list[tuple[int, int]], as_json: bool) -> int:
    cores = sorted(os.sched_getaffinity(0))  # before the first layout pins this process
    rows = [measure_layout(model_dir, tp, pp, cores) for tp, pp in layouts]
    if as_json:
        print(json.dumps(rows))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"bench-engine --layouts {model_dir}: wall ms, best of runs")
    for col in ("TP x PP", "devices", f"prefill {PREFILL_TOKENS}", *(f"decode step b{b}" for b in BATCHES)):
        table.add_column(col, justify="left" if col in ("TP x PP", "devices") else "right")
    for r in rows:
        table.add_row(f"{r['tp']} x {r['pp']}", ",".join(r["devices"]), f"{r['prefill_ms']:.1f}",
                      *(f"{r[f'decode_b{b}_ms']:.2f}" for b in BATCHES))
    Console().print(table)
    return 0
