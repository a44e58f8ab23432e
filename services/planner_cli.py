"""`distserve planner` (REST API), `distserve plan` (placement table and attainment plot), `distserve profile`
(latency profile on the real engine), `distserve parallel-fit` (the parallel model from TP/PP profiles)."""

from __future__ import annotations

import argparse
import json

from services.common.devices import cpu_cores, cpu_device, split_devices
from services.common.settings_cli import add_settings_arguments, settings_values
from services.deploy.cli import (
    add_actuator_arguments,
    add_emit_arguments,
    deployment_actuator,
    emit,
)
from services.planner.config import PlannerSettings
from services.planner.schemas import (
    ClusterBody,
    PlanRequest,
    PrefixHitsBody,
    SLOBody,
    WorkloadBody,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser("planner", help="serve the planner REST API (OpenAPI at /docs)")
    add_settings_arguments(serve, PlannerSettings)
    add_actuator_arguments(serve)
    serve.set_defaults(func=_serve)

    plan = subparsers.add_parser("plan", help="find the goodput-optimal placement and plot attainment vs rate")
    plan.add_argument("--model", default="opt-13b", help="preset name or model folder")
    plan.add_argument("--hardware", default="a100-80gb", help="shipped coefficient set, profile file, or profiles of "
                      "TP/PP layouts (comma-separated, or a folder): the parallel model is fitted to them")
    plan.add_argument("--nodes", type=int, default=1)
    plan.add_argument("--gpus-per-node", type=int, default=4)
    plan.add_argument("--gpu-memory-gb", type=float, default=80.0)
    plan.add_argument("--intra-node-gbps", type=float, default=2400.0)
    plan.add_argument("--inter-node-gbps", type=float, default=200.0)
    plan.add_argument("--workload", default="chatbot", choices=["chatbot", "code", "summarization"])
    plan.add_argument("--input-len", type=int, help="fixed prompt length (overrides --workload)")
    plan.add_argument("--output-len", type=int, help="fixed output length (with --input-len)")
    plan.add_argument("--arrival-cv", type=float, default=1.0, help="1: Poisson; else gamma with this CV")
    plan.add_argument("--prefix-hits", default=None, help="prompt tokens found in the prefix cache: a JSON object "
                      "{edges, quantiles} (the body's workload.prefix_hits, GET /v1/workload's form) or a file of one")
    plan.add_argument("--ttft", type=float, default=0.2, help="TTFT objective, s")
    plan.add_argument("--tpot", type=float, default=0.1, help="TPOT objective, s")
    plan.add_argument("--attainment", type=float, default=0.9)
    plan.add_argument("--algorithm", default="high-affinity", choices=["high-affinity", "low-affinity"])
    plan.add_argument("--rate", type=float, default=None, help="rate to serve, req/s (default: best per GPU)")
    plan.add_argument("--num-requests", type=int, default=2000)
    plan.add_argument("--seed", type=int, default=0)
    plan.add_argument("--workers", type=int, default=None)
    plan.add_argument("--launchable", action="store_true", help="only layouts distserve's engine launches (MoE: "
                                                                 "experts within each instance's TP ranks)")
    plan.add_argument("--plot", default="plan.png", help="attainment vs rate PNG ('' for none)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON instead of a table")
    add_emit_arguments(plan)
    plan.set_defaults(func=_plan)

    prof = subparsers.add_parser("profile", help="time prefill and decode on the real engine; write a profile file")
    prof.add_argument("--model", required=True, help="model folder or preset (made on first use)")
    prof.add_argument("--device", default="cpu:0", help="cpu:N (one pinned core), cpu:a-b (those cores, a thread on each) or cuda:N")
    prof.add_argument("--out", default="profile.json", help="profile file to write")
    prof.add_argument("--max-tokens", type=int, default=4096, help="largest batch in tokens")
    prof.add_argument("--repeats", type=int, default=3, help="timed runs per shape (median kept)")
    prof.add_argument("--best-of", type=int, default=1, help="each timed run the best of this many (a host shared "
                      "with other work: its bursts left out)")
    prof.add_argument("--tp", type=int, default=1, help="profile a tensor-parallel instance of this many ranks per stage")
    prof.add_argument("--pp", type=int, default=1, help="... and this many pipeline stages")
    prof.add_argument("--devices", default="", help="comma-separated device per rank (default: consecutive from --device)")
    prof.set_defaults(func=_profile)

    fit = subparsers.add_parser("parallel-fit", help="fit the planner's parallel model (intra-op speed-up K, "
                                "pipeline stage cost) to profiles of TP/PP layouts; print it")
    fit.add_argument("profiles", help="a folder of profile files, or several comma-separated (TP 1 x PP 1 among them)")
    fit.add_argument("--json", action="store_true")
    fit.set_defaults(func=_parallel_fit)


def _serve(args: argparse.Namespace) -> int:
    from services.planner.__main__ import serve

    serve(PlannerSettings(**settings_values(args, PlannerSettings)), deployment_actuator(args))
    return 0


def prefix_hits(value: str | None) -> PrefixHitsBody | None:
    """--prefix-hits: inline JSON, or the path of a file of it."""
    if value is None:
        return None
    if not value.lstrip().startswith("{"):
        with open(value) as f:
            value = f.read()
    return PrefixHitsBody.model_validate_json(value)


def plan_request(args: argparse.Namespace) -> PlanRequest:
    hits = prefix_hits(args.prefix_hits)
    if args.input_len is not None:
        workload = WorkloadBody(input_len=args.input_len, output_len=args.output_len, arrival_cv=args.arrival_cv,
                                prefix_hits=hits)
    else:
        workload = WorkloadBody(name=args.workload, arrival_cv=args.arrival_cv, prefix_hits=hits)
    return PlanRequest(
        model=args.model, hardware=args.hardware, workload=workload, algorithm=args.algorithm, rate=args.rate,
        cluster=ClusterBody(nodes=args.nodes, gpus_per_node=args.gpus_per_node, gpu_memory_gb=args.gpu_memory_gb,
                            intra_node_gbps=args.intra_node_gbps, inter_node_gbps=args.inter_node_gbps),
        slo=SLOBody(ttft=args.ttft, tpot=args.tpot, attainment=args.attainment),
        num_requests=args.num_requests, seed=args.seed, launchable=args.launchable)


def format_layouts(plan: dict, shown: int = 4) -> list[str]:
    """Why each phase's layout won: the best `shown` layouts the search simulated, by goodput per device."""
    rows = ["", "goodput of one instance per device (core), the phase simulations' best:"]
    for phase in ("prefill", "decode"):
        chosen = {k: plan[phase][k] for k in ("tp", "pp", "ep", "threads")}
        for i, r in enumerate(plan[phase]["layouts"][:shown]):
            layout = f"TP {r['tp']} x PP {r['pp']}" + (f" x EP {r['ep']}" if r["ep"] > 1 else "") + \
                f", {r['threads']} core{'s' if r['threads'] > 1 else ''} per rank"
            mark = "  <- chosen" if {k: r[k] for k in chosen} == chosen else ""
            rows.append(f"{phase if i == 0 else '':8} {layout:32} {r['devices']:>3} dev {r['goodput']:>8.2f} r/s"
                        f" {r['goodput_per_device']:>8.3f} r/s per device{mark}")
    return rows


def format_table(plan: dict) -> str:
    threaded = any(r["threads"] > 1 for phase in ("prefill", "decode") for r in plan[phase]["layouts"])
    cores = f" {'cores/rank':>10}" if threaded else ""
    rows = [f"{'phase':8} {'tp':>3} {'pp':>3} {'ep':>3}{cores} {'replicas':>8} {'goodput/inst':>13} {'weights/GPU':>12}"]
    for phase in ("prefill", "decode"):
        p = plan[phase]
        cores = f" {p['threads']:>10}" if threaded else ""
        rows.append(f"{phase:8} {p['tp']:>3} {p['pp']:>3} {p['ep']:>3}{cores} {p['replicas']:>8} {p['goodput']:>9.2f} r/s"
                    f" {p['weights_gb_per_gpu']:>9.1f} GB")
    rows += ["", f"algorithm {plan['algorithm']}; {plan['num_gpus']} GPUs; goodput {plan['goodput']:.2f} req/s = "
                 f"{plan['goodput_per_gpu']:.3f} req/s per GPU (phase estimate {plan['estimated_goodput_per_gpu']:.3f}); "
                 f"search {plan['search_seconds']:.1f} s"]
    if plan["hit_rate"]:
        rows.append(f"prefix hits: {plan['hit_rate']:.0%} of prompt tokens found in the prefix cache")
    if plan["rate"] is not None:
        rows.append(f"rate {plan['rate']} req/s: {'met' if plan['meets_rate'] else 'NOT met'} in the whole-system simulation")
    if threaded:
        rows += format_layouts(plan)
    rows += ["", "instance     node  gpus"]
    rows += [f"{i['role']}[{i['index']}]".ljust(12) + f" {i['node']:>4}  {' '.join(map(str, i['gpus']))}"
             + ("" if len(i["stages"]) == 1 else f"  (stages on nodes {[s['node'] for s in i['stages']]})")
             for i in plan["instances"]]
    return "\n".join(rows)


def _plan(args: argparse.Namespace) -> int:
    from services.planner.plot import attainment_curve, write_plot
    from services.planner.service import run_plan

    req = plan_request(args)
    try:
        plan, result, scn = run_plan(req, args.workers)
    except ValueError as err:
        print(f"error: {err}")
        return 2
    print(json.dumps(plan, indent=1) if args.json else format_table(plan))
    if args.plot:
        rates, attained = attainment_curve(scn, result.placement, result.simulated_goodput)
        write_plot(args.plot, rates, attained, req.slo.attainment, result.simulated_goodput,
                   f"{req.model} on {req.hardware}: {plan['num_gpus']} GPUs, {req.algorithm}")
        print(f"attainment vs rate: {args.plot}")
    if args.emit:
        return emit(args, result.placement)
    return 0


def _profile(args: argparse.Namespace) -> int:
    from services.common.step_model.profile_fit import appendix_a_constants, fit_profile, write_profile
    from services.engine.device import setup_device
    from services.engine.presets import resolve_model
    from services.planner.engine_timing import engine_timers, open_engine
    from services.planner.profiler import record_profile
    from services.planner.shapes import load_shape

    folder = resolve_model(args.model)
    shape = load_shape(folder)
    devices = split_devices(args.devices)
    cores = [c for d in devices if d.startswith("cpu:") for c in cpu_cores(d)]
    # the instance's device as the profile records it: every rank's cores, shared out evenly (`ProfileFile.threads`)
    device = cpu_device(tuple(sorted(cores))) if cores and len(cores) == len(set(cores)) else args.device
    engine = open_engine(folder, setup_device(devices[0] if devices else args.device), args.max_tokens,
                         tp=args.tp, pp=args.pp, devices=devices)
    try:
        time_prefill, time_decode = engine_timers(engine)
        profile = record_profile(shape, device, time_prefill, time_decode, tp=args.tp, max_tokens=args.max_tokens,
                                 repeats=args.repeats, pp=args.pp, best_of=args.best_of)
    finally:
        engine.close()
    write_profile(profile, args.out)
    coeffs = fit_profile(profile).at(args.tp)
    print(f"{len(profile.prefill)} prefill and {len(profile.decode)} decode points on {device} "
          f"(TP {args.tp} x PP {args.pp}) -> {args.out}")
    print(f"prefill = {coeffs.prefill.c0 * 1e3:.3f} ms + {coeffs.prefill.per_token * 1e6:.3f} us/token"
          f" + {coeffs.prefill.per_sq * 1e9:.4f} ns/token^2; Lm = {coeffs.saturation_tokens()} tokens")
    d = coeffs.decode_small
    print(f"decode  = {d.c0 * 1e3:.3f} ms + {d.per_ctx * 1e9:.3f} ns/context token + {d.per_req * 1e6:.3f} us/request")
    print("appendix A: " + ", ".join(f"{k}={v:.3e}" for k, v in appendix_a_constants(coeffs, shape, args.tp).items()))
    return 0


def _parallel_fit(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from services.common.step_model.parallel_fit import fit_parallel
    from services.common.step_model.profile_fit import read_profile
    from services.planner.hardware import profile_files

    c = fit_parallel([read_profile(f) for f in profile_files(args.profiles)]).parallel
    if args.json:
        print(json.dumps(asdict(c)))
        return 0
    print(f"layouts profiled (TP x PP): {', '.join(f'{t}x{p}' for t, p in c.measured)}")
    print(f"intra-op speed-up K per doubling of TP: prefill {c.k_prefill:.2f}, decode {c.k_decode:.2f}")
    print(f"pipeline stage hand-off: prefill {c.stage_prefill[0] * 1e3:.3f} ms + {c.stage_prefill[1] * 1e6:.3f} us/token,"
          f" decode {c.stage_decode[0] * 1e3:.3f} ms + {c.stage_decode[1] * 1e6:.3f} us/request")
    return 0
