"""Starts and stops the processes of a local stack; also the actuator's hands (add or stop an instance)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from services.common import defaults
from services.common.engine_settings import EngineSettings
from services.common.lifetime import child_env
from services.common.net import free_port
from services.common.pool_files import remove_pool_files
from services.common.redis_auth import redis_password
from services.common.redis_server import EmbeddedRedis
from services.common.secret import SECRET_ENV, ensure_secret, read_secret
from services.common.settings_cli import settings_flags
from services.common.step_journal import journal_path
from services.launcher.cores import host_service_cores, pin_process
from services.launcher.credentials import planner_access, router_access, router_ca
from services.launcher.health import is_serving, wait_http_ok, wait_serving
from services.launcher.remote_host import remote_entry

log = logging.getLogger(__name__)
Mode = Literal["disagg", "colocated", "chunked"]


@dataclass(frozen=True, slots=True)
class StackConfig(EngineSettings):
    model: str
    mode: Mode = "disagg"
    prefill: int = 1
    decode: int = 1
    devices: tuple[str, ...] = ()  # one per rank, in order; cpu:i round-robin over the cores when empty
    prefill_tp: int = 1  # tensor-parallel ranks per stage of each prefill (disagg) instance
    prefill_pp: int = 1
    prefill_ep: int = 0  # MoE: expert groups per stage, dividing prefill_tp (0: one per TP rank)
    decode_tp: int = 1   # of each decode instance (colocated/chunked instances use these too)
    decode_pp: int = 1
    decode_ep: int = 0
    host: str = "127.0.0.1"
    grpc_port: int = 50051
    http_port: int = 8000
    planner_port: int = 0  # 0: no planner
    redis_url: str = ""    # empty: a private redis-server
    lease_ttl_s: float = defaults.LEASE_TTL_S
    ready_timeout_s: float = 180.0
    log_level: str = "INFO"
    service_cores: tuple[int, ...] | None = None  # router, Redis, planner; None: see launcher/cores.py
    extra_env: dict[str, str] = field(default_factory=dict)
    drain_grace_s: float = defaults.DRAIN_GRACE_S  # on SIGTERM, what every service gives in-flight requests
    api_key_file: str = ""  # the router's client keys; none: the router serves loopback only
    allow_unauthenticated: bool = False  # let the router serve beyond loopback without keys
    tls_cert: str = ""  # TLS on the router's client ports: its certificate and key (PEM); empty: plaintext
    tls_key: str = ""
    tls_ca: str = ""    # what the launcher checks the router's certificate against; empty: tls_cert (self-signed)
    router_settings: dict[str, object] = field(default_factory=dict)  # RouterSettings given to `up`, as router flags
    # A second host for the decode instances (disagg): its own kvxfer there, so every KV pull crosses hosts.
    decode_host: str = ""   # the address decode instances and their kvxfer listen on; empty: this host
    decode_netns: str = ""  # the network namespace that host is (`ip netns exec`); empty: this one
    decode_shm: str = ""    # a folder that is that host's /dev/shm (bind-mounted there); empty: this host's
    decode_env: dict[str, str] = field(default_factory=dict)  # set in that host's processes only
    # Ranks (1..N-1) of each prefill instance that run on the decode host, and of each decode instance that run on
    # this host: a pipeline stage on another node than its rank 0. Rank 0 then waits for its ranks at a
    # rendezvous, each started as `distserve rank` naming its host's kvxfer.
    remote_prefill_ranks: tuple[int, ...] = ()
    remote_decode_ranks: tuple[int, ...] = ()
    supervised: bool = False  # a Supervisor watches the stack: instances journal their steps for it
    engine: Literal["torch", "mock"] = "torch"  # mock: the instances are mocks in one process (services/mocker/)

    def parallel(self, role: str) -> tuple[int, int, int]:
        """(TP, PP, EP) of an instance of `role` (EP 0: one expert group per TP rank)."""
        if role == "prefill":
            return self.prefill_tp, self.prefill_pp, self.prefill_ep
        return self.decode_tp, self.decode_pp, self.decode_ep

    def instance_roles(self) -> list[str]:
        if self.mode == "disagg":
            return ["prefill"] * self.prefill + ["decode"] * self.decode
        return [self.mode] * (self.prefill + self.decode)


@dataclass(slots=True)
class Proc:
    name: str
    address: str
    process: subprocess.Popen
    role: str = ""
    device: str = ""
    metrics_port: int = 0
    cmd: list[str] = field(default_factory=list)
    stopping: bool = False  # stopped on purpose: not to be restarted
    parallel: tuple[int, int, int] = (1, 1, 0)  # an instance's TP x PP, and its expert groups (0: one per TP rank)
    rank_devices: tuple[str, ...] = ()  # its ranks' devices, stage-major (empty: `device` alone)

    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.returncode


class Stack:
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.embedded_redis: EmbeddedRedis | None = None
        self.redis_url = config.redis_url
        self.kvxfer_address = ""
        self.decode_kvxfer_address = ""  # the decode host's kvxfer, where config.decode_host is set
        self.procs: list[Proc] = []
        given = config.extra_env.get(SECRET_ENV, os.environ.get(SECRET_ENV))
        self.secret_file = str(ensure_secret()) if given is None else given  # made on first use; "": auth off

    @property
    def router_address(self) -> str:
        return f"{self.config.host}:{self.config.grpc_port}"

    @property
    def service_cores(self) -> tuple[int, ...]:
        """The cores the host services run on; () for anywhere."""
        c = self.config
        if c.service_cores is not None:
            return c.service_cores
        roles = c.instance_roles()
        return host_service_cores(c.mode, roles, [self.device(i) for i in range(len(roles))])

    def _spawn(self, name: str, args: list[str], address: str, role: str = "", device: str = "",
               metrics: bool = True, cores: tuple[int, ...] = (), remote: bool = False) -> Proc:
        """`remote`: on the decode host."""
        c = self.config
        metrics_port = free_port(self.config.host) if metrics else 0
        pinning = ["--cores", ",".join(map(str, cores))] if cores else []
        enter = remote_entry(c.decode_netns, c.decode_shm, c.decode_env) if remote else []
        cmd = [*enter, sys.executable, "-m", "services", "--log-level", self.config.log_level, *pinning, *args]
        if metrics:
            cmd += ["--metrics-port", str(metrics_port)]
        proc = Proc(name, address, self._popen(cmd), role, device, metrics_port, cmd)
        self.procs.append(proc)
        return proc

    def _popen(self, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        grace = str(self.config.drain_grace_s)
        env = {**os.environ, "DISTSERVE_DRAIN_GRACE_S": grace, "DISTSERVE_ROUTER_DRAIN_GRACE_S": grace,
               **child_env(), SECRET_ENV: self.secret_file, **self.config.extra_env, **(env or {})}
        return subprocess.Popen(cmd, env=env, start_new_session=True)

    def router_args(self, grpc_port: int | None = None, http_port: int | None = None) -> list[str]:
        """The router's command: what the stack wires, then the router settings given to `up`."""
        c = self.config
        grpc_port, http_port = c.grpc_port if grpc_port is None else grpc_port, c.http_port if http_port is None else http_port
        return ["router", "--model", c.model, "--mode", c.mode, "--host", c.host, "--grpc-port", str(grpc_port),
                "--http-port", str(http_port), "--redis-url", self.redis_url, *router_access(c),
                *settings_flags(c.router_settings)]

    def add_router(self, name: str) -> Proc:
        """Another router over the same Redis and instances (a replica; gRPC on a free port, no HTTP); returns once
        it serves."""
        c = self.config
        address = f"{c.host}:{free_port(c.host)}"
        proc = self._spawn(name, self.router_args(int(address.rsplit(":", 1)[1]), 0), address, cores=self.service_cores)
        wait_serving(address, proc.process, c.ready_timeout_s, name, internal=False, client_ca=router_ca(c))
        return proc

    def respawn(self, proc: Proc) -> None:
        """Starts a dead process again, as it was started (same name, ports and instance id)."""
        if proc.role:
            remove_pool_files(proc.name)
        proc.process = self._popen(proc.cmd)

    def restart_router(self, env: dict[str, str]) -> None:
        """Stops the router and starts it again as it was, with `env` added (a setting it reads at start-up, such
        as its admission policy, changed on a running stack); returns once it serves."""
        proc = next(p for p in self.procs if p.name == "router")
        self._terminate(proc, self.config.drain_grace_s + 10)
        proc.stopping = False
        proc.process = self._popen(proc.cmd, env)
        wait_serving(proc.address, proc.process, self.config.ready_timeout_s, "router", internal=False)

    def _free_port(self, host: str) -> int:
        """A free port of host; the decode host's namespace runs nothing else, so any port there is free."""
        c = self.config
        return free_port(c.host if c.decode_netns and host == c.decode_host else host)

    def devices(self) -> tuple[str, ...]:
        return self.config.devices or tuple(f"cpu:{i}" for i in range(os.cpu_count() or 1))

    def device(self, index: int) -> str:
        """The device of instance slot `index` (round robin over the stack's devices)."""
        devices = self.devices()
        return devices[index % len(devices)]

    def device_index(self, device: str) -> int:
        return self.devices().index(device)

    def start(self) -> None:
        """Starts everything and returns once every server reports SERVING."""
        c = self.config
        if not self.redis_url:
            password = redis_password(read_secret(Path(self.secret_file))) if self.secret_file else ""
            self.embedded_redis = EmbeddedRedis(host=c.host, password=password).start()
            self.redis_url = self.embedded_redis.url
            if self.service_cores:
                pin_process(self.embedded_redis.pid, self.service_cores)
        try:
            waits = []
            if c.engine == "mock":
                waits.append(self._start_mocks())
            elif c.mode == "disagg":
                port = free_port(c.host)
                self.kvxfer_address = f"{c.host}:{port}"
                waits.append(self._spawn("kvxfer", ["kvxfer", "--host", c.host, "--port", str(port)], self.kvxfer_address))
                wait_serving(self.kvxfer_address, waits[-1].process, c.ready_timeout_s, "kvxfer")
                if c.decode_host:
                    self.decode_kvxfer_address = f"{c.decode_host}:{self._free_port(c.decode_host)}"
                    proc = self._spawn("kvxfer-decode", ["kvxfer", "--host", c.decode_host, "--port",
                                                         self.decode_kvxfer_address.rsplit(":", 1)[1]],
                                       self.decode_kvxfer_address, remote=True)
                    wait_serving(proc.address, proc.process, c.ready_timeout_s, proc.name)
            first = 0  # each instance takes the next TP x PP devices, one per rank
            for role in c.instance_roles() if c.engine == "torch" else []:
                tp, pp, _ = c.parallel(role)
                ranks = tuple(self.device(first + r) for r in range(tp * pp))
                waits.append(self.add_instance(role, ranks[0], wait=False, rank_devices=ranks))
                first += tp * pp
            for proc in waits:
                wait_serving(proc.address, proc.process, c.ready_timeout_s, proc.name)
            router = self._spawn("router", self.router_args(), self.router_address, cores=self.service_cores)
            wait_serving(router.address, router.process, c.ready_timeout_s, "router", internal=False,
                         client_ca=router_ca(c))
            if c.planner_port:
                planner = self._spawn("planner", ["planner", "--host", c.host, "--port", str(c.planner_port),
                                                  "--redis-url", self.redis_url, *planner_access(c)],
                                      f"{c.host}:{c.planner_port}", metrics=False, cores=self.service_cores)
                wait_http_ok(f"http://{planner.address}/healthz", planner.process, c.ready_timeout_s, "planner")
        except BaseException:
            self.stop()
            raise

    def _start_mocks(self) -> Proc:
        """The prefill and decode instances as mocks, all in one process (`distserve mock`)."""
        c = self.config
        address = f"{c.host}:{free_port(c.host)}"
        return self._spawn("mocks", ["mock", "--model", c.model, "--redis-url", self.redis_url, "--host", c.host,
                                     "--port", address.rsplit(":", 1)[1], "--prefill", str(c.prefill), "--decode",
                                     str(c.decode), "--block-size", str(c.block_size), "--num-blocks", str(c.num_blocks),
                                     "--lease-ttl-s", str(c.lease_ttl_s)], address, device="mock")

    def add_instance(self, role: str, device: str, wait: bool = True, rank_devices: tuple[str, ...] = (),
                     parallel: tuple[int, int, int] | None = None) -> Proc:
        """Starts an instance of `role` (TP x PP ranks on `rank_devices` when it has several); `parallel`: its
        TP, PP and EP when not the stack's for the role."""
        c = self.config
        remote = role == "decode" and bool(c.decode_host)
        host = c.decode_host if remote else c.host
        port = self._free_port(host)
        instance_id = f"{role}-{device.replace(':', '')}-{uuid.uuid4().hex[:4]}"
        args = [role, "--model", c.model, "--device", device, "--host", host, "--port", str(port),
                "--instance-id", instance_id, "--redis-url", self.redis_url, *c.flags(),
                "--lease-ttl-s", str(c.lease_ttl_s)]
        if self.kvxfer_address:
            args += ["--kvxfer", self.decode_kvxfer_address if remote else self.kvxfer_address]
        if c.supervised:
            args += ["--step-journal", "true"]
        tp, pp, ep = parallel or c.parallel(role)
        if tp * pp > 1:
            rank_devices = rank_devices or (device,) * (tp * pp)
            args += ["--tp", str(tp), "--pp", str(pp), "--ep", str(ep), "--devices", ",".join(rank_devices)]
        away = {"prefill": c.remote_prefill_ranks, "decode": c.remote_decode_ranks}.get(role, ())
        if tp * pp > 1 and away:
            args += ["--rendezvous", self._start_ranks(instance_id, rank_devices, away, remote)]
        proc = self._spawn(instance_id, args, f"{host}:{port}", role, device, remote=remote)
        proc.parallel, proc.rank_devices = (tp, pp, ep), tuple(rank_devices)
        if wait:
            wait_serving(proc.address, proc.process, c.ready_timeout_s, instance_id)
        return proc

    def _start_ranks(self, instance_id: str, rank_devices: tuple[str, ...], away: tuple[int, ...],
                     remote: bool) -> str:
        """Ranks 1..N-1 of an instance as processes of their own, those in `away` on the other host than rank 0's
        (`remote`: rank 0 on the decode host) with that host's kvxfer, joining rank 0 at the rendezvous returned."""
        c = self.config
        host = c.decode_host if remote else c.host
        rendezvous = f"{host}:{self._free_port(host)}"
        for rank, device in enumerate(rank_devices[1:], start=1):
            on_decode_host = remote != (rank in away)
            kvxfer = self.decode_kvxfer_address if on_decode_host else self.kvxfer_address
            args = ["rank", "--rendezvous", rendezvous, "--rank", str(rank), "--device", device]
            self._spawn(f"{instance_id}-rank{rank}", args + (["--kvxfer", kvxfer] if rank in away else []),
                        "", "rank", device, metrics=False, remote=on_decode_host)
        return rendezvous

    def stop_instance(self, name: str, timeout_s: float = 30.0) -> None:
        """Stops one instance gracefully (it deregisters first, so the router stops sending to it)."""
        proc = next(p for p in self.procs if p.name == name)
        self._terminate(proc, timeout_s)
        self.procs.remove(proc)

    @staticmethod
    def _terminate(proc: Proc, timeout_s: float) -> None:
        Stack._signal_stop(proc)
        Stack._await_stop(proc, timeout_s)

    def drain_instance(self, instance_id: str, timeout_s: float) -> None:
        """SIGTERM: the instance deregisters (no new requests), reports NOT_SERVING, and finishes what it has;
        returns once it stopped serving or exited, or after `timeout_s`."""
        proc = next(p for p in self.procs if p.name == instance_id)
        proc.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while proc.running() and is_serving(proc.address) and time.monotonic() < deadline:
            time.sleep(0.1)

    @staticmethod
    def _signal_stop(proc: Proc) -> None:
        proc.stopping = True
        if proc.running():
            proc.process.send_signal(signal.SIGTERM)

    @staticmethod
    def _await_stop(proc: Proc, timeout_s: float) -> None:
        """Waits for a signalled process (killing it after `timeout_s`); removes the pool files it left."""
        try:
            proc.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %.0f s; killing it", proc.name, timeout_s)
            proc.process.kill()
            proc.process.wait()
        if proc.role:  # an instance: it owns a pool file (and maybe a step journal)
            journal_path(proc.name).unlink(missing_ok=True)
            for path in remove_pool_files(proc.name):  # left by an instance that was killed
                log.warning("%s left its KV pool file %s; removed it", proc.name, path)

    def stop(self) -> None:
        """Router first (no new work), then instances, then kvxfer, then Redis; the processes of one tier stop
        together (each drains on its own, so waiting for one before signalling the next only adds up)."""
        # ranks started on their own after their instance: it stops them (its last plan), a signal would break its step
        tier = {"router": 0, "planner": 0, "kvxfer": 3, "kvxfer-decode": 3}

        def level_of(proc: Proc) -> int:
            return 0 if proc.name.startswith("router") else tier.get(proc.name, 2 if proc.role == "rank" else 1)

        for level in sorted({level_of(p) for p in self.procs}):
            procs = [p for p in self.procs if level_of(p) == level]
            for proc in procs:
                self._signal_stop(proc)
            for proc in procs:
                self._await_stop(proc, self.config.drain_grace_s + 10)
        self.procs.clear()
        if self.embedded_redis is not None:
            self.embedded_redis.stop()
            self.embedded_redis = None
