"""A request's latency predicted from the step lines: its TTFT behind a prefill queue, its TPOT in a decode batch
(the router's admission and routing set them against the SLO; `services/router/admission.py`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from services.common.step_model import DecodeCoeffs, PrefillCoeffs, prompt_sq


@dataclass(frozen=True, slots=True)
class Mix:
    """The mean request lately admitted: what a booked load is taken to be made of."""

    prompt: float
    max_tokens: float
    prompt_sq: float = 0.0  # mean squared prompt (0: unknown, taken as prompt²)
    computed: float = 0.0  # mean prompt tokens a prefill computes, its cached ones left out (0: unknown, the prompt)

    def requests_in(self, prefill_tokens: float) -> float:
        """How many requests the prompt tokens booked on prefill instances (those not cached) stand for."""
        per_request = self.computed or self.prompt
        return prefill_tokens / per_request if per_request > 0 else 0.0

    def queued_prompt(self) -> float:
        """The mean prompt a queued token belongs to (long prompts hold more of the queue's tokens): the
        queue's Σ prompt² per token, and what a batch of whole prompts leaves unused."""
        return self.prompt_sq / self.prompt if self.prompt_sq and self.prompt else self.prompt



def predict_ttft(line: PrefillCoeffs, queued: float, prompt: int, batch_tokens: int, mix: Mix | None = None,
                 running_s: float = 0.0, arriving_tps: float = 0.0, cached: int = 0) -> float:
    """Prefill queue drain then this prompt, FCFS in batches of whole prompts up to `batch_tokens` tokens. A
    batch closes when the next prompt does not fit, so it carries less than the bound: on average the bound
    less half the prompt a queued token belongs to (`Mix.queued_prompt`; the mean leftover of a renewal
    process), and a long queue drains in that many more batches, each with its fixed cost. A busy instance is
    running a step of the first queued tokens (up to a batch), which has run `running_s` already: counted whole,
    it made the prediction up to a step too high whenever a queue stood. The prompts arriving after this one
    (`arriving_tps` prompt tokens per second) join its batch while it waits, up to the batch's room: left out,
    the prediction was too low where the queue is long, which is where admission decides. The queued prompts'
    lengths are unknown: the quadratic term takes Σ prompt² of the queue as its tokens × the mix's
    `queued_prompt` (without a mix, as prompts of this one's length). `prompt`: the tokens this one computes,
    after `cached` ones its prefix cache holds (they count in its attention: `prompt_sq`)."""
    queued_prompt = mix.queued_prompt() if mix else prompt
    fill = batch_tokens - min(queued_prompt, batch_tokens) / 2  # the tokens a batch carries on average
    running = min(queued, fill)
    left = max(0.0, line.seconds(running, running * queued_prompt) - running_s) if running > 0 else 0.0
    rest = queued - running + prompt
    batches = max(1, math.ceil(rest / fill))
    ahead = rest - prompt  # queued tokens still to be taken
    own = rest - (batches - 1) * fill  # this one's batch: its prompt and the queue's tail
    wait = left + (batches - 1) * line.seconds(fill, fill * queued_prompt)
    joining = min(max(0.0, fill - own), arriving_tps * wait) if queued > 0 else 0.0
    return (left + line.seconds(rest + joining, (ahead + joining) * queued_prompt + prompt_sq(prompt, cached))
            + (batches - 1) * line.c0)


def predict_tpot(line: DecodeCoeffs, booked: float, prompt: int, max_tokens: int, mix: Mix | None = None,
                 handoff_s: float = 0.0) -> float:
    """A decode step with this request joined: the booked tokens (prompt + max_tokens per request) are taken as
    requests of the mix (without one, of this one's size), each halfway through its output. Read as requests of
    this one's size, a short request would see a batch many times the real one, and a long one a fraction.
    The hand-off (`handoff_s`: first token to the first decode step) lies inside the first of the max_tokens − 1
    intervals a TPOT averages: most of a short output's TPOT."""
    mix = mix or Mix(prompt, max_tokens)
    others = booked / (mix.prompt + mix.max_tokens)
    context = others * (mix.prompt + mix.max_tokens / 2) + prompt + max_tokens / 2
    return line.seconds(context, others + 1) + handoff_s / max(1, max_tokens - 1)
