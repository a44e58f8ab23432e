"""Prefix hits: fitted from request records, drawn per simulated request, carried through the REST bodies."""

import numpy as np
import pytest
from pydantic import ValidationError

from services.planner.prefix import PrefixHits, fit_hits
from services.planner.records import RecordedWorkload, fit_records
from services.planner.schemas import PlanRequest, ReplanRequest
from services.planner.service import replan_request, workload_of


def _chat_fraction(prompts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A known multi-turn hit law: short prompts are mostly first turns (70 % miss), long ones later turns (20 %
    miss, else 60–95 % of the prompt cached)."""
    miss = rng.random(len(prompts)) < np.where(prompts <= 1024, 0.7, 0.2)
    return np.where(miss, 0.0, np.where(prompts <= 1024, rng.uniform(0.1, 0.5, len(prompts)),
                                        rng.uniform(0.6, 0.95, len(prompts))))


def _records(n: int, seed: int = 0) -> list[dict[str, str]]:
    rng = np.random.default_rng(seed)
    prompts = rng.integers(32, 2048, n)
    cached = np.minimum((_chat_fraction(prompts, rng) * prompts).astype(int), prompts - 1)
    return [{"prompt_tokens": str(p), "output_tokens": "50", "arrival": repr(i * 0.5), "cached_tokens": str(c)}
            for i, (p, c) in enumerate(zip(prompts.tolist(), cached.tolist()))]


def test_the_profiler_recovers_a_known_hit_distribution_by_prompt_length():
    recorded = fit_records(_records(4000))
    hits = recorded.workload.hits
    assert hits is not None and len(hits.edges) == 7
    rng = np.random.default_rng(5)
    prompts = rng.integers(32, 2048, 50000)
    fitted = hits.cached(prompts, rng) / prompts
    known = _chat_fraction(prompts, rng)
    for short in (prompts <= 1024, prompts > 1024):
        assert np.mean(fitted[short] == 0) == pytest.approx(np.mean(known[short] == 0), abs=0.04)
        assert fitted[short].mean() == pytest.approx(known[short].mean(), abs=0.02)
        assert np.percentile(fitted[short], 90) == pytest.approx(np.percentile(known[short], 90), abs=0.03)
    assert recorded.hit_rate == pytest.approx((known * prompts).sum() / prompts.sum(), abs=0.02)  # token-weighted
    assert recorded.as_dict()["prefix_hits"] == hits.as_dict()


def test_records_without_hits_fit_no_distribution():
    records = [{k: v for k, v in r.items() if k != "cached_tokens"} for r in _records(200)]
    recorded = fit_records(records)
    assert recorded.workload.hits is None and recorded.hit_rate == 0.0
    assert fit_hits(np.array([10, 20]), np.array([0, 0])) is None


def test_a_drawn_hit_leaves_at_least_the_last_prompt_token_to_compute():
    prompts = np.array([1, 16, 100, 3000])
    every = PrefixHits((), ((1.0,),)).cached(prompts, np.random.default_rng(0))
    assert every.tolist() == [0, 15, 99, 2999]
    half = PrefixHits((50,), ((0.0,), (0.5,))).cached(prompts, np.random.default_rng(0))
    assert half.tolist() == [0, 0, 50, 1500]


def test_the_rest_body_round_trips_and_refuses_malformed_distributions():
    hits = {"edges": [512, 1024], "quantiles": [[0, 0, 0.3], [0, 0.5, 0.8], [0.2, 0.8, 0.9]]}
    body = {"model": "opt-13b", "workload": {"name": "chatbot", "prefix_hits": hits}}
    req = PlanRequest.model_validate(body)
    assert PlanRequest.model_validate_json(req.model_dump_json()) == req
    assert workload_of(req.workload).hits == PrefixHits((512, 1024), ((0, 0, 0.3), (0, 0.5, 0.8), (0.2, 0.8, 0.9)))
    assert PlanRequest.model_validate({**body, "workload": {"name": "chatbot"}}).workload.prefix_hits is None
    for bad in ({"edges": [512], "quantiles": [[0.1]]}, {"edges": [9, 3], "quantiles": [[0], [0], [0]]},
                {"quantiles": [[0.5, 0.2]]}, {"quantiles": [[1.5]]}):
        with pytest.raises(ValidationError, match="prefix_hits"):
            PlanRequest.model_validate({**body, "workload": {"name": "chatbot", "prefix_hits": bad}})


def test_replanning_plans_with_the_recorded_hits():
    recorded: RecordedWorkload = fit_records(_records(500))
    req = replan_request(ReplanRequest(model="opt-13b"), recorded)
    assert workload_of(req.workload).hits == recorded.workload.hits
