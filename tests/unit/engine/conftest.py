"""Engine unit-test helpers: one thread, engines over the session's tiny checkpoints."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from services.engine.engine import EngineConfig, LLMEngine

torch.set_num_threads(1)

EngineFactory = Callable[..., LLMEngine]


@pytest.fixture
def make_engine(tiny_llama_dir: str) -> Iterator[EngineFactory]:
    """Builds engines (tiny-llama unless `model=` says otherwise) and closes them after the test."""
    engines: list[LLMEngine] = []

    def build(**kwargs) -> LLMEngine:
        kwargs.setdefault("model", tiny_llama_dir)
        engine = LLMEngine(EngineConfig(**kwargs))
        engines.append(engine)
        return engine

    yield build
    for engine in engines:
        engine.close()


@pytest.fixture(scope="module")
def alone_tokens(tiny_llama_dir: str) -> Iterator[Callable[[tuple[int, ...]], list[int]]]:
    """Greedy tokens (8, EOS ignored) of a prompt run alone on a roomy tiny-llama engine, memoised."""
    from services.common.sampling import SamplingParams

    engine = LLMEngine(EngineConfig(tiny_llama_dir, num_blocks=64))
    cache: dict[tuple[int, ...], list[int]] = {}

    def tokens(prompt: tuple[int, ...]) -> list[int]:
        if prompt not in cache:
            cache[prompt] = engine.generate([list(prompt)], SamplingParams(max_tokens=8, ignore_eos=True))[0]
        return cache[prompt]

    yield tokens
    engine.close()
