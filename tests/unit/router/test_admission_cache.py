"""Admission prices the prefix cache on the path routing took: a prefix every prefill holds, the larger hit of a
reverse pull, a local prefill's queue (none) and running step, and the requests heading to decode counted whole."""

import pytest

from services.common.sampling import SamplingParams
from services.common.step_model.predict import Mix
from services.common.step_model.stored import FittedModel
from services.router.admission import Candidate, Placed, heading_to_decode, predict
from services.router.gate import placed
from services.router.paths import Route
from services.router.prefix_routing import PrefillPick
from services.router.request import RouterRequest

MODEL = FittedModel.from_json({"kinds": {
    "prefill@cpu:0": {"prefill": {"c0": 0.01, "per_token": 1e-4, "per_sq": 0.0}, "decode": None},
    "decode@cpu:1": {"prefill": None, "decode": {"c0": 0.004, "per_ctx": 1e-6, "per_req": 1e-3}},
}})
PREFILLS = [Candidate("p0", "prefill@cpu:0", 2000), Candidate("p1", "prefill@cpu:0", 2000)]
DECODES = [Candidate("d0", "decode@cpu:1", 0)]


def _ttft(at: Placed, prompt: int = 1000) -> float:
    return predict(MODEL, PREFILLS, DECODES, prompt, 16, 512, placed=at).ttft_s


def _request(pick: PrefillPick, route: Route) -> RouterRequest:
    req = RouterRequest("r", list(range(1000)), SamplingParams(max_tokens=16))
    req.prefill_pick, req.route = pick, route
    return req


def test_a_prefix_every_prefill_holds_is_credited_though_the_load_book_picks():
    # pick_prefill names no instance when the cache tells none apart: every one holds 896 tokens
    at = placed(_request(PrefillPick("", 896), Route("delta", "d0", 960)))
    assert at == Placed("", 896, "d0")
    assert _ttft(at) == pytest.approx(_ttft(Placed("p0", 896)))
    assert _ttft(at) < _ttft(Placed()) - 896 * 1e-4 * 0.99


def test_a_reverse_pull_is_predicted_with_the_larger_hit_and_a_local_prefill_without_a_prefill_queue():
    assert placed(_request(PrefillPick("p1", 512), Route("reverse", "d0", 960))) == Placed("p1", 960, "d0")
    local = placed(_request(PrefillPick("p1", 512), Route("local", "d0", 960)))
    assert local == Placed("p1", 960, "d0", local=True)
    running_step = 0.004 + 1e-3 + 1e-6 * (1000 + 8)  # the decode's step with it joined, nothing else booked
    assert _ttft(local) == pytest.approx(0.01 + 40 * 1e-4 + running_step)  # no 2000-token prefill queue ahead


def test_prefill_queues_of_uncached_tokens_head_to_decode_as_whole_requests():
    # 1000 prompt tokens booked on prefill are 10 requests of 100 computed tokens, each a 1000 + 100 token request
    mix = Mix(prompt=1000, max_tokens=100, computed=100)
    assert heading_to_decode([Candidate("p0", "prefill@cpu:0", 1000)], 0, 1000, 100, mix) == pytest.approx(11_000)
    assert heading_to_decode([Candidate("p0", "prefill@cpu:0", 1000)], 0, 1000, 100, Mix(1000, 100)) \
        == pytest.approx(1100)  # no cache: one request
