"""How a TP x PP instance divides a model: heads, KV heads (replicated past their count), columns, layers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.common.model_config import ModelConfig
from services.common.sampling import SamplingParams
from services.common.span import Span
from services.engine.parallel.plan import split_items
from services.engine.parallel.runner import rank_devices
from services.engine.parallel.shard import ParallelConfigError, check_layout, shard_for, stage_layers
from services.engine.presets import PRESETS
from services.engine.scheduler import ScheduledSeq
from services.engine.sequence import Sequence

LLAMA = ModelConfig.from_dict(PRESETS["tiny-llama"])  # 4 heads, 2 KV heads, 2 layers
OPT13 = ModelConfig.from_dict(PRESETS["opt-13b"])     # 40 heads, 40 layers


def test_tp2_splits_query_and_kv_heads_evenly() -> None:
    shards = [shard_for(LLAMA, 2, 1, r) for r in range(2)]
    assert [s.heads for s in shards] == [Span(0, 2), Span(2, 2)]
    assert [s.kv_heads for s in shards] == [Span(0, 1), Span(1, 1)]
    assert [s.columns for s in shards] == [Span(0, 64), Span(64, 64)]


def test_tp4_with_two_kv_heads_replicates_each_kv_head_on_two_ranks() -> None:
    shards = [shard_for(LLAMA, 4, 1, r) for r in range(4)]
    assert [s.kv_heads.start for s in shards] == [0, 0, 1, 1]
    # each rank's query heads belong to the KV head it holds (2 query heads per KV head)
    assert all(s.heads.start // 2 == s.kv_heads.start for s in shards)


def test_ranks_are_stage_major_and_stages_contiguous() -> None:
    shard = shard_for(LLAMA, 2, 2, 3)
    assert (shard.pp_rank, shard.tp_rank, shard.layers) == (1, 1, Span(1, 1))
    assert [stage_layers(40, 3, s) for s in range(3)] == [Span(0, 14), Span(14, 13), Span(27, 13)]


def test_a_rank_config_is_the_model_at_its_share() -> None:
    local = shard_for(OPT13, 4, 2, 5).local_config(OPT13)
    assert (local.num_heads, local.num_kv_heads, local.intermediate_size, local.num_layers) == (10, 10, 5120, 20)
    assert local.head_dim == OPT13.head_dim


@pytest.mark.parametrize("tp, pp, flag", [(3, 1, "--tp"), (0, 1, "--tp"), (1, 3, "--pp"), (8, 1, "--tp")])
def test_layouts_the_model_cannot_take_name_the_flag(tp: int, pp: int, flag: str) -> None:
    with pytest.raises(ParallelConfigError, match=flag) as err:
        check_layout(LLAMA, tp, pp)
    assert err.value.flag == flag


def test_more_ranks_than_devices_names_devices() -> None:
    with pytest.raises(ParallelConfigError, match="--devices"):
        check_layout(LLAMA, 2, 2, devices=3)
    with pytest.raises(ParallelConfigError, match="--devices"):
        rank_devices("cpu", 4, ("cpu:0", "cpu:1"))
    with pytest.raises(ParallelConfigError, match="--devices"):
        rank_devices("cpu:0", 4096)


def test_kv_heads_neither_dividing_nor_multiple_of_tp_are_refused() -> None:
    with pytest.raises(ParallelConfigError, match="KV heads"):
        check_layout(replace(LLAMA, num_heads=12, num_kv_heads=3, intermediate_size=128), 2, 1)


def test_rank_devices_are_consecutive_from_the_instance_device() -> None:
    assert rank_devices("cpu:0", 2) == ["cpu:0", "cpu:1"]
    assert rank_devices("cpu", 3) == ["cpu"] * 3


def _items(lengths: list[int]) -> list[ScheduledSeq]:
    return [ScheduledSeq(Sequence(f"r{i}", [1] * n, SamplingParams()), n) for i, n in enumerate(lengths)]


def test_micro_batches_keep_order_and_balance_tokens() -> None:
    groups = split_items(_items([100, 10, 10, 80]), 2)
    assert [[it.num_new for it in g] for g in groups] == [[100], [10, 10, 80]]
    assert [len(g) for g in split_items(_items([1] * 8), 4)] == [2, 2, 2, 2]
    assert [len(g) for g in split_items(_items([5]), 4)] == [1]
    assert [len(g) for g in split_items(_items([1, 1, 1]), 2)] == [2, 1]
