"""A pool's site survives the wire: what a prefill writes into a handle's shards is what a decode reads back (layer
slots and model layers kept apart), and registration names the memory kvxfer maps or refuses before any call."""

from __future__ import annotations

from dataclasses import replace

import pytest

from distserve.v1 import kv_pb2
from services.common.cuda_ipc import CudaIpcHandle
from services.common.kv_groups import KVGroups
from services.common.kv_layout import KVLayout
from services.common.model_config import FULL, SLIDING, ModelConfig
from services.common.pool_site import PoolSite, layout_to_pb, register_request, sites_from_handle
from services.common.span import Span
from services.engine.parallel.rank import rank_layout
from services.engine.parallel.shard import shard_for
from services.engine.presets import PRESETS
from services.instance.kv_shards import rank_pool_id, shards_to_pb

# 5 layers: full (1, 3) in one group, sliding in two ((0, 2), (4,)), so a pool's slots differ from its layers
MODEL = replace(ModelConfig.from_dict(PRESETS["tiny-llama"]), num_layers=5, num_kv_heads=4,
                layer_types=(SLIDING, FULL, SLIDING, FULL, SLIDING), sliding_window=8)
BLOCKS, BS = 32, 4
LAYERS, HEADS = Span(0, 5), Span(0, 4)


def _instance(tp: int, pp: int, remote: str) -> dict[str, PoolSite]:
    """A TP x PP instance's pools by id, its last stage served by the kvxfer `remote`."""
    pools = {}
    for rank in range(tp * pp):
        s = shard_for(MODEL, tp, pp, rank)
        pools[rank_pool_id("pf", rank)] = PoolSite(rank_layout(MODEL, s, BLOCKS, BS, "float32"), s.layers,
                                                   s.kv_heads, "cpu", f"/dev/shm/pf.{rank}",
                                                   kvxfer=remote if s.pp_rank == pp - 1 and pp > 1 else "")
    return pools


@pytest.mark.parametrize(("tp", "pp"), [(1, 2), (2, 2), (4, 1)])
def test_a_handles_shards_give_back_each_rank_pools_layers_heads_and_slots(tp: int, pp: int) -> None:
    pools = _instance(tp, pp, "10.0.0.2:50061")
    handle = kv_pb2.KVHandle(instance_id="pf", layout=layout_to_pb(pools["pf"].layout), shards=shards_to_pb(pools))

    read = sites_from_handle(handle, KVGroups.of_model(MODEL, BS))

    assert list(read) == list(pools)
    for pool_id, site in pools.items():  # what the puller never maps (device, path) it is not told
        assert read[pool_id] == replace(site, device="", path=None)
    assert any(s.layout.num_layers != s.layers.count for s in read.values())  # a block's slots are not its layers


def test_a_one_pool_handle_is_the_whole_model_in_one_pool() -> None:
    layout = KVLayout(BLOCKS, 2, BS, 4, 16)
    handle = kv_pb2.KVHandle(instance_id="pf", layout=layout_to_pb(layout))

    assert sites_from_handle(handle, KVGroups.of_model(MODEL, BS)) == {"pf": PoolSite.whole(layout, 5)}


def test_registration_names_the_file_or_the_ipc_handle_and_refuses_a_site_with_neither() -> None:
    layout = KVLayout(BLOCKS, 2, BS, 4, 16)
    cpu = register_request("pf.r1", PoolSite(layout, LAYERS, HEADS, "cpu", "/dev/shm/pf.1"), owner="pf")
    gpu = register_request("pf", PoolSite(layout, LAYERS, HEADS, "cuda:1", cuda_ipc=CudaIpcHandle(b"h" * 64, 512, 1)))

    assert (cpu.WhichOneof("memory"), cpu.shm_path, cpu.owner, cpu.device) == ("shm_path", "/dev/shm/pf.1", "pf", "cpu")
    assert (gpu.WhichOneof("memory"), gpu.cuda_ipc.offset, gpu.cuda_ipc.device_index) == ("cuda_ipc", 512, 1)
    with pytest.raises(ValueError, match="/dev/shm file"):
        register_request("pf", PoolSite(layout, LAYERS, HEADS, "cpu"))
    with pytest.raises(ValueError, match="CUDA IPC handle"):
        register_request("pf", PoolSite(layout, LAYERS, HEADS, "cuda:0", "/dev/shm/pf"))
