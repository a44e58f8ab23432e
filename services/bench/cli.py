"""`distserve bench`: goodput per device of one or several serving modes, measured by a rate sweep on the real
stack (or a running router), beside the planner's prediction; prints a table (or JSON) and writes PNGs."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import get_args

from services.bench.workload import SYSTEM_PROMPTS, THINK_S, WORKLOADS
from services.common.devices import split_devices
from services.common.engine_settings import add_engine_arguments, engine_fields
from services.engine.fingerprint import engine_fingerprint
from services.launcher.cores import cores_argument
from services.router.config import RouterSettings

MODES = ("disagg", "colocated", "chunked")
PROFILE_CACHE = Path.home() / ".cache" / "distserve" / "profiles"
QUICK = {"num_requests": 30, "min_requests": 12, "window_s": 10.0, "bisect_steps": 1, "max_steps": 3, "warmup": 4,
         "calibration": 20}


def _names(text: str, allowed: tuple[str, ...], flag: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise SystemExit(f"{flag}: expected a comma-separated subset of {', '.join(allowed)}, got {text!r}")
    return names


def ensure_profile(model_dir: str, device: str, given: str | None) -> str:
    """The given profile file, else this device's cached one, recorded by `distserve profile` on first use
    (again whenever the engine's code changes)."""
    if given:
        return given
    path = PROFILE_CACHE / f"{Path(model_dir).name}-{device.replace(':', '')}-{engine_fingerprint()}.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"profiling {model_dir} on {device} (once; cached in {path})", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "services", "--log-level", "WARNING", "profile", "--model", model_dir,
                        "--device", device, "--out", str(path), "--max-tokens", "2048"], check=True,
                       stdout=subprocess.DEVNULL)
    return str(path)


def _multiples(text: str, flag: str = "--overload") -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag}: comma-separated numbers, not {text!r}") from None
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"{flag}: positive multiples of the goodput, not {text!r}")
    return values


def _config(args: argparse.Namespace):
    from services.bench.runner import VARIED, BenchConfig
    from services.engine.presets import resolve_model

    if not args.start and not (args.router and args.redis_url):
        raise SystemExit("give --start, or --router and --redis-url of a running stack")
    modes = _names(args.compare, MODES, "--compare") if args.compare else (args.mode,)
    if not args.start and (len(modes) > 1 or args.vary or args.other_devices):
        raise SystemExit("--compare, --vary and --other-devices start a stack per variant: they need --start")
    workloads = _names(args.workload, WORKLOADS, "--workload")
    if args.simulate and "multi-turn" in workloads:
        raise SystemExit("--simulate: the simulator has no conversations (think time, cached history); "
                         "leave out multi-turn")
    if args.at_knee and (not args.simulate or args.rate):
        raise SystemExit("--at-knee measures multiples of the fitted simulator's knee: it needs --simulate, and no --rate")
    model = resolve_model(args.model)
    devices = split_devices(args.devices)
    seconds = args.ttft is not None and args.tpot is not None
    profile = ensure_profile(model, devices[0], args.profile) if (args.simulate or not seconds or args.profile) else ""
    fields = {**(QUICK if args.quick else {}),
              **{k: v for k, v in (("num_requests", args.num_requests), ("bisect_steps", args.bisect_steps),
                                       ("max_steps", args.max_steps), ("calibration", args.calibration),
                                       ("window_s", args.window)) if v is not None}}
    return BenchConfig(
        model=model, modes=modes, workloads=workloads, devices=devices,
        other_devices=tuple(split_devices(part) for part in args.other_devices.split(";") if part.strip()),
        start=args.start, router=args.router or "", redis_url=args.redis_url or "", prompt_scale=args.prompt_scale,
        output_scale=args.output_scale, cv=args.cv, seed=args.seed, think_s=args.think_time,
        system_prompts=args.system_prompts, routing=args.routing,
        vary=_names(args.vary, VARIED, "--vary") if args.vary else (), ttft=args.ttft, tpot=args.tpot, ttft_scale=args.ttft_scale,
        tpot_scale=args.tpot_scale, slo_scale=args.slo_scale, target=args.attainment, rate=args.rate,
        start_rate=args.start_rate, factor=args.factor, simulate=args.simulate, profile=profile,
        **engine_fields(args), calibration_rate=args.calibration_rate,
        repeats=args.repeats, repeat_within=args.repeat_within, service_cores=args.service_cores,
        overload=args.overload, at_knee=args.at_knee, **fields)


