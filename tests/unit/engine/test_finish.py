"""When requests end: stop tokens, EOS, max_tokens, aborts; every end returns the request's blocks."""

from __future__ import annotations

from services.common.sampling import FinishReason, SamplingParams

PROMPT = [1, *range(80, 95)]
EOS_FIRST = [1, *range(70, 79)]  # tiny-llama's greedy first token after this prompt is EOS


def run(engine, rid: str, prompt: list[int], params: SamplingParams) -> tuple[list[int], FinishReason | None]:
    engine.add_request(rid, prompt, params)
    tokens, reason = [], None
    while engine.has_work():
        for out in engine.step():
            tokens.extend(out.new_token_ids)
            reason = out.finish_reason or reason
    return tokens, reason


def test_stop_token_and_eos_end_the_request(make_engine) -> None:
    engine = make_engine(num_blocks=32)
    free = engine.blocks.num_free
    full, reason = run(engine, "a", PROMPT, SamplingParams(max_tokens=12, ignore_eos=True))
    assert (len(full), reason) == (12, FinishReason.LENGTH)
    stop = full[4]
    cut, reason = run(engine, "b", PROMPT, SamplingParams(max_tokens=12, ignore_eos=True, stop_token_ids=(stop,)))
    assert (cut, reason) == (full[: full.index(stop) + 1], FinishReason.STOP)
    eos = engine.model_config.eos_token_ids[0]
    ignoring, reason = run(engine, "c", EOS_FIRST, SamplingParams(max_tokens=5, ignore_eos=True))
    assert ignoring[0] == eos and (len(ignoring), reason) == (5, FinishReason.LENGTH)
    assert run(engine, "d", EOS_FIRST, SamplingParams(max_tokens=5)) == ([eos], FinishReason.STOP)
    assert engine.blocks.num_free == free


def test_abort_a_held_prefill_frees_its_blocks(make_engine) -> None:
    engine = make_engine(policy="prefill", num_blocks=32)
    engine.add_request("r", PROMPT, SamplingParams(max_tokens=8, ignore_eos=True))
    (out,) = engine.step()
    assert out.prefilled and engine.blocks.num_used > 0
    assert engine.abort("r")
    assert engine.blocks.num_used == 0 and not engine.abort("r")
    engine.add_request("r", PROMPT, SamplingParams(max_tokens=8))  # the id is free again
