"""How often a decode instance prefills prompts itself (the router's `local` path): while other sequences
decode, at most one step in every `1 / share` carries a local prefill, so that a stream of short follow-ups
cannot take the steps that set the other streams' TPOT. An idle instance takes one whenever asked."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter

LOCAL_PREFILLS = Counter("distserve_local_prefills", "prompts a decode instance was asked to prefill itself, by "
                         "outcome (served; declined: over the router's uncached cap, or the step share spent)",
                         ["instance", "outcome"])


@dataclass(slots=True)
class LocalPacer:
    share: float  # the most of the instance's steps that may carry a local prefill while others decode (0: none)
    last_step: int | None = None  # the step count when the last local prefill was let in

    def take(self, steps: int, busy: bool) -> bool:
        """Whether a local prefill may join the next step, `steps` having run; a yes books that step."""
        if self.share <= 0:
            return False
        if busy and self.last_step is not None and (steps - self.last_step) * self.share < 1:
            return False
        self.last_step = steps
        return True
