"""The admission decision: predict a request's TTFT from the prefill queue it would join and the fitted latency
model, and the TPOT of the decode instance it would join; admit, refuse or admit as best-effort.

The model is the planner's online fit (`ds:model`, `services/planner/online_fit.py`), per instance kind and
device, read and predicted with by the latency model's one home (`services/common/step_model/`: `stored`,
`predict`; the router loads no planner code). Everything here is pure and cheap: the router decides per
request, before any prefill runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from services.common.slo import SLO
from services.common.step_model.predict import Mix, predict_tpot, predict_ttft
from services.common.step_model.stored import FittedModel

Policy = Literal["off", "refuse", "best-effort"]  # off: predict only (for the error metrics), never refuse


@dataclass(frozen=True, slots=True)
class Candidate:
    """A live instance the request could be dispatched to, and the load booked on it."""

    id: str
    kind: str  # role@device, the model's key
    load: float  # prefill: pending prompt tokens; decode: booked KV tokens (prompt + max_tokens per request)
    running_s: float = 0.0  # prefill: how long its running step has run (0: unknown, taken as just begun)


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
