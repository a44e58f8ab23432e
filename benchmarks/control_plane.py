"""`python -m benchmarks.control_plane`: what the control plane costs per request as instances and routers are added.

For each instance count (half prefill, half decode; mock instances, `services/mocker/`) a stack of the real router,
Redis (embedded) and planner is started, routers are added one by one to 1, 2, 4 replicas, and an open-loop load
of requests whose prompts share prefixes is spread over them. Per phase: router CPU seconds per request (every
router process, its background loops included; the idle rate beside it), Redis round trips per request on the
request path (the routers' own count, `distserve_redis_round_trips_total{path="request"}`) and Redis commands and
bytes per request for all clients (load minus an idle window of the same length), routing latency p50/p99 (arrival
to the prefill call, the routers' histogram, interpolated within its buckets), the routers' index entries and RSS,
and the planner's replan time. Then gRPC's own unary-call ceiling on this host (a health-check server's CPU per
call), and at the largest count a run with Redis stopped (killed; restarted empty on its port) mid-run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import grpc
import httpx
import psutil
import redis
from prometheus_client.parser import text_string_to_metric_families

from distserve.v1 import router_pb2, router_pb2_grpc
from services.common.model_config import ModelConfig
from services.common.net import free_port
from services.common.redis_auth import client as redis_client
from services.common.redis_server import EmbeddedRedis
from services.common.registry_cache import EVENTS_KEY
from services.common.secret import SECRET_ENV
from services.engine.presets import resolve_model
from services.launcher.credentials import planner_admin_keys
from services.launcher.stack import Proc, Stack, StackConfig

PREFIXES, PREFIX_TOKENS, SUFFIX_TOKENS, MAX_TOKENS = 16, 192, 32, 4


@dataclass(slots=True)
class Phase:
    instances: int
    routers: int
    requests: int
    failed: int
    rate: float  # offered, req/s
    router_cpu_ms_per_request: float  # every router's CPU over the load window / requests
    router_net_cpu_ms_per_request: float  # the same less the routers' idle (background) rate over that window
    router_idle_cpu_ms_per_s: float  # per router
    request_path_round_trips_per_request: float  # the routers' own count (breaker connections)
    request_path_sent_bytes_per_request: float  # ... and the bytes they sent on those
    index_kbytes_per_request: float  # prefix-cache batches published in the window × routers reading them / requests
    redis_commands_per_request: float  # all clients, load minus idle
    redis_kbytes_per_request: float  # all clients, in + out, load minus idle
    redis_idle_commands_per_s: float  # all clients: heartbeats, index batches, the routers' background reads
    routing_p50_ms: float
    routing_p99_ms: float
    index_entries: int
    router_rss_mb: float
    replan_s: float | None = None


def prompts(vocab: int, count: int, salt: int) -> list[list[int]]:
    """`count` prompts: one of PREFIXES shared prefixes, then a suffix of their own; another `salt`, other prefixes
    (each phase starts with cold caches)."""
    out = []
    for i in range(count):
        head = [salt % (vocab - 1) + 1, i % PREFIXES + 1]
        prefix = head + [(i % PREFIXES * 7919 + k * 31 + salt * 13) % (vocab - 1) + 1 for k in range(PREFIX_TOKENS - 2)]
        out.append(prefix + [(i * 104729 + k * 17) % (vocab - 1) + 1 for k in range(SUFFIX_TOKENS)])
    return out


async def load(addresses: list[str], batch: list[list[int]], rate: float) -> tuple[int, int]:
    """Sends `batch` open-loop at `rate`, round robin over the routers; (served, failed)."""
    channels = [grpc.aio.insecure_channel(a) for a in addresses]
    stubs = [router_pb2_grpc.RouterStub(c) for c in channels]
    outcome = {"ok": 0, "failed": 0}

    async def one(i: int, prompt: list[int]) -> None:
        try:
            async for _ in stubs[i % len(stubs)].Generate(router_pb2.GenerateRequest(
                    prompt_token_ids=prompt, max_tokens=MAX_TOKENS), timeout=60):
                pass
            outcome["ok"] += 1
        except grpc.aio.AioRpcError as exc:
            outcome["failed"] += 1
            print(f"request {i} failed: {exc.code().name} {exc.details()}", file=sys.stderr)

    start, tasks = time.monotonic(), []
    for i, prompt in enumerate(batch):
        await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
        tasks.append(asyncio.create_task(one(i, prompt)))
    await asyncio.gather(*tasks)
    for c in channels:
        await c.close()
    return outcome["ok"], outcome["failed"]


def scrape(proc: Proc) -> dict[str, float]:
    """The router's metrics we read: round trips by path, the routing histogram's buckets, index entries."""
    text = httpx.get(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "distserve_redis_round_trips_total":
                out[f"rt:{s.labels['path']}"] = s.value
            elif s.name == "distserve_redis_sent_bytes_total":
                out[f"sent:{s.labels['path']}"] = s.value
            elif s.name == "distserve_router_routing_seconds_bucket":
                out[f"le:{s.labels['le']}"] = s.value
            elif s.name == "distserve_router_index_entries":
                out["entries"] = s.value
    return out


def quantile(before: list[dict[str, float]], after: list[dict[str, float]], q: float) -> float:
    """The q-quantile (ms) of the routing histogram's growth between two scrapes of every router."""
    edges = sorted({float(k[3:]) for a in after for k in a if k.startswith("le:")})
    cum = [sum(a.get(f"le:{_le(e)}", 0) - b.get(f"le:{_le(e)}", 0) for a, b in zip(after, before)) for e in edges]
    total = cum[-1] if cum else 0
    if not total:
        return float("nan")
    target, low_edge, low_count = q * total, 0.0, 0.0
    for edge, count in zip(edges, cum):
        if count >= target:
            if edge == float("inf"):
                return low_edge * 1e3
            return (low_edge + (edge - low_edge) * (target - low_count) / max(count - low_count, 1e-9)) * 1e3
        low_edge, low_count = edge, count
    return edges[-1] * 1e3


