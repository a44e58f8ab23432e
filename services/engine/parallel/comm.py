"""Process groups of one instance, made without torch's global default group (several instances per process).

Each group is a backend object over a prefix of the instance's TCPStore. The plans (pickled, host memory) go
over gloo always; hidden states and logits over gloo on CPU and NCCL on GPU; TP all-reduces over NCCL on GPU,
and on CPU through shared memory where the group's ranks share a host (shm_allreduce.py), else gloo.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from services.engine.parallel.shm_allreduce import ShmAllReduce, join_segment

Backend = Any  # a c10d ProcessGroupGloo or ProcessGroupNCCL: torch's stubs declare their collectives on neither

TIMEOUT = timedelta(seconds=120)


def new_backend(store: dist.Store, rank: int, size: int, device: torch.device, prefix: str) -> Backend:
    """gloo for host tensors, NCCL for a GPU's."""
    scoped = dist.PrefixStore(prefix, store)
    if device.type == "cuda":
        return dist.ProcessGroupNCCL(scoped, rank, size)  # type: ignore[call-arg]  # the stub misses options' default
    return dist.ProcessGroupGloo(scoped, rank, size, TIMEOUT)


@dataclass(slots=True)
class Group:
    """A set of ranks (global numbers, in order) this rank belongs to; a one-rank group does nothing."""

    ranks: list[int]
    rank: int  # this rank's index in `ranks`
    backend: Backend = None  # None: a one-rank group
    pending: list = field(default_factory=list)  # sends in flight, with their tensors
    shm: ShmAllReduce | None = None  # the all-reduce through shared memory (CPU ranks on one host)

    @property
    def size(self) -> int:
        return len(self.ranks)

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.shm is not None and self.shm.takes(t):
            return self.shm.all_reduce(t)
        if self.backend is not None:
            self.backend.allreduce([t]).wait()
        return t

    def send(self, t: torch.Tensor, dst: int, tag: int) -> None:
        """Starts sending `t` to global rank `dst`; `flush` waits for every send started."""
        work = self.backend.send([t], self.ranks.index(dst), tag)
        self.pending.append((work, t))

    def recv(self, t: torch.Tensor, src: int, tag: int) -> torch.Tensor:
        self.backend.recv([t], self.ranks.index(src), tag).wait()
        return t

    def flush(self) -> None:
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()

    def broadcast_object(self, obj: object = None, root: int = 0) -> object:
        """`obj` from group index `root` to every rank (pickled: two broadcasts, its length then its bytes)."""
        if self.backend is None:
            return obj
        data = pickle.dumps(obj) if self.rank == root else b""
        size = torch.tensor([len(data)], dtype=torch.int64)
        self.backend.broadcast(size, root).wait()
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.rank == root else torch.empty(int(size), dtype=torch.uint8)
        self.backend.broadcast(buf, root).wait()
        return obj if self.rank == root else pickle.loads(buf.numpy().tobytes())


@dataclass(slots=True)
class Groups:
    """This rank's groups: the instance's control (plans, gloo), its data path between stages (hidden states,
    logits: the control group itself on CPU), and its stage's TP ranks."""

    world: Group
    tp: Group
    data: Group


def make_groups(rank: int, tp: int, pp: int) -> Groups:
    """This rank's groups, not yet connected (the model is built against them first)."""
    stage = rank // tp
    world = Group(list(range(tp * pp)), rank)
    return Groups(world, Group([stage * tp + t for t in range(tp)], rank % tp), world)


def connect(groups: Groups, store: dist.Store, device: torch.device) -> None:
    """Joins the backends of this rank's groups (each waits for all its ranks), over their own store prefixes."""
    world, tp = groups.world, groups.tp
    if world.size > 1:
        world.backend = new_backend(store, world.rank, world.size, torch.device("cpu"), "world/")
        if device.type != "cpu":
            groups.data = Group(world.ranks, world.rank, new_backend(store, world.rank, world.size, device, "data/"))
    if tp.size > 1:
        prefix = f"tp{tp.ranks[0] // tp.size}/"
        tp.backend = new_backend(store, tp.rank, tp.size, device, prefix)
        if device.type == "cpu":
            tp.shm = join_segment(store, prefix, tp.rank, tp.size)
