"""`distserve up`: start the whole stack locally and serve until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import signal
import threading

from services.common import defaults
from services.common.devices import split_devices
from services.common.engine_settings import add_engine_arguments, engine_fields
from services.common.net import bindable
from services.common.settings_cli import add_settings_arguments, settings_values
from services.launcher.cores import cores_argument
from services.launcher.credentials import planner_admin_keys
from services.launcher.stack import Stack, StackConfig
from services.launcher.supervisor import Supervisor
from services.router.config import RouterSettings

# Router settings `up` wires itself (from its own flags, or the ports and Redis it made), and `api_key`, kept off
# command lines (`--api-key-file`); every other router setting is an `up` flag, passed on to the router.
STACK_WIRED = ("model", "mode", "host", "grpc_port", "http_port", "redis_url", "api_key_file", "allow_unauthenticated",
               "tls_cert", "tls_key", "metrics_port", "drain_grace_s", "api_key")


def config_from_args(args: argparse.Namespace, model: str) -> StackConfig:
    """The stack `up` starts: its flags, the engine's and the router's settings given among them."""
    return StackConfig(
        model=model, mode=args.mode, prefill=args.prefill, decode=args.decode,
        prefill_tp=args.prefill_tp, prefill_pp=args.prefill_pp, prefill_ep=args.prefill_ep, decode_tp=args.decode_tp,
        decode_pp=args.decode_pp, decode_ep=args.decode_ep,
        devices=split_devices(args.devices), host=args.host,
        grpc_port=args.grpc_port, http_port=args.http_port, planner_port=args.planner_port,
        redis_url=args.redis_url or "", **engine_fields(args),
        log_level=args.log_level, service_cores=args.service_cores, drain_grace_s=args.drain_grace_s,
        api_key_file=args.api_key_file, allow_unauthenticated=args.allow_unauthenticated,
        tls_cert=args.tls_cert, tls_key=args.tls_key, tls_ca=args.tls_ca, supervised=True, engine=args.engine,
        router_settings=settings_values(args, RouterSettings, skip=STACK_WIRED))


def _up(args: argparse.Namespace) -> int:
    from services.engine.presets import resolve_model

    model = resolve_model(args.model)
    if args.engine == "mock" and args.mode != "disagg":
        raise SystemExit("distserve up: --engine mock serves --mode disagg only")
    _check_model(model, args)
    config = config_from_args(args, model)
    if bool(config.tls_cert) != bool(config.tls_key):
        raise SystemExit("distserve up: --tls-cert and --tls-key go together")
    taken = [p for p in (config.grpc_port, config.http_port, config.planner_port) if p and not bindable(config.host, p)]
    if taken:  # say so now rather than have clients reach whatever holds them
        raise SystemExit(f"distserve up: port(s) {', '.join(map(str, taken))} on {config.host} already in use")
    stack = Stack(config)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stack.start()
    supervisor = Supervisor(stack).start()
    threading.Thread(target=lambda: (supervisor.gave_up.wait(), stop.set()), daemon=True).start()
    if args.replan_profile:
        from services.launcher.autoscale import start_autoscaler
        from services.planner.schemas import SLOBody

        start_autoscaler(stack, args.replan_profile, SLOBody(ttft=args.ttft, tpot=args.tpot), args.replan_interval, stop)
    try:
        print(f"distserve up ({config.mode}, model {config.model})", flush=True)
        print(f"  gRPC   {stack.router_address}  (distserve.v1.Router/Generate)", flush=True)
        if config.http_port:
            scheme = "https" if config.tls_cert else "http"
            print(f"  HTTP   {scheme}://{config.host}:{config.http_port}/v1  (OpenAI-compatible)", flush=True)
        if config.planner_port:
            print(f"  planner http://{config.host}:{config.planner_port}/docs  (admin key in {planner_admin_keys()[1]})",
                  flush=True)
        print(f"  Redis  {stack.redis_url}", flush=True)
        for proc in stack.procs:
            metrics = f"metrics http://{config.host}:{proc.metrics_port}/metrics" if proc.metrics_port else ""
            print(f"  {proc.name:<24} {proc.address:<22} {proc.device:<7} {metrics}", flush=True)
        print("ready; Ctrl-C stops everything", flush=True)
        stop.wait()
    finally:
        supervisor.stop()
        stack.stop()
    return 1 if supervisor.gave_up.is_set() else 0


def _check_model(model: str, args: argparse.Namespace) -> None:
    """Refuses, before starting anything: a model folder the stack cannot serve (architecture, dtype, tokenizer,
    chat template, generation config), and, naming the flag, a TP/PP/EP layout the model or the devices cannot take."""
    from services.common.chat_template import load_chat_template
    from services.common.generation_config import SamplingDefaults
    from services.common.model_config import ModelConfig
    from services.common.tokenizer import load_tokenizer
    from services.engine.parallel.shard import ParallelConfigError, check_layout

    try:
        config = ModelConfig.from_folder(model)
        load_tokenizer(model)
        load_chat_template(model, args.chat_template or "")
        SamplingDefaults.from_folder(model, args.generation_config or "auto")
    except (ValueError, OSError) as exc:
        raise SystemExit(f"distserve up: model {model}: {exc}") from None
    devices = len(split_devices(args.devices)) if args.devices else None
    for role in ("prefill", "decode"):
        tp, pp, ep = (getattr(args, f"{role}_{part}") for part in ("tp", "pp", "ep"))
        try:
            check_layout(config, tp, pp, devices, ep)
        except ParallelConfigError as exc:
            flag = {"--tp": f"--{role}-tp", "--pp": f"--{role}-pp", "--ep": f"--{role}-ep"}.get(exc.flag, exc.flag)
            raise SystemExit(f"{flag}: {str(exc).split(': ', 1)[1]}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("up", help="start the whole stack locally (embedded Redis unless --redis-url)")
    p.add_argument("--model", default=None, help="model folder or preset (default: small-llama, made on first use)")
    p.add_argument("--mode", choices=("disagg", "colocated", "chunked"), default="disagg")
    p.add_argument("--prefill", type=int, default=1, help="prefill instances (colocated/chunked: added to --decode)")
    p.add_argument("--decode", type=int, default=1, help="decode instances")
    p.add_argument("--engine", choices=("torch", "mock"), default="torch", help="mock: the instances are mocks in one "
                   "process (the worker protocol, real block accounting, steps timed by the fitted latency model; "
                   "DISTSERVE_MOCK_* set their timing), for measuring the control plane at scale")
    p.add_argument("--devices", default="", help="comma-separated devices, one per rank of each instance in order "
                   "(default cpu:0, cpu:1, ...); cpu:0-1 or cpu:0,1 is one device on those cores, a thread on each")
    for role in ("prefill", "decode"):
        p.add_argument(f"--{role}-tp", type=int, default=1, help=f"tensor-parallel ranks per stage of each {role} instance")
        p.add_argument(f"--{role}-pp", type=int, default=1, help=f"pipeline stages of each {role} instance")
        p.add_argument(f"--{role}-ep", type=int, default=0, help=f"MoE: expert groups per stage of each {role} "
                       f"instance, dividing --{role}-tp; a group's ranks split each of its experts by width "
                       "(0: one group per TP rank, whole experts)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--grpc-port", type=int, default=50051)
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--planner-port", type=int, default=8001, help="planner REST port (0: no planner)")
    p.add_argument("--redis-url", default=None)
    p.add_argument("--api-key-file", default="", help="the router's client API keys (`distserve api-key add`); "
                   "none: the router serves loopback only")
    p.add_argument("--allow-unauthenticated", action="store_true", help="let the router and planner serve beyond "
                   "loopback without keys")
    p.add_argument("--tls-cert", default="", help="PEM certificate: TLS on the router's gRPC and HTTP ports")
    p.add_argument("--tls-key", default="", help="PEM private key of --tls-cert")
    p.add_argument("--tls-ca", default="", help="the CA that signed --tls-cert, to check the router when it starts "
                   "(default: --tls-cert itself, self-signed)")
    add_engine_arguments(p)
    router = p.add_argument_group("router", "the router's settings, as `distserve router` takes them (admission, SLOs, "
                                            "limits); unset: its DISTSERVE_ROUTER_* variables, then its defaults")
    add_settings_arguments(router, RouterSettings, skip=STACK_WIRED)
    p.add_argument("--service-cores", type=cores_argument, default="auto", help="CPU cores of the router, Redis and planner: "
                   "auto (disagg on CPU: the prefill instances' cores; else any), any, or e.g. 0,1")
    p.add_argument("--drain-grace-s", type=float, default=defaults.DRAIN_GRACE_S,
                   help="on SIGTERM: seconds every service gives in-flight requests (the compose files' too)")
    p.add_argument("--replan-profile", default="", help="a `distserve profile` file of this host: replan on workload "
                   "shifts and scale the instances to the plan")
    p.add_argument("--replan-interval", type=float, default=30.0, help="seconds between workload checks")
    p.add_argument("--ttft", type=float, default=1.0, help="TTFT objective for replanning, s")
    p.add_argument("--tpot", type=float, default=0.1, help="TPOT objective for replanning, s")
    p.set_defaults(func=_up)
