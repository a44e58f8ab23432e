"""Placements: parallelism per phase, replica counts, and which node and GPUs each instance's stages use."""

from __future__ import annotations

from dataclasses import dataclass, replace

from services.common.step_model.experts import Fabric


@dataclass(frozen=True, slots=True)
class Cluster:
    nodes: int = 1
    gpus_per_node: int = 4
    gpu_memory_gb: float = 80.0
    intra_node_gbps: float = 2400.0  # gigabits/s between GPUs of one node (NVLink)
    inter_node_gbps: float = 200.0  # gigabits/s between nodes (InfiniBand)

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def fabric(self) -> Fabric:
        """The links an expert-parallel all-to-all crosses."""
        return Fabric(self.gpus_per_node, self.intra_node_gbps, self.inter_node_gbps)


@dataclass(frozen=True, slots=True)
class Parallel:
    """An instance's layout: pp pipeline stages of `width` GPUs; attention and dense layers tensor-parallel over tp
    (width / tp replicas of them), a mixture-of-experts model's experts split over the width in ep groups: whole
    with ep >= tp, each sliced over its group's tp / ep GPUs with ep dividing tp (ep = 1: over all tp).
    On a CPU cluster a device is a core, and a rank may run `threads` intra-op threads on as many cores."""

    tp: int = 1
    pp: int = 1
    ep: int = 1  # expert groups: a divisor of tp, or a multiple (the GPUs of a stage that split the experts whole)
    threads: int = 1  # cores per rank (CPU); 1 on GPUs

    @property
    def width(self) -> int:
        return max(self.tp, self.ep)

    @property
    def stage_devices(self) -> int:
        """Devices (GPUs, or CPU cores) of one pipeline stage."""
        return self.width * self.threads

    @property
    def gpus(self) -> int:
        return self.stage_devices * self.pp


@dataclass(frozen=True, slots=True)
class Stage:
    node: int
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Instance:
    role: str  # "prefill" | "decode"
    index: int
    stages: tuple[Stage, ...]  # per pipeline stage its node's GPUs; a stage wider than a node: one per node

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(stage.node for stage in self.stages)


@dataclass(frozen=True, slots=True)
class Placement:
    prefill: Parallel
    decode: Parallel
    n_prefill: int
    n_decode: int
    instances: tuple[Instance, ...] = ()

    @property
    def num_gpus(self) -> int:
        return self.n_prefill * self.prefill.gpus + self.n_decode * self.decode.gpus

    def of_role(self, role: str) -> list[Instance]:
        return [inst for inst in self.instances if inst.role == role]


class _Free:
    """Free GPU ids per node; a stage takes its width of one node's GPUs, or whole free nodes when wider than one."""

    def __init__(self, cluster: Cluster) -> None:
        self.per_node = cluster.gpus_per_node
        self.free = [list(range(cluster.gpus_per_node)) for _ in range(cluster.nodes)]

    def take_wide(self, width: int) -> tuple[Stage, ...]:
        """A stage of `width` GPUs: within a node where it fits one, else width / gpus_per_node whole nodes."""
        if width <= self.per_node:
            return (self.take(width),)
        whole = [n for n, gpus in enumerate(self.free) if len(gpus) == self.per_node][:width // self.per_node]
        if width % self.per_node or len(whole) < width // self.per_node:
            raise ValueError(f"cluster: no {width // self.per_node} free nodes for a stage of {width} GPUs")
        return tuple(self.take(self.per_node, n) for n in whole)

    def take(self, tp: int, node: int | None = None) -> Stage:
        candidates = [node] if node is not None else range(len(self.free))
        for n in candidates:
            if len(self.free[n]) >= tp:
                gpus, self.free[n] = self.free[n][:tp], self.free[n][tp:]
                return Stage(n, tuple(gpus))
        raise ValueError(f"cluster: no node has {tp} free GPUs for a stage")


def pack(cluster: Cluster, prefill: Parallel, n_prefill: int, decode: Parallel, n_decode: int) -> Placement:
    """High node-affinity placement: each stage first-fit on any node (stages of an instance may span nodes)."""
    free = _Free(cluster)
    instances = [
        Instance(role, i, tuple(stage for _ in range(par.pp) for stage in free.take_wide(par.stage_devices)))
        for role, par, count in (("prefill", prefill, n_prefill), ("decode", decode, n_decode))
        for i in range(count)
    ]
    return Placement(prefill, decode, n_prefill, n_decode, tuple(instances))


def pack_units(cluster: Cluster, prefill: Parallel, decode: Parallel, cross: int, units: int) -> Placement:
    """Low node-affinity placement (Alg. 2): a unit is `cross` inter-node stages; at every one of them the
    prefill segment (prefill.tp × prefill.pp GPUs) and the decode segment share a node, so KV moves over
    NVLink. Instances have cross · pp stages."""
    free = _Free(cluster)
    seg = prefill.gpus + decode.gpus
    instances = []
    for u in range(units):
        p_stages, d_stages = [], []
        for _ in range(cross):
            node = next((n for n, g in enumerate(free.free) if len(g) >= seg), None)
            if node is None:
                raise ValueError(f"cluster: no node has {seg} free GPUs for a segment")
            p_stages += [free.take(prefill.stage_devices, node) for _ in range(prefill.pp)]
            d_stages += [free.take(decode.stage_devices, node) for _ in range(decode.pp)]
        instances += [Instance("prefill", u, tuple(p_stages)), Instance("decode", u, tuple(d_stages))]
    full_p = replace(prefill, pp=prefill.pp * cross)
    full_d = replace(decode, pp=decode.pp * cross)
    return Placement(full_p, full_d, units, units, tuple(instances))
