"""Timers over the real engine for `distserve profile`: one prefill of a batch of prompt lengths, one decode
step of a batch of context lengths, on the engine's own model runner and KV pool."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from services.common import defaults
from services.common.kv_groups import KVGroups
from services.common.model_config import ModelConfig
from services.common.sampling import SamplingParams
from services.engine.engine import EngineConfig, LLMEngine
from services.engine.scheduler import ScheduledSeq, SchedulerOutput
from services.engine.sequence import Sequence

FILLER = 3  # any id of the vocabulary: timing does not depend on the text


def open_engine(model_dir: str, device: torch.device, max_tokens: int, block_size: int = defaults.BLOCK_SIZE,
                tp: int = 1, pp: int = 1, devices: tuple[str, ...] = ()) -> LLMEngine:
    """An engine with KV blocks for the largest profiled batch (one block of rounding per request); TP x PP > 1:
    an instance of rank processes on `devices`."""
    groups = KVGroups.of_model(ModelConfig.from_folder(model_dir), block_size).count
    blocks = (max_tokens // block_size + 64 + 8) * groups
    return LLMEngine(EngineConfig(model=model_dir, policy="prefill", block_size=block_size, num_blocks=blocks,
                                  max_batch_tokens=max_tokens, tp=tp, pp=pp, devices=devices), device)


def engine_timers(engine: LLMEngine) -> tuple[Callable[[list[int]], float], Callable[[list[int]], float]]:
    """(time of a prefill of these prompt lengths, time of a decode step at these context lengths), seconds."""
    runner, kv = engine.runner, engine.kv
    sync = torch.cuda.synchronize if runner.device.type == "cuda" else (lambda: None)

    def timed(lengths: list[int], decode: bool) -> float:
        items: list[ScheduledSeq] = []
        try:
            for i, n in enumerate(lengths):
                seq = Sequence(f"profile-{i}", [FILLER] * (n - 1 if decode else n), SamplingParams(max_tokens=1))
                if decode:  # n − 1 tokens cached, the n-th computed this step
                    seq.output_ids.append(FILLER)
                    seq.num_computed = n - 1
                seq.block_tables = kv.empty()
                items.append(ScheduledSeq(seq, 1 if decode else n))
                if not kv.grow(seq.block_tables, n):
                    raise MemoryError(f"no KV blocks for a profiled sequence of {n} tokens")
            sync()
            began = time.perf_counter()
            runner.execute(SchedulerOutput(items))
            sync()
            return time.perf_counter() - began
        finally:
            for it in items:
                kv.free(it.seq.block_tables)

    return (lambda lens: timed(lens, False)), (lambda lens: timed(lens, True))
