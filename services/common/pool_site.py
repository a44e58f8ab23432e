"""One KV pool's site: its layout, what of the model it holds and where its bytes lie; and its wire forms, the
registration kvxfer maps it by and a KVHandle's shard list. The engine's pools expose it (`KVPool.site`), kvxfer's
client registers it, an instance names its ranks' sites in every handle, the decode's re-sharding reads both sides'.

`layout.num_layers` is the layer SLOTS of one block (one layer group's layers, services/common/kv_groups.py);
`layers` is the model layers the pool holds, every group's. A model of one group has as many of each.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from distserve.v1 import kv_pb2, kvxfer_pb2
from services.common.cuda_ipc import CudaIpcHandle
from services.common.kv_groups import KVGroups
from services.common.kv_layout import KVLayout
from services.common.span import Span


@dataclass(frozen=True, slots=True)
class PoolSite:
    layout: KVLayout  # the pool's own: its layer slots, kv_heads.count heads
    layers: Span  # the model layers it holds (a PP stage's)
    kv_heads: Span  # the model's KV heads it holds (a TP rank's; a replica where TP exceeds the KV heads)
    device: str = ""  # "cpu" | "cuda:N"; "" for a pool this process does not map (a source's, named in a handle)
    path: str | None = None  # a CPU pool's /dev/shm file, as its host sees it
    cuda_ipc: CudaIpcHandle | None = None  # a GPU pool's allocation, as its process exported it
    kvxfer: str = ""  # the kvxfer of its host where that is not its instance's own (a stage on another node)

    @classmethod
    def whole(cls, layout: KVLayout, num_layers: int) -> PoolSite:
        """A pool holding all `num_layers` layers of the model and every KV head of its layout."""
        return cls(layout, Span(0, num_layers), Span(0, layout.num_kv_heads))


def layout_to_pb(layout: KVLayout) -> kv_pb2.KVLayout:
    return kv_pb2.KVLayout(**layout.to_dict())


def layout_from_pb(msg: kv_pb2.KVLayout) -> KVLayout:
    return KVLayout(msg.num_blocks, msg.num_layers, msg.block_size, msg.num_kv_heads, msg.head_dim,
                    msg.dtype or "float32")


def ipc_from_pb(msg: kvxfer_pb2.CudaIpcHandle) -> CudaIpcHandle:
    return CudaIpcHandle(msg.handle, msg.offset, msg.device_index)


def register_request(pool_id: str, site: PoolSite, owner: str = "") -> kvxfer_pb2.RegisterPoolRequest:
    """What kvxfer maps the pool by: its /dev/shm file on CPU, the CUDA IPC handle of its allocation on GPU;
    `owner`: the instance whose leases cover it (a rank's pool registered under its own id)."""
    request = kvxfer_pb2.RegisterPoolRequest(instance_id=pool_id, layout=layout_to_pb(site.layout),
                                             device=site.device, owner=owner)
    if site.device.startswith("cuda"):
        if site.cuda_ipc is None:
            raise ValueError("a GPU pool is registered by the CUDA IPC handle of its allocation (KVPool.site)")
        ipc = site.cuda_ipc
        request.cuda_ipc.CopyFrom(kvxfer_pb2.CudaIpcHandle(handle=ipc.handle, offset=ipc.offset,
                                                           device_index=ipc.device_index))
    elif site.path is None:
        raise ValueError("a CPU pool must live in a /dev/shm file (KVPool(..., path=shm_path(...)))")
    else:
        request.shm_path = site.path
    return request


def shard_to_pb(pool_id: str, rank: int, site: PoolSite, lease_instance_id: str) -> kv_pb2.KVShard:
    """A rank's pool in a handle's shard list; `lease_instance_id`: the pool id its site's lease is taken under where
    another kvxfer serves it (site.kvxfer), else ""."""
    return kv_pb2.KVShard(pool_id=pool_id, rank=rank, layer_start=site.layers.start, num_layers=site.layers.count,
                          kv_head_start=site.kv_heads.start, num_kv_heads=site.kv_heads.count,
                          kvxfer_address=site.kvxfer, lease_instance_id=lease_instance_id)


def sites_from_handle(handle: kv_pb2.KVHandle, groups: KVGroups | None = None) -> dict[str, PoolSite]:
    """The source pools of a handle by pool id: its shards, or the instance's one pool holding every layer and head;
    with the model's layer `groups` (None: one group, a block holding every layer of a pool)."""
    full = layout_from_pb(handle.layout)
    if not handle.shards:
        return {handle.instance_id: PoolSite.whole(full, groups.num_layers if groups else full.num_layers)}
    return {s.pool_id: PoolSite(replace(full, num_layers=groups.slots(s.layer_start, s.layer_start + s.num_layers)
                                        if groups else s.num_layers, num_kv_heads=s.num_kv_heads),
                                Span(s.layer_start, s.num_layers), Span(s.kv_head_start, s.num_kv_heads),
                                kvxfer=s.kvxfer_address)
            for s in handle.shards}
