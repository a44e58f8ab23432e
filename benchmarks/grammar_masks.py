"""What structured output costs a decode step: the time the sampler spends on grammar masks (llguidance fills one
bitmask row per constrained request, then one unpack and one masked fill for the batch) beside the whole step,
at batch 1, 8 and 32 on the small preset, every request under a JSON schema.

The schema keeps every request inside JSON for the whole run (an array of at least 200 short strings), so each
step's batch stays whole and its masks switch between string and structural states as agents' JSON does. Times
are this thread's CPU time (torch runs on it alone): other processes on the host do not count. The masks are
computed in the step, not beside it: this measures whether that is cheap enough.

Usage: python3 -m benchmarks.grammar_masks [--steps 40] [--batches 1,8,32] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch

from services.common.grammars import from_json_schema
from services.common.sampling import SamplingParams
from services.engine import sampler
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.make_model import make_model

SCHEMA = {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 200}


class MaskClock:
    """Wraps the sampler's mask function, adding up this thread's CPU time in it."""

    def __init__(self) -> None:
        self.inner = sampler.apply_masks
        self.seconds = 0.0

    def __call__(self, *args, **kwargs):
        start = time.thread_time()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.seconds += time.thread_time() - start


def measure(model: str, batch: int, steps: int) -> dict[str, float]:
    """Median CPU ms of the whole decode step and of its masks, over `steps` steps of `batch` constrained requests."""
    engine = LLMEngine(EngineConfig(model, num_blocks=2048, max_num_seqs=batch, max_batch_tokens=batch * 64))
    clock = MaskClock()
    sampler.apply_masks = clock
    try:
        grammar = from_json_schema(SCHEMA, "bench")
        for i in range(batch):
            engine.add_request(f"r{i}", [1, *range(40, 72)], SamplingParams(max_tokens=steps + 8, temperature=1.0,
                                                                             seed=i, grammar=grammar))
        step_ms, mask_ms = [], []
        while len(step_ms) < steps and engine.has_work():
            clock.seconds, start = 0.0, time.thread_time()
            outputs = engine.step()
            elapsed = time.thread_time() - start
            assert not any(o.finished for o in outputs), "a request left the batch: the schema ended it"
            if engine.last_step is not None and engine.last_step.kind == "decode":
                step_ms.append(1e3 * elapsed)
                mask_ms.append(1e3 * clock.seconds)
        return {"batch": batch, "step_ms": statistics.median(step_ms), "mask_ms": statistics.median(mask_ms),
                "mask_share": statistics.median(m / s for m, s in zip(mask_ms, step_ms)),
                "mask_us_per_request": 1e3 * statistics.median(mask_ms) / batch}
    finally:
        sampler.apply_masks = clock.inner
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model = str(make_model("small-llama", tmp))
        rows = [measure(model, int(b), args.steps) for b in args.batches.split(",")]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'batch':>5} {'step ms':>9} {'mask ms':>9} {'mask share':>11} {'us/request':>11}")
    for r in rows:
        print(f"{r['batch']:>5} {r['step_ms']:>9.2f} {r['mask_ms']:>9.3f} {100 * r['mask_share']:>10.2f}% "
              f"{r['mask_us_per_request']:>11.1f}")


if __name__ == "__main__":
    main()
