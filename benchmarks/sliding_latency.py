"""Does a sliding-window model's step time follow the latency model's terms per layer group (docs/planner.md)?

Times prefills and decode steps of a sliding-window model and of the same model with every layer full (by default
small-mistral, window 256, against small-llama: the same shapes) on one core, at prompts and contexts from the
window to 8x it, interleaved, median of repeats; prints the measured times beside what the planner's lines
predict once fitted to the sliding model's points within the window, with the attention terms per layer group
(a sliding layer reads its window: `Attended`) and with every token of every layer (the planner before them).
`python3 -m benchmarks.sliding_latency [--sliding small-mistral] [--full small-llama] [--json]`
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import torch

from services.common.step_model.attended import FULL, Attended
from services.common.step_model.profile_fit import fit_decode, fit_prefill
from services.engine.device import setup_device
from services.engine.presets import resolve_model
from services.planner.engine_timing import engine_timers, open_engine
from services.planner.shapes import load_shape

Timer = Callable[[list[int]], float]
BATCH = 8  # decode steps of this many sequences


def timers(model: str, max_tokens: int) -> tuple[Timer, Timer, Callable[[], None]]:
    engine = open_engine(resolve_model(model), setup_device("cpu:0"), max_tokens)
    return (*engine_timers(engine), engine.close)


def median(timer: Timer, batch: list[int], repeats: int) -> float:
    timer(batch)
    return statistics.median(timer(batch) for _ in range(repeats))


def predictions(within: dict[str, list[tuple[int, float]]], attended: Attended, lengths: list[int]) -> dict:
    """The lines fitted to the points within the window, then evaluated at `lengths` with these attention terms."""
    prefill = fit_prefill([(n, attended.prompt_sq(n, 0), s) for n, s in within["prefill"]])
    decode = fit_decode([(BATCH * attended.context(c), BATCH, s) for c, s in within["decode"]])
    return {"prefill": [prefill.seconds(n, attended.prompt_sq(n, 0)) for n in lengths],
            "decode": [decode.seconds(BATCH * attended.context(c), BATCH) for c in lengths]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sliding", default="small-mistral")
    ap.add_argument("--full", default="small-llama", help="the same shapes, every layer full")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    shape = load_shape(resolve_model(args.sliding))
    w = shape.window
    if not w:
        raise SystemExit(f"{args.sliding} has no sliding layers")
    fit_lengths = [w // 8, w // 4, w // 2, w]
    lengths = [w, 2 * w, 4 * w, 8 * w]
    models = {args.sliding: timers(args.sliding, BATCH * lengths[-1]), args.full: timers(args.full, BATCH * lengths[-1])}
    measured: dict[str, dict[str, list[float]]] = {m: {"prefill": [], "decode": []} for m in models}
    try:
        for n in lengths:  # the two models in turn at each length, so drift touches both alike
            for name, (prefill, decode, _) in models.items():
                measured[name]["prefill"].append(median(prefill, [n], args.repeats))
                measured[name]["decode"].append(median(decode, [n] * BATCH, args.repeats))
        prefill, decode, _ = models[args.sliding]
        within = {"prefill": [(n, median(prefill, [n], args.repeats)) for n in fit_lengths],
                  "decode": [(c, median(decode, [c] * BATCH, args.repeats)) for c in fit_lengths]}
    finally:
        for *_, close in models.values():
            close()
    result = {"window": w, "lengths": lengths, "measured": measured,
              "per_group": predictions(within, shape.attended, lengths),
              "every_token": predictions(within, FULL, lengths)}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"ms on one core; {args.sliding}: window {w}, {shape.sliding_layers}/{shape.layers} layers sliding; "
          f"predicted: lines fitted within the window")
    for phase, what in (("prefill", "prefill of one prompt"), ("decode", f"decode step of {BATCH}")):
        print(f"{what} at {', '.join(map(str, lengths))} tokens")
        rows = [(f"{args.full} (measured)", measured[args.full][phase]),
                (f"{args.sliding} (measured)", measured[args.sliding][phase]),
                ("  predicted per layer group", result["per_group"][phase]),
                ("  predicted every token", result["every_token"][phase])]
        for label, values in rows:
            print(f"  {label:34}" + "".join(f"{v * 1e3:10.2f}" for v in values))


if __name__ == "__main__":
    main()
