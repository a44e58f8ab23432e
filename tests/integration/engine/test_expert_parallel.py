"""Expert parallelism apart from attention TP, on the checkpoints transformers' own classes wrote: each rank of a
TP x EP instance loads only its part (its group's experts, its slice of each one's and of the shared expert's
width), and the ranks' MoE-layer outputs sum to the whole layer's (fp32) — what the one all-reduce adds."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from services.common.model_config import ModelConfig
from services.engine.make_model import make_model
from services.engine.models import materialize
from services.engine.parallel.layers import shard_transform
from services.engine.parallel.shard import shard_for
from services.engine.preset_configs import MOE_PRESETS
from services.engine.weights import load_weights

pytest.importorskip("transformers")


@pytest.fixture(scope="module", params=list(MOE_PRESETS))
def folder(request, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(make_model(request.param, tmp_path_factory.mktemp(request.param)))


def _sparse_block(model: nn.Module, config: ModelConfig) -> nn.Module:
    assert config.moe is not None
    layer = model.model.layers[config.moe.sparse.index(True)]
    return getattr(layer, layer.ffn)


@pytest.mark.parametrize(("tp", "ep"), [(2, 1), (4, 2)])
def test_rank_parts_of_an_moe_layer_sum_to_the_whole_layer(folder: str, tp: int, ep: int) -> None:
    config = ModelConfig.from_folder(folder)
    whole = materialize(config, torch.device("cpu"), torch.float32)
    load_weights(whole, folder)
    x = torch.randn(7, config.hidden_size, generator=torch.Generator().manual_seed(0))  # [T, hidden]
    with torch.inference_mode():
        want = _sparse_block(whole, config)(x)
        parts = []
        for rank in range(tp):
            shard = shard_for(config, tp, 1, rank, ep)
            model = materialize(shard.local_config(config), torch.device("cpu"), torch.float32)
            load_weights(model, folder, shard_transform(shard, config.head_dim, config.mla))  # every row covered
            parts.append(_sparse_block(model, config)(x))
    assert all(not torch.equal(p, want) for p in parts)  # each rank's a partial sum
    assert (torch.stack(parts).sum(0) - want).abs().max().item() <= 1e-5
