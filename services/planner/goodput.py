"""Goodput: the highest request rate at which the SLO attainment target still holds, by binary search on rate.

One request pool (lengths and rate-1 arrival times) per scenario is reused at every rate (common random
numbers), so runs at nearby rates see the same requests and the search is repeatable. A simulation takes at least `num_requests`
of it, and enough to span twenty request lifetimes at the TPOT SLO: fewer would let a decode instance absorb a
finite burst that it could never sustain.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from services.common.slo import SLO
from services.common.step_model.latency import LatencyModel, TPCoefficients
from services.planner.placement import Cluster, Parallel, Placement
from services.planner.simulator import simulate, simulate_decode, simulate_prefill
from services.planner.workload import Workload, unit_arrivals


@dataclass(frozen=True)
class Scenario:
    """Everything a goodput evaluation needs; picklable, so worker processes get it whole."""

    model: LatencyModel
    cluster: Cluster
    workload: Workload
    slo: SLO
    num_requests: int = 2000  # requests per simulation, at least
    seed: int = 0
    cv: float = 1.0  # coefficient of variation of inter-arrival times: 1 is Poisson
    max_batch_tokens: int | None = None  # prefill Lm; None: from the latency model
    max_requests: int = 20000  # size of the request pool, the most any run takes
    decode_holds_prefix: bool = False  # a pull moves only the uncached KV: the decode instance holds the prefix
    launchable: bool = False  # only layouts the engine launches: experts within an instance's TP ranks

    @cached_property
    def pool(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prompt lengths, output lengths, arrival times at rate 1) of `max_requests` requests."""
        rng = np.random.default_rng(self.seed)
        prompts, outputs = self.workload.sample(self.max_requests, rng)
        return prompts, outputs, unit_arrivals(self.max_requests, rng, self.cv)

    @cached_property
    def cached(self) -> np.ndarray:
        """Prompt tokens of each pool request found in the prefix cache; drawn from a stream of their own, so
        hits leave the lengths and arrivals as they are without them."""
        return self.workload.cached(self.pool[0], np.random.default_rng([self.seed, 1]))

    def requests(self, rate: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The first requests of the pool for a run at `rate`: (prompts, outputs, arrival times scaled to the
        rate, cached prompt tokens)."""
        prompts, outputs, unit = self.pool
        window = 20 * float(outputs.mean()) * self.slo.tpot
        n = min(self.max_requests, max(self.num_requests, int(rate * window)))
        return prompts[:n], outputs[:n], unit[:n] / rate, self.cached[:n]

    def fits(self, par: Parallel) -> bool:
        """The weights fit and the longest request's KV fits in one instance of `par`."""
        prompts, outputs, _ = self.pool
        return self.model.kv_capacity(par.tp, par.pp, par.ep, par.threads) >= self.model.shape.kv_tokens(int((prompts + outputs).max()))

    def coeffs(self, par: Parallel, stages: bool = True) -> TPCoefficients:
        """The latency model at `par` on this cluster (`stages`: with its pipeline's hand-offs)."""
        return self.model.at(par.tp, par.pp if stages else 1, par.ep, self.cluster.fabric, par.threads)

    def lm(self, par: Parallel) -> int:
        return self.max_batch_tokens or self.coeffs(par, stages=False).saturation_tokens()

    def prefill_attainment(self, par: Parallel, rate: float) -> float:
        prompts, _, arrivals, cached = self.requests(rate)
        ttft = simulate_prefill(self.coeffs(par), par.pp, self.lm(par), prompts, arrivals, cached, self.model.shape)
        return float(np.mean(ttft <= self.slo.ttft))

    def decode_attainment(self, par: Parallel, rate: float) -> float:
        prompts, outputs, arrivals, _ = self.requests(rate)
        capacity = self.model.kv_capacity(par.tp, par.pp, par.ep, par.threads)
        misses = int((1 - self.slo.attainment) * len(prompts))  # beyond this the target is lost: stop early
        tpot = simulate_decode(self.coeffs(par), par.pp, capacity, prompts, outputs, arrivals,
                               self.slo.tpot, misses, self.model.shape)
        return float(np.mean(tpot <= self.slo.tpot))

    def attainment(self, placement: Placement, rate: float) -> float:
        prompts, outputs, arrivals, cached = self.requests(rate)
        result = simulate(self.model, placement, self.cluster, prompts, outputs, arrivals, self.max_batch_tokens,
                          cached=cached, decode_holds_prefix=self.decode_holds_prefix)
        return result.attainment(self.slo)


def max_rate(attainment, target: float, guess: float = 1.0, rel_tol: float = 0.02) -> float:
    """Largest rate with attainment(rate) ≥ target (0 when even a trickle fails), to `rel_tol`."""
    lo, hi = 0.0, guess
    while attainment(hi) >= target:
        lo, hi = hi, hi * 2
        if hi > 1e6:
            return lo
    if lo == 0.0:
        floor = guess / 1024
        while hi > floor and attainment(hi / 2) < target:
            hi /= 2
        if hi <= floor:
            return 0.0
        lo = hi / 2
    while hi - lo > rel_tol * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if attainment(mid) >= target else (lo, mid)
    return lo


def phase_goodput(scn: Scenario, phase: str, par: Parallel) -> float:
    """Req/s one instance of `par` serves with TTFT (prefill) or TPOT (decode) attainment ≥ target."""
    if not scn.fits(par):
        return 0.0
    fn = scn.prefill_attainment if phase == "prefill" else scn.decode_attainment
    return max_rate(lambda rate: fn(par, rate), scn.slo.attainment)


def placement_goodput(scn: Scenario, placement: Placement, guess: float = 1.0) -> float:
    """Req/s the whole placement serves with joint (TTFT and TPOT) attainment ≥ target."""
    return max_rate(lambda rate: scn.attainment(placement, rate), scn.slo.attainment, guess)
