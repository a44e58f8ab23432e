"""The admission decision: predict a request's TTFT from the prefill queue it would join and the fitted latency
model, and the TPOT of the decode instance it would join; admit, refuse or admit as best-effort.

The model is the planner's online fit (`ds:model`, `services/planner/online_fit.py`), per instance kind and
device, read into the step lines both share (`services/common/step_model.py`; the router loads no planner
code). Everything here is pure and cheap: the router decides per request, before any prefill runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from services.common.slo import SLO
from services.common.step_model import DecodeCoeffs, PrefillCoeffs, prompt_sq

Policy = Literal["off", "refuse", "best-effort"]  # off: predict only (for the error metrics), never refuse


@dataclass(frozen=True, slots=True)
class FittedModel:
    """Step times per instance kind and device (`prefill@cpu:0`), as the planner fitted them."""

    prefill: dict[str, PrefillCoeffs]
    decode: dict[str, DecodeCoeffs]
    fitted_at: float = 0.0
    ttft_hops: float = 0.0  # s a TTFT holds besides the prefill queue and step (the request path's hops)
    handoff: float = 0.0  # s from the first token at the router to the decode instance's first step

    @classmethod
    def from_json(cls, model: dict) -> FittedModel:
        kinds = model.get("kinds", {})
        return cls({k: PrefillCoeffs(**v["prefill"]) for k, v in kinds.items() if v.get("prefill")},
                   {k: DecodeCoeffs(**v["decode"]) for k, v in kinds.items() if v.get("decode")},
                   float(model.get("fitted_at", 0.0)), float(model.get("ttft_hops_s") or 0.0),
                   float(model.get("handoff_s") or 0.0))


@dataclass(frozen=True, slots=True)
class Candidate:
    """A live instance the request could be dispatched to, and the load booked on it."""

    id: str
    kind: str  # role@device, the model's key
    load: float  # prefill: pending prompt tokens; decode: booked KV tokens (prompt + max_tokens per request)
    running_s: float = 0.0  # prefill: how long its running step has run (0: unknown, taken as just begun)


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


@dataclass(slots=True)
class RecentMix:
    """Exponentially weighted means of the admitted requests' prompt and output lengths and of the time between
    admissions (the first ones: plain means), so that the booked loads are read as counts of requests of the mix
    actually served, and the prompts that will join a waiting one's batch can be foreseen."""

    weight: float = 1 / 64
    prompt: float = 0.0
    max_tokens: float = 0.0
    prompt_sq: float = 0.0
    computed: float = 0.0
    seen: int = 0
    gap_s: float = 0.0
    last: float | None = None  # monotonic time of the latest admission

    def add(self, prompt: int, max_tokens: int, now: float, computed: int | None = None) -> None:
        """An admitted request; `computed`: the prompt tokens its prefill computes (None: all)."""
        self.seen += 1
        w = max(self.weight, 1 / self.seen)
        self.prompt += w * (prompt - self.prompt)
        self.computed += w * ((prompt if computed is None else computed) - self.computed)
        self.prompt_sq += w * (prompt * prompt - self.prompt_sq)
        self.max_tokens += w * (max_tokens - self.max_tokens)
        if self.last is not None:
            # an idle spell counts as 10 s at most: else it would hide a burst after it for many admissions
            gap = min(now - self.last, 10.0)
            self.gap_s += max(self.weight, 1 / (self.seen - 1)) * (gap - self.gap_s)
        self.last = now

    def mix(self) -> Mix | None:
        return Mix(self.prompt, self.max_tokens, self.prompt_sq, self.computed) if self.seen else None

    def prompt_tokens_per_s(self) -> float:
        return self.prompt / self.gap_s if self.seen > 1 and self.gap_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Placed:
    """Where routing put a request before admission (router/prefix_routing.py): the prefill instance ("": the
    least loaded, every one holding `cached`), the prompt tokens its prefill will not compute (on a reverse pull the
    larger of the two instances' hits), and the decode instance ("": the least loaded); `local`: that decode
    instance prefills the rest itself, no prefill queue."""

    prefill_id: str = ""
    cached: int = 0
    decode_id: str = ""
    local: bool = False


@dataclass(frozen=True, slots=True)
class Prediction:
    ttft_s: float | None  # None: no model for the instance it would join
    tpot_s: float | None
    prefill_instance: str = ""
    decode_instance: str = ""
    prefill_queue: float = 0.0  # prompt tokens ahead of it that the TTFT counted

    def to_record(self) -> dict[str, float]:
        """Its fields in the request's record (`ds:requests`), to set against the measured stamps later."""
        return {"predicted_" + k: v for k, v in (("ttft", self.ttft_s), ("tpot", self.tpot_s),
                                                  ("prefill_queue", self.prefill_queue)) if v is not None}


@dataclass(frozen=True, slots=True)
class Margin:
    """Seconds added to a prediction before it is set against the SLO: what the model's recent errors say it
    leaves out (`margin.ErrorWindow`)."""

    ttft_s: float = 0.0
    tpot_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    admit: bool
    best_effort: bool  # admitted although predicted to miss its SLO
    prediction: Prediction
    reason: str = ""  # the predicted figures that miss, for the client
    retry_after_s: float = 0.0


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


