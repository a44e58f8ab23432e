"""The prompts the family tests run and transformers' answers to them (greedy tokens, each step's log-softmax)."""

from __future__ import annotations

import torch

from services.common.sampling import SamplingParams

WINDOW = 16  # the tiny presets' sliding window
SHORT = [1, *range(40, 50)]
LONG = [1, *(3 + (i * 37) % 256 for i in range(4 * WINDOW + 3))]  # past Phi-3's original context (64) too
PROMPTS = [SHORT, LONG]
PARAMS = SamplingParams(max_tokens=10, ignore_eos=True, logprobs=2)


def reference(folder: str) -> list[tuple[list[int], torch.Tensor]]:
    """Per prompt: transformers' greedy tokens and the log-softmax [new tokens, vocab] of each step of `generate`."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # every token, as ignore_eos does
    out = []
    for prompt in PROMPTS:
        with torch.no_grad():
            gen = model.generate(torch.tensor([prompt]), max_new_tokens=PARAMS.max_tokens, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True)
        out.append((gen.sequences[0, len(prompt):].tolist(), torch.log_softmax(torch.cat(gen.logits).float(), -1)))
    return out


def assert_equal(tokens: list[int], logprobs: list[float], want: tuple[list[int], torch.Tensor]) -> None:
    """Tokens as transformers', each one's logprob within 1e-4 of its log-softmax."""
    assert tokens == want[0]
    assert max(abs(lp - want[1][i, t].item()) for i, (t, lp) in enumerate(zip(tokens, logprobs))) <= 1e-4
