"""Per request, how a disaggregated request reaches its decode instance when caches hold parts of its prompt
(a follow-up turn: the decode instance holding the last turn has most of it):

- pull: the prefill computes what its cache lacks; the decode pulls the whole prompt's K/V;
- delta: the same, but the decode instance holds a prefix and pulls only the rest;
- reverse: the prefill first pulls the prefix the decode instance holds, then computes only the new suffix;
- local: the decode instance prefills the short uncached suffix itself (no prefill instance, no transfer).

The latency model decides: the predicted TTFT of each path, by the prefill line admission uses; local only for a
suffix short enough not to stall the decode batch it joins (`local_prefill_tokens`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prometheus_client import Counter

from services.common.step_model import PrefillCoeffs
from services.common.step_model.predict import Mix, predict_ttft
from services.router.admission import Candidate

Path = Literal["pull", "delta", "reverse", "local"]
DECISIONS = Counter("distserve_disagg_decision", "admitted disaggregated requests by the path their K/V took (after "
                    "any fallback to pull)", ["path"])
CACHED_TOKENS = Counter("distserve_router_cached_tokens", "prompt tokens of finished requests a prefix cache supplied: "
                        "where=prefill: not computed (the prefill's or a local prefill's); where=decode: held by the "
                        "decode instance, not pulled", ["where"])


@dataclass(frozen=True, slots=True)
class Route:
    path: Path
    decode_id: str = ""  # the decode instance chosen for its cache ("": the load book decides)
    decode_cached: int = 0  # prompt tokens it holds, as the index says


@dataclass(frozen=True, slots=True)
class PathLimits:
    local_prefill_tokens: int  # the longest uncached suffix a decode instance prefills itself (0: never)
    reverse_pull_tokens: int  # the least that the decode holds beyond the prefill for a reverse pull (0: never)
    lease_rpc_s: float = 0.0  # a reverse pull's lease call to the decode instance, before the prefill queues
    pull_bytes_per_s: float = 0.0  # what a K/V pull moves per second (0: pulls taken as free)


def pick_decode(candidates: list[Candidate], cached: dict[str, int], request_tokens: int) -> Candidate | None:
    """The decode instance holding most of the prompt among those loaded at most one request more than the
    least loaded (so a conversation stays where its K/V is, but does not pile onto one instance)."""
    if not candidates:
        return None
    least = min(c.load for c in candidates)
    near = [c for c in candidates if c.load <= least + request_tokens]
    return max(near, key=lambda c: (cached.get(c.id, 0), -c.load))


def choose_path(prompt: int, prefill: Candidate, prefill_cached: int, decode: Candidate | None, decode_held: int,
                decode_shared: int, line: PrefillCoeffs | None, batch_tokens: int, limits: PathLimits,
                mix: Mix | None = None, pull_s_per_token: float = 0.0) -> Route:
    """The path of least predicted TTFT (in tokens computed and queued ahead while there is no fitted line).
    `decode_held`: the prompt tokens the decode instance holds (a delta pull keeps them); `decode_shared`: those of
    them it can lend or reuse for a prefill (every full block before the one of the last prompt token). A reverse
    pull pays its lease call and the pull of what the prefill lacks before its queue."""
    def ttft(queued: float, suffix: int, cached: int) -> float:
        if line is None:
            return queued + suffix
        return predict_ttft(line, queued, suffix, batch_tokens, mix, prefill.running_s, cached=cached)

    if decode is None or decode_held == 0:
        return Route("pull")
    options: dict[Path, float] = {"delta": ttft(prefill.load, prompt - prefill_cached, prefill_cached)}
    lent = decode_shared - prefill_cached
    if limits.reverse_pull_tokens and lent >= limits.reverse_pull_tokens:
        pull_s = limits.lease_rpc_s + lent * pull_s_per_token if line is not None else 0.0
        options["reverse"] = ttft(prefill.load, prompt - decode_shared, decode_shared) + pull_s
    if decode_shared and prompt - decode_shared <= limits.local_prefill_tokens:
        options["local"] = ttft(0.0, prompt - decode_shared, decode_shared)  # no queue: prefill-priority there
    path = min(options, key=lambda p: (options[p], p != "local"))
    return Route(path, decode.id, decode_held if path == "delta" else decode_shared)