def least_after(loads: list[float], tokens: float) -> float:
    """The least load once `tokens` more were dispatched, each bit to the least-loaded instance (the dispatcher's
    rule): the level they fill the lowest loads up to."""
    level = sorted(loads)
    below = 0.0  # Σ of the k lowest loads
    for k, load in enumerate(level, 1):
        below += load
        fill = (tokens + below) / k
        if k == len(level) or fill <= level[k]:
            return fill
    return tokens


def heading_to_decode(prefill: list[Candidate], waiting: float, prompt: int, max_tokens: int,
                      mix: Mix | None = None) -> float:
    """The decode tokens (prompt + max_tokens per request) of the requests admitted ahead of this one that have not
    reached a decode instance yet: the prompts queued at the prefill instances and waiting at the router, read as
    requests of the mix. They join the decode batches before this request does, and most are still there while
    it decodes: left out, every admission saw the batch short by the whole prefill pipeline, so the batches grew
    past what the TPOT objective allows and the admitted requests missed it together. A prefill books only the
    tokens it computes, so its queue is read as requests by the mix's computed tokens per request, and each takes
    its whole prompt and output to decode."""
    mix = mix or Mix(prompt, max_tokens)
    requests = mix.requests_in(sum(c.load for c in prefill)) + (waiting / mix.prompt if mix.prompt > 0 else 0.0)
    return requests * (mix.prompt + mix.max_tokens)


def predict(model: FittedModel, prefill: list[Candidate], decode: list[Candidate], prompt: int, max_tokens: int,
            batch_tokens: int, mix: Mix | None = None, arriving_tps: float = 0.0, waiting: float = 0.0,
            placed: Placed = Placed()) -> Prediction:
    """The figures on the instances routing placed it on (`placed`; by default the least-loaded of each role);
    `mix`: what the queued and booked requests are taken to be; `arriving_tps`: the prompt tokens per second
    admitted lately, spread over the prefill instances; `waiting`: the prompt tokens admitted but still waiting at
    the router for a slot (`max_inflight`), which are booked on the prefill instances before this one. The decode
    instance's load counts the requests on their way to decode (`heading_to_decode`), spread as the dispatcher
    will. A local prefill waits for no prefill queue but for the decode instance's running step."""
    p = next((c for c in prefill if c.id == placed.prefill_id), None) or min(prefill, key=lambda c: c.load, default=None)
    if p is not None and waiting > 0:
        p = replace(p, load=least_after([c.load for c in prefill], waiting))
    d = next((c for c in decode if c.id == placed.decode_id), None) or min(decode, key=lambda c: c.load, default=None)
    now = d  # the decode instance as it runs now: a local prefill joins its next step, ahead of the prefill queues
    heading = heading_to_decode(prefill, waiting, prompt, max_tokens, mix)
    if d is not None and heading > 0:
        d = replace(d, load=max(d.load, least_after([c.load for c in decode], heading)))
    pl = model.prefill.get(p.kind) if p else None
    dl = model.decode.get(d.kind) if d else None
    tpot = predict_tpot(dl, d.load, prompt, max_tokens, mix, model.handoff) if dl and max_tokens > 1 else None
    suffix = prompt - placed.cached
    if placed.local:
        running = predict_tpot(dl, now.load, prompt, max_tokens, mix) if dl else 0.0
        ttft = predict_ttft(pl, 0.0, suffix, batch_tokens, mix, cached=placed.cached) + running if pl else None
        return Prediction(ttft, tpot, d.id if d else "", d.id if d else "", 0.0)
    joining_tps = arriving_tps / max(1, len(prefill))
    ttft = predict_ttft(pl, p.load, suffix, batch_tokens, mix, p.running_s, joining_tps, placed.cached) \
        + model.ttft_hops if pl else None
    return Prediction(ttft, tpot, p.id if p else "", d.id if d else "", p.load if p else 0.0)


def decide(prediction: Prediction, slo: SLO, policy: Policy, margin: Margin = Margin()) -> Decision:
    """Admit what is predicted, with the margin, to meet its SLO (or cannot be predicted); else refuse, or admit as
    best-effort."""
    ttft = None if prediction.ttft_s is None else prediction.ttft_s + margin.ttft_s
    tpot = None if prediction.tpot_s is None else prediction.tpot_s + margin.tpot_s
    misses = []
    if slo.ttft is not None and ttft is not None and ttft > slo.ttft:
        misses.append(f"predicted TTFT {_ms(prediction.ttft_s, margin.ttft_s)} > SLO {slo.ttft * 1e3:g} ms")
    if slo.tpot is not None and tpot is not None and tpot > slo.tpot:
        misses.append(f"predicted TPOT {_ms(prediction.tpot_s, margin.tpot_s)} > SLO {slo.tpot * 1e3:g} ms")
    if not misses:
        return Decision(True, False, prediction)
    reason = "; ".join(misses)
    if policy != "refuse":
        return Decision(True, True, prediction, reason)
    # The queue ahead must drain by the excess; a TPOT miss has no such figure: a second, then try again.
    excess = (ttft - slo.ttft) if slo.ttft is not None and ttft is not None else 0.0
    return Decision(False, False, prediction, reason, max(1.0, math.ceil(excess)))


def _ms(predicted: float, margin: float) -> str:
    return f"{predicted * 1e3:.1f} ms" + (f" {margin * 1e3:+.1f} ms recent error" if margin else "")