def _le(edge: float) -> str:
    return "+Inf" if edge == float("inf") else repr(edge)


def redis_totals(client: redis.Redis) -> tuple[float, float]:
    """(commands processed, bytes in + out) since Redis started."""
    info = client.info("stats")
    return info["total_commands_processed"], info["total_net_input_bytes"] + info["total_net_output_bytes"]


def cpu(procs: list[Proc]) -> float:
    total = 0.0
    for proc in procs:
        t = psutil.Process(proc.process.pid).cpu_times()
        total += t.user + t.system
    return total


def stream_bytes(client: redis.Redis, start_ms: int, end_ms: int) -> int:
    """Bytes of the prefix-cache batches published between two instants (what each router reads of them)."""
    entries = client.xrange(EVENTS_KEY, min=f"{start_ms}-0", max=f"{end_ms}-0")
    return sum(len(k) + len(v) for _, fields in entries for k, v in fields.items())


def phase(stack: Stack, routers: list[Proc], instances: int, batch: list[list[int]], rate: float,
          idle_s: float) -> Phase:
    client = redis_client(redis.Redis, stack.redis_url)
    cpu0, (cmd0, byte0) = cpu(routers), redis_totals(client)
    time.sleep(idle_s)
    cpu1, (cmd1, byte1) = cpu(routers), redis_totals(client)
    before = [scrape(r) for r in routers]
    began, began_ms = time.monotonic(), int(time.time() * 1e3)
    ok, failed = asyncio.run(load([r.address for r in routers], batch, rate))
    took, ended_ms = time.monotonic() - began, int(time.time() * 1e3)
    cpu2, (cmd2, byte2) = cpu(routers), redis_totals(client)
    after = [scrape(r) for r in routers]
    time.sleep(idle_s)
    cpu3, (cmd3, byte3) = cpu(routers), redis_totals(client)
    idle_cpu_s = (cpu1 - cpu0 + cpu3 - cpu2) / (2 * idle_s)  # the routers' background, per second
    idle_cmd_s, idle_byte_s = (cmd1 - cmd0 + cmd3 - cmd2) / (2 * idle_s), (byte1 - byte0 + byte3 - byte2) / (2 * idle_s)
    done = max(ok, 1)
    trips = sum(a.get("rt:request", 0) - b.get("rt:request", 0) for a, b in zip(after, before))
    sent = sum(a.get("sent:request", 0) - b.get("sent:request", 0) for a, b in zip(after, before))
    return Phase(instances, len(routers), ok, failed, rate, (cpu2 - cpu1) / done * 1e3,
                 (cpu2 - cpu1 - idle_cpu_s * took) / done * 1e3, idle_cpu_s / len(routers) * 1e3,
                 trips / done, sent / done, stream_bytes(client, began_ms, ended_ms) * len(routers) / done / 1e3,
                 (cmd2 - cmd1 - idle_cmd_s * took) / done, (byte2 - byte1 - idle_byte_s * took) / done / 1e3,
                 idle_cmd_s, quantile(before, after, 0.5), quantile(before, after, 0.99),
                 int(max(a.get("entries", 0) for a in after)),
                 sum(psutil.Process(r.process.pid).memory_info().rss for r in routers) / len(routers) / 2**20)