def _bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from services.bench.plots import write_plots
    from services.bench.report import document, print_tables
    from services.bench.runner import Bench

    cfg = _config(args)
    began = time.monotonic()
    err = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, disable=args.no_progress) as progress:
        results = Bench(cfg, progress).run()
    doc = document(results, asdict(cfg), time.monotonic() - began)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    pngs = write_plots(results, out) if not args.no_plots else []
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print_tables(results, Console(width=max(Console().width, 160)))
    err.print(f"{doc['wall_s']:.0f} s; JSON and {len(pngs)} PNGs in {out}/")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="goodput per device by a rate sweep (load generator), measured and simulated")
    where = p.add_argument_group("what to serve")
    where.add_argument("--start", action="store_true", help="start the stack (per mode) on --devices")
    where.add_argument("--router", default="", help="gRPC address of a running router (without --start)")
    where.add_argument("--redis-url", default="", help="its Redis (request records; without --start)")
    where.add_argument("--mode", choices=MODES, default="disagg", help="mode of the running router")
    where.add_argument("--compare", default="", help="modes to compare with --start, e.g. disagg,colocated,chunked")
    where.add_argument("--model", default=None, help="model folder or preset (default small-llama)")
    where.add_argument("--devices", default="cpu:0,cpu:1", help="devices; disagg puts the first half on prefill")
    where.add_argument("--other-devices", default="", help="with --start: further device sets, ';'-separated, each mode "
                       "also served on each, e.g. cpu:0-1 against --devices cpu:0,cpu:1 (per device: per core; the "
                       "simulator's predictions only for --devices, the profile's)")
    add_engine_arguments(where)
    where.add_argument("--routing", choices=get_args(RouterSettings.model_fields["routing"].annotation),
                       default=RouterSettings.model_fields["routing"].default,
                       help="with --start: " + RouterSettings.model_fields["routing"].description)
    where.add_argument("--vary", default="", help="with --start: also run each mode with these settings flipped, every "
                       "combination: prefix-caching, routing (disagg), e.g. prefix-caching")
    where.add_argument("--service-cores", type=cores_argument, default="auto", help="with --start: CPU cores of the router and "
                       "Redis: auto (disagg on CPU: the prefill instances' cores; else any), any, or e.g. 0")
    load = p.add_argument_group("workload")
    load.add_argument("--workload", default="chatbot", help="comma-separated: " + ", ".join(WORKLOADS) + " (the last "
                      "two share prefixes: conversations whose turns resend the history, and a few shared system prompts)")
    load.add_argument("--prompt-scale", type=float, default=0.25, help="multiplies the planner's prompt lengths")
    load.add_argument("--output-scale", type=float, default=0.5, help="multiplies the planner's output lengths")
    load.add_argument("--cv", type=float, default=1.0, help="inter-arrival CV: 1 Poisson, else gamma")
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--think-time", type=float, default=THINK_S,
                      help="multi-turn: mean seconds (exponential) from an answer to the next turn")
    load.add_argument("--system-prompts", type=int, default=SYSTEM_PROMPTS,
                      help="shared-prompt: how many distinct system prompts the requests draw from (uniformly)")
    load.add_argument("--num-requests", type=int, default=None, help="requests per rate, at most (default 100; quick 30)")
    load.add_argument("--window", type=float, default=None,
                      help="a rate sends the requests arriving within this many seconds, within --num-requests and "
                           "30 (default 40; quick 10); a longer window shrinks the sampling noise of attainment")
    slo = p.add_argument_group("SLO")
    slo.add_argument("--ttft", type=float, default=None, help="TTFT objective in seconds (with --tpot: no scaling)")
    slo.add_argument("--tpot", type=float, default=None, help="TPOT objective in seconds")
    slo.add_argument("--ttft-scale", type=float, default=5.0, help="TTFT = this × the profiled lone-prompt TTFT")
    slo.add_argument("--tpot-scale", type=float, default=2.0, help="TPOT = this × the profiled lone decode step")
    slo.add_argument("--slo-scale", type=float, default=1.0, help="multiplies both objectives")
    slo.add_argument("--attainment", type=float, default=0.9, help="share of requests that must meet both")
    sweep = p.add_argument_group("rates")
    sweep.add_argument("--rate", type=float, default=None, help="measure this rate only (and the tightest SLO scale)")
    sweep.add_argument("--start-rate", type=float, default=None, help="first rate (default: half the simulated goodput)")
    sweep.add_argument("--factor", type=float, default=1.5, help="rate step before bisection")
    sweep.add_argument("--bisect-steps", type=int, default=None, help="bisections after the crossing (default 2; quick 1)")
    sweep.add_argument("--max-steps", type=int, default=None, help="rate steps in one direction at most (default 5; quick 3)")
    sweep.add_argument("--repeats", type=int, default=1,
                       help="runs of a rate at most: while the pooled attainment of its runs lies within "
                            "--repeat-within standard errors of the target, the same requests run again (default 1)")
    sweep.add_argument("--repeat-within", type=float, default=2.0, help="standard errors (default 2)")
    sweep.add_argument("--overload", type=_multiples, default=(),
                       help="with disagg: multiples of its goodput (e.g. 1.5,2) run with SLO-aware admission off and on")
    sweep.add_argument("--at-knee", type=lambda t: _multiples(t, "--at-knee"), default=(),
                       help="instead of the search (with --simulate): these multiples of the fitted simulator's knee "
                            "(e.g. 0.8,1,1.2), found after the calibration load; every point and --overload run then "
                            "sends exactly --num-requests requests (--window sizes the calibration load only)")
    sweep.add_argument("--quick", action="store_true", help="fewer requests and probes: the comparison in minutes")
    pred = p.add_argument_group("prediction")
    pred.add_argument("--simulate", action="store_true", help="the planner's simulated attainment beside each point")
    pred.add_argument("--profile", default=None, help="profile file (default: recorded once per device and cached)")
    pred.add_argument("--calibration", type=int, default=None,
                      help="requests of the calibration load whose served steps the model is fitted to, at least (default 40; "
                           "quick 20; more when the window at its rate holds more)")
    pred.add_argument("--calibration-rate", type=float, default=None,
                      help="its rate in req/s (default: the first workload's start rate)")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    out.add_argument("--out", default="bench-out", help="folder for results.json and the PNGs")
    out.add_argument("--no-plots", action="store_true")
    out.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_bench)
