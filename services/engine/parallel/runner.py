"""Rank 0's runner: the engine's `ModelRunner` for a TP x PP instance.

It starts ranks 1..N-1, runs rank 0's own part in this process, broadcasts each step's plan and samples
from the logits the last stage sends back. Same interface as ModelRunner: `execute`, `full_logits`, `close`.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path

import torch
import torch.distributed as dist

from services.common.cuda_ipc import CudaIpcHandle
from services.common.devices import cpu_cores
from services.common.kv_groups import KVGroups
from services.common.model_config import ModelConfig
from services.engine.kv_view import split_tables
from services.engine.parallel.comm import TIMEOUT, connect, make_groups
from services.engine.parallel.plan import MicroPlan, StepPlan
from services.engine.parallel.procs import (
    ipc_key,
    kill_ranks,
    kvxfer_key,
    publish_specs,
    spawn_ranks,
    stop_ranks,
    wait_ready,
)
from services.engine.parallel.rank import RankRunner, RankSpec
from services.engine.parallel.shard import ParallelConfigError, check_layout, shard_for
from services.engine.sampler import Sampled, sample
from services.engine.scheduler import SchedulerOutput


def rank_devices(device: str, world: int, devices: tuple[str, ...] = ()) -> list[str]:
    """One device per rank: the given list in order, else consecutive indices from the instance's device (a
    multi-core CPU device: its cores in equal consecutive shares)."""
    if devices:
        if len(devices) < world:
            raise ParallelConfigError("--devices", f"{world} ranks (TP x PP) but {len(devices)} devices given: {', '.join(devices)}")
        return list(devices[:world])
    kind, _, index = device.partition(":")
    if not index:
        return [device] * world  # unpinned CPU ranks
    if kind == "cpu" and not index.isdigit():  # cpu:a-b: the instance's cores shared out, the same count per rank
        cores = cpu_cores(device)
        if len(cores) % world:
            raise ParallelConfigError("--devices", f"{world} ranks (TP x PP) cannot share the {len(cores)} cores of "
                                                   f"{device} evenly; name a device per rank")
        per = len(cores) // world
        return [f"cpu:{','.join(map(str, cores[r * per:(r + 1) * per]))}" for r in range(world)]
    first = int(index)
    available = torch.cuda.device_count() if kind == "cuda" else os.cpu_count() or 1
    if first + world > available:
        raise ParallelConfigError("--devices", f"{world} ranks (TP x PP) from {device} need {kind}:{first + world - 1}; "
                                               f"this host has {available} {kind} devices")
    return [f"{kind}:{first + r}" for r in range(world)]


def rank_pool_path(pool_path: str | None, rank: int) -> str | None:
    """Rank 0's pool at the instance's path, rank r's beside it."""
    return pool_path if pool_path is None or rank == 0 else f"{pool_path}.rank{rank}"


class ParallelRunner:
    def __init__(self, model_dir: str | Path, config: ModelConfig, num_blocks: int, block_size: int, dtype: str,
                 device: str, tp: int, pp: int, devices: tuple[str, ...] = (), pool_path: str | None = None,
                 rendezvous: str = "", ep: int = 0) -> None:
        """`rendezvous` (host:port): rank 0 waits there for ranks started elsewhere (`distserve rank`, one per
        device, e.g. a compose service each); empty: it starts them itself as local processes. `ep`: expert groups
        per stage (0: one per TP rank)."""
        check_layout(config, tp, pp, ep=ep)
        world = tp * pp
        placed = rank_devices(device, world, devices)
        self.config, self.tp, self.pp = config, tp, pp
        self.specs = [RankSpec(str(model_dir), tp, pp, r, placed[r], num_blocks, block_size, dtype,
                               rank_pool_path(pool_path, r), ep) for r in range(world)]
        host, _, port = (rendezvous or "127.0.0.1:0").rpartition(":")
        self._store = dist.TCPStore(host, int(port), world, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
        if rendezvous:
            self._ranks = publish_specs(self._store, self.specs[1:])
        else:
            self._ranks = spawn_ranks(self.specs[1:], host, self._store.port)
        self._finalizer = weakref.finalize(self, kill_ranks, self._ranks)  # a runner never closed leaves nothing
        try:
            self.groups = make_groups(0, tp, pp)
            self.rank0 = RankRunner(self.specs[0], config, shard_for(config, tp, pp, 0, ep), self.groups,
                                     torch.device(placed[0]))
            wait_ready(self._store, self.specs[1:], self._ranks)
            # the GPU ranks' pools, as their processes exported them (rank 0 registers every pool with kvxfer)
            self.ipc = {s.rank: CudaIpcHandle.from_json(self._store.get(ipc_key(s.rank)))
                        for s in self.specs[1:] if s.device.startswith("cuda")}
            # the kvxfer of each rank started on another host (its pool lies in that host's /dev/shm)
            self.kvxfer = {s.rank: self._store.get(kvxfer_key(s.rank)).decode()
                           for s in self.specs[1:] if self._store.check([kvxfer_key(s.rank)])}
            connect(self.groups, self._store, self.rank0.device)
        except BaseException:
            self._finalizer()
            raise
        self.model = self.rank0.model  # rank 0's part (bench, profile)
        self.device = self.rank0.device
        self.pool = self.rank0.pool    # rank 0's pool; the others lie at `pool_paths`
        self.block_size = block_size

    @property
    def pool_paths(self) -> list[str | None]:
        return [spec.pool_path for spec in self.specs]

    def lost_rank(self) -> str | None:
        """Why the instance lost a rank (its process exited), or None while every rank runs."""
        for spec, (proc, _) in zip(self.specs[1:], self._ranks):
            if proc is not None and proc.poll() is not None:
                return f"rank {spec.rank} (device {spec.device}) exited with status {proc.returncode}"
        return None

    def _run(self, plan: StepPlan) -> torch.Tensor:
        self.groups.world.broadcast_object(plan)
        logits = self.rank0.run(plan)
        assert logits is not None, "rank 0 gets the logits"
        return logits

    def execute(self, batch: SchedulerOutput) -> Sampled:
        """Runs the step on every rank; returns one sampled token per item that samples (none for a step of
        prompt chunks alone)."""
        logits = self._run(StepPlan.of(batch, self.pp))
        sampling = [it.seq for it in batch.items if it.samples]
        return sample(logits, sampling, self.config.eos_token_ids) if sampling else Sampled()

    def full_logits(self, input_ids: list[int], blocks: list[int]) -> torch.Tensor:
        """All-position logits [T, V] of one prompt through every rank's paged path (a correctness check);
        `blocks`: the prompt's table of each layer group in turn."""
        n = len(input_ids)
        tables = split_tables(blocks, KVGroups.of_model(self.config, self.block_size).count, n, self.block_size)
        plan = StepPlan([MicroPlan(list(input_ids), [n], [0], [tables], [True], [n])], all_logits=True)
        return self._run(plan)

    def close(self) -> None:
        if not self._finalizer.alive:
            return
        try:
            self.groups.world.broadcast_object(None)
        except Exception:  # a rank died: the others are killed below
            pass
        stop_ranks(self._ranks)
        self._finalizer.detach()
        self.rank0.close()