def replan_seconds(stack: Stack, instances: int) -> float | None:
    """Wall seconds of the planner's POST /v1/replan over the recorded requests, for a cluster of `instances` GPUs."""
    key = planner_admin_keys()[1].read_text().strip()
    body = {"model": "opt-13b", "cluster": {"nodes": max(1, instances // 8), "gpus_per_node": min(8, instances)},
            "num_requests": 200}
    began = time.monotonic()
    answer = httpx.post(f"http://{stack.config.host}:{stack.config.planner_port}/v1/replan", json=body, timeout=300,
                        headers={"Authorization": f"Bearer {key}"})
    return time.monotonic() - began if answer.status_code == 200 else None


def grpc_ceiling(calls: int = 4000, concurrency: int = 32) -> float:
    """gRPC's own unary calls per server CPU second here: a health-check server in its own process."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", _HEALTH_SERVER, str(port)])
    try:
        async def run() -> None:
            from grpc_health.v1 import health_pb2, health_pb2_grpc

            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await channel.channel_ready()
                stub = health_pb2_grpc.HealthStub(channel)

                async def worker(n: int) -> None:
                    for _ in range(n):
                        await stub.Check(health_pb2.HealthCheckRequest())

                await worker(100)  # warm
                before = psutil.Process(server.pid).cpu_times()
                await asyncio.gather(*(worker(calls // concurrency) for _ in range(concurrency)))
                after = psutil.Process(server.pid).cpu_times()
                spent.append(after.user + after.system - before.user - before.system)

        spent: list[float] = []
        asyncio.run(run())
        return calls / spent[0]
    finally:
        server.terminate()
        server.wait()


_HEALTH_SERVER = """
import asyncio, sys, grpc
from grpc_health.v1 import health, health_pb2_grpc
async def main():
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
    await server.start()
    await server.wait_for_termination()
asyncio.run(main())
"""


def outage(stack: Stack, routers: list[Proc], batch: list[list[int]], rate: float, stop_s: float, kind: str) -> dict:
    """The load of `batch` with Redis away for `stop_s` from a third of the way in (`kind` kill: killed, then
    restarted empty on its port; stop: SIGSTOP, then SIGCONT, a stalled Redis): failures, and the routing p99 of
    the requests before, during and after the outage."""
    third = len(batch) / rate / 3
    scrapes: list[list[dict[str, float]]] = []

    async def run() -> tuple[int, int]:
        async def outage_() -> None:
            scrapes.append([scrape(r) for r in routers])
            await asyncio.sleep(third)
            scrapes.append([scrape(r) for r in routers])
            server = stack.embedded_redis
            if kind == "stop":
                server.process.send_signal(signal.SIGSTOP)
            else:
                server.process.kill()
                server.process.wait()
            await asyncio.sleep(stop_s)
            scrapes.append([scrape(r) for r in routers])
            if kind == "stop":
                server.process.send_signal(signal.SIGCONT)
            else:
                stack.embedded_redis = EmbeddedRedis(host=server.host, port=server.port, password=server.password).start()

        side = asyncio.create_task(outage_())
        result = await load([r.address for r in routers], batch, rate)
        await side
        scrapes.append([scrape(r) for r in routers])
        return result

    ok, failed = asyncio.run(run())
    before, during, after = (quantile(a, b, 0.99) for a, b in zip(scrapes, scrapes[1:]))
    return {"kind": kind, "requests": ok + failed, "failed": failed, "stopped_s": stop_s, "routing_p99_ms_before": before,
            "routing_p99_ms_during": during, "routing_p99_ms_after": after,
            "routing_p50_ms_during": quantile(scrapes[1], scrapes[2], 0.5)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", default="8,32,128,256")
    parser.add_argument("--routers", default="1,2,4")
    parser.add_argument("--rate", type=float, default=40.0, help="offered load, requests/s")
    parser.add_argument("--requests", type=int, default=320, help="requests per phase")
    parser.add_argument("--idle-s", type=float, default=3.0, help="idle window before each phase")
    parser.add_argument("--outage-s", type=float, default=10.0, help="Redis stopped this long (0: no outage run)")
    parser.add_argument("--outage-routers", type=int, default=2)
    parser.add_argument("--outage-kind", choices=("kill", "stop"), default="kill",
                        help="kill: Redis killed, restarted empty; stop: SIGSTOP then SIGCONT (stalled, data kept)")
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model = resolve_model(args.model)
    vocab = ModelConfig.from_folder(model).vocab_size
    counts, replicas = [int(x) for x in args.instances.split(",")], [int(x) for x in args.routers.split(",")]
    phases, result = [], {"uptime_load": os.getloadavg()}
    for n in counts:
        stack = Stack(StackConfig(model=model, engine="mock", prefill=n // 2, decode=n // 2, grpc_port=free_port(),
                                  http_port=0, planner_port=free_port(), log_level="WARNING", service_cores=(),
                                  num_blocks=1024, lease_ttl_s=30.0))
        stack.start()
        os.environ[SECRET_ENV] = stack.secret_file
        try:
            routers = [next(p for p in stack.procs if p.name == "router")]
            for r in replicas:
                while len(routers) < r:
                    routers.append(stack.add_router(f"router-{len(routers)}"))
                batch = prompts(vocab, args.requests, len(phases))
                phases.append(phase(stack, routers, n, batch, args.rate, args.idle_s))
                print(phases[-1], file=sys.stderr, flush=True)
            phases[-1].replan_s = replan_seconds(stack, n)
            if args.outage_s and n == counts[-1]:
                result["outage"] = {"instances": n, "routers": args.outage_routers,
                                    **outage(stack, routers[:args.outage_routers],
                                             prompts(vocab, int(args.rate * args.outage_s * 3), len(phases)),
                                             args.rate, args.outage_s, args.outage_kind)}
        finally:
            stack.stop()
    result["phases"] = [asdict(p) for p in phases]
    result["grpc_unary_calls_per_cpu_s"] = grpc_ceiling()
    result["uptime_load_end"] = os.getloadavg()
    if args.json:
        print(json.dumps(result, indent=1))
    _table(result)


def _table(result: dict) -> None:
    ceiling = result["grpc_unary_calls_per_cpu_s"]
    print(f"gRPC unary ceiling: {ceiling:.0f} calls per CPU second (a health-check server); load "
          f"{result['uptime_load']} at the start, {result['uptime_load_end']} at the end")
    print("inst rtrs  req fail  cpu ms/req  net ms/req  idle ms/s  RT/req  sent B/req  index kB/req  redis cmd/req  redis kB/req  "
          "redis idle cmd/s  p50 ms  p99 ms  index  rss MB  req/s/core  ×gRPC  replan s")
    for p in result["phases"]:
        per_core = 1e3 / p["router_net_cpu_ms_per_request"]
        replan = f"{p['replan_s']:.1f}" if p["replan_s"] is not None else "-"
        print(f"{p['instances']:>4} {p['routers']:>4} {p['requests']:>4} {p['failed']:>4} "
              f"{p['router_cpu_ms_per_request']:>11.2f} {p['router_net_cpu_ms_per_request']:>11.2f} "
              f"{p['router_idle_cpu_ms_per_s']:>10.1f} {p['request_path_round_trips_per_request']:>7.2f} "
              f"{p['request_path_sent_bytes_per_request']:>11.0f} "
              f"{p['index_kbytes_per_request']:>13.2f} {p['redis_commands_per_request']:>14.1f} "
              f"{p['redis_kbytes_per_request']:>13.1f} {p['redis_idle_commands_per_s']:>17.0f} "
              f"{p['routing_p50_ms']:>7.2f} {p['routing_p99_ms']:>7.2f} {p['index_entries']:>6} "
              f"{p['router_rss_mb']:>7.0f} {per_core:>11.0f} {per_core / ceiling:>6.3f} {replan:>9}")
    if "outage" in result:
        print("Redis stopped:", json.dumps(result["outage"]))


if __name__ == "__main__":
    main()
