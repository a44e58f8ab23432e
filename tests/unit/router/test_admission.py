"""The admission decision on a fixed model and fixed queues: admit, refuse, best-effort; and what it costs."""

import statistics
import time

import pytest

from services.common.errors import EngineInputError, SloUnmet, status_of
from services.common.slo import SLO
from services.common.step_model import PrefillCoeffs
from services.common.step_model.predict import Mix, predict_tpot, predict_ttft
from services.common.step_model.stored import FittedModel
from services.router.admission import Candidate, RecentMix, decide, heading_to_decode, least_after, predict
from services.router.slo import default_slo, requested_slo

MODEL = FittedModel.from_json({"fitted_at": 5.0, "kinds": {
    "prefill@cpu:0": {"prefill": {"c0": 0.01, "per_token": 1e-4, "per_sq": 0.0}, "decode": None},
    "decode@cpu:1": {"prefill": None, "decode": {"c0": 0.004, "per_ctx": 1e-6, "per_req": 1e-3}},
}})
OBJECTIVES = SLO(ttft=0.2, tpot=0.05)


def _prediction(prefill_queue: float, decode_booked: float = 0.0, prompt: int = 100, max_tokens: int = 100):
    return predict(MODEL, [Candidate("p0", "prefill@cpu:0", prefill_queue)],
                   [Candidate("d0", "decode@cpu:1", decode_booked)], prompt, max_tokens, batch_tokens=512)


def test_ttft_is_the_queue_drained_in_batches_then_the_prompt():
    line = MODEL.prefill["prefill@cpu:0"]
    assert predict_ttft(line, 0, 100, 512) == pytest.approx(0.01 + 100 * 1e-4)
    # 3 batches of whole prompts: 462 tokens each on average (512 less half a prompt), then this one's
    assert predict_ttft(line, 1000, 100, 512) == pytest.approx(3 * 0.01 + 1100 * 1e-4)
    # booked tokens as requests of this size (200 each), halfway through their outputs, plus this one
    assert predict_tpot(MODEL.decode["decode@cpu:1"], 400, 100, 100) == pytest.approx(0.004 + 3 * 150 * 1e-6 + 3e-3)


def test_the_booked_loads_are_read_as_requests_of_the_recent_mix():
    line = MODEL.decode["decode@cpu:1"]
    mix = Mix(prompt=200, max_tokens=100)  # 300 tokens booked per request
    # 1200 booked tokens: 4 requests of the mix, halfway (250 context each), and this short one (52 context).
    assert predict_tpot(line, 1200, 50, 4, mix) == pytest.approx(0.004 + (4 * 250 + 52) * 1e-6 + 5e-3)
    # Read as requests of its own size (54 tokens), the short one would see 23 requests in the step.
    assert predict_tpot(line, 1200, 50, 4) == pytest.approx(0.004 + 1200 / 54 * 52 * 1e-6 + 1200 / 54 * 1e-3 + 1e-3 + 52e-6)
    assert decide(_prediction(0, 1200, prompt=50, max_tokens=4), SLO(tpot=0.02), "refuse").admit is False
    mixed = predict(MODEL, [], [Candidate("d0", "decode@cpu:1", 1200)], 50, 4, 512, mix)
    assert decide(mixed, SLO(tpot=0.02), "refuse").admit
    # the queued prompts' quadratic term: the mix's mean prompt, this one's own
    prefill = PrefillCoeffs(0.01, 1e-4, 1e-6)
    assert predict_ttft(prefill, 400, 100, 512, mix) == pytest.approx(2 * 0.01 + 500e-4 + (400 * 200 + 100 * 100) * 1e-6)
    assert predict_ttft(prefill, 400, 100, 512) == pytest.approx(2 * 0.01 + 500e-4 + 500 * 100 * 1e-6)


def test_a_long_queue_of_whole_prompts_drains_in_batches_fuller_by_half_a_prompt_less():
    line = PrefillCoeffs(0.1, 1e-3, 1e-6)
    # prompts of mean 200 and mean square 60 000: a queued token belongs to a prompt of 300 on average, so a
    # batch of whole prompts carries 512 - 150 = 362 tokens and Σ prompt² is 300 per queued token
    mix = Mix(prompt=200, max_tokens=50, prompt_sq=60_000)
    assert mix.queued_prompt() == pytest.approx(300)
    # 3620 queued: 10 batches of 362, then this prompt alone: 11 fixed costs (packed to 512: 8)
    got = predict_ttft(line, 3620, 100, 512, mix)
    assert got == pytest.approx(11 * 0.1 + 3720e-3 + (3620 * 300 + 100 * 100) * 1e-6)
    # 5.92 s: admitted with an SLO of 6 s; refused with 5.5 s, which batches packed to 512 of the mean prompt
    # (5.25 s) admitted
    model = FittedModel({"prefill@cpu:0": line}, {})
    queue = [Candidate("p0", "prefill@cpu:0", 3620)]
    assert decide(predict(model, queue, [], 100, 1, 512, mix), SLO(ttft=6.0), "refuse").admit
    assert not decide(predict(model, queue, [], 100, 1, 512, mix), SLO(ttft=5.5), "refuse").admit


def test_a_busy_instances_running_step_counts_only_what_is_left_of_it():
    line = MODEL.prefill["prefill@cpu:0"]
    # 1000 queued: a step of 462 runs (0.0562 s), then 538 and this prompt's 100 in two batches
    whole = predict_ttft(line, 1000, 100, 512)
    assert whole == pytest.approx(3 * 0.01 + 1100e-4)
    assert predict_ttft(line, 1000, 100, 512, running_s=0.05) == pytest.approx(whole - 0.05)
    assert predict_ttft(line, 1000, 100, 512, running_s=5.0) == pytest.approx(whole - 0.0562)  # overdue: about done
    assert predict_ttft(line, 0, 100, 512, running_s=5.0) == pytest.approx(0.01 + 100e-4)  # idle: nothing runs
    busy = [Candidate("p0", "prefill@cpu:0", 1000, running_s=0.05)]
    assert predict(MODEL, busy, [], 100, 1, 512).ttft_s == pytest.approx(whole - 0.05)


def test_the_recent_mix_is_a_plain_mean_first_then_weighs_the_latest():
    recent = RecentMix(weight=0.25)
    assert recent.mix() is None and recent.prompt_tokens_per_s() == 0.0
    for t, (prompt, out) in enumerate(((100, 10), (300, 30))):
        recent.add(prompt, out, now=float(t))
    assert recent.mix() == Mix(200, 20, 50_000, 200) and recent.prompt_tokens_per_s() == pytest.approx(200.0)  # 1 s apart
    recent.add(200, 20, now=1.5)
    recent.add(600, 60, now=2.0)  # weight 1/4 from the fourth on
    assert recent.mix() == Mix(pytest.approx(300), pytest.approx(30), pytest.approx(125_000), pytest.approx(300))
    assert recent.gap_s == pytest.approx(2 / 3) and recent.prompt_tokens_per_s() == pytest.approx(450)  # 1, 0.5, 0.5 s
    recent.add(200, 20, now=3600.0)  # an hour idle counts as 10 s
    assert recent.gap_s == pytest.approx(2 / 3 + 0.25 * (10.0 - 2 / 3))


def test_a_request_predicted_within_its_slo_is_admitted():
    decision = decide(_prediction(prefill_queue=300), OBJECTIVES, "refuse")
    assert decision.admit and not decision.best_effort
    assert decision.prediction.ttft_s == pytest.approx(0.01 + 300e-4 + 0.01 + 100e-4)  # the running step, then this
    assert (decision.prediction.prefill_instance, decision.prediction.decode_instance) == ("p0", "d0")


def test_a_request_predicted_to_miss_is_refused_with_the_figure_and_when_to_retry():
    decision = decide(_prediction(prefill_queue=3000), OBJECTIVES, "refuse")  # 7 batches: 0.07 + 0.31 s
    assert not decision.admit
    assert decision.reason == "predicted TTFT 380.0 ms > SLO 200 ms" and decision.retry_after_s == 1.0
    status = status_of(SloUnmet(f"slo: {decision.reason}", decision.retry_after_s))
    assert (status.code.name, status.http.status, status.retry_after_s) == ("RESOURCE_EXHAUSTED", 429, 1.0)
    tpot_miss = decide(_prediction(prefill_queue=0, decode_booked=20_000), OBJECTIVES, "refuse")  # 101 requests in the step
    assert not tpot_miss.admit and tpot_miss.reason.startswith("predicted TPOT ")
    far = decide(_prediction(prefill_queue=40_000), OBJECTIVES, "refuse")
    assert far.retry_after_s == pytest.approx(5.0)  # the queue must drain by the excess: 4.79 s, rounded up


def test_best_effort_admits_what_would_miss_and_marks_it():
    decision = decide(_prediction(prefill_queue=3000), OBJECTIVES, "best-effort")
    assert decision.admit and decision.best_effort and "TTFT" in decision.reason
    assert decide(_prediction(prefill_queue=3000), OBJECTIVES, "off").admit


def test_no_objective_or_no_model_admits_unpredicted_phases():
    assert decide(_prediction(prefill_queue=3000), SLO(), "refuse").admit
    unknown = predict(MODEL, [Candidate("p9", "prefill@cuda:0", 9e9)], [], 100, 100, 512)
    assert unknown.ttft_s is None and unknown.tpot_s is None and decide(unknown, OBJECTIVES, "refuse").admit


def test_the_request_paths_hops_add_to_the_ttft():
    hops = FittedModel.from_json({"kinds": {"prefill@cpu:0": {"prefill": {"c0": 0.01, "per_token": 1e-4, "per_sq": 0.0}}},
                                  "ttft_hops_s": 0.004})
    got = predict(hops, [Candidate("p0", "prefill@cpu:0", 0)], [], 100, 1, 512)
    assert got.ttft_s == pytest.approx(0.01 + 100e-4 + 0.004) and got.tpot_s is None


def test_the_handoff_lies_in_the_first_of_the_intervals_a_tpot_averages():
    line = MODEL.decode["decode@cpu:1"]
    alone = predict_tpot(line, 0, 100, 2)
    assert predict_tpot(line, 0, 100, 2, handoff_s=0.03) == pytest.approx(alone + 0.03)  # one interval: all of it
    assert predict_tpot(line, 0, 100, 11, handoff_s=0.03) == pytest.approx(predict_tpot(line, 0, 100, 11) + 0.003)
    model = FittedModel.from_json({"kinds": {"decode@cpu:1": {"decode": {"c0": 0.004, "per_ctx": 1e-6, "per_req": 1e-3}}},
                                   "handoff_s": 0.05})
    short = predict(model, [], [Candidate("d0", "decode@cpu:1", 0)], 100, 2, 512)
    assert short.tpot_s == pytest.approx(alone + 0.05) and not decide(short, OBJECTIVES, "refuse").admit
    assert decide(predict(model, [], [Candidate("d0", "decode@cpu:1", 0)], 100, 40, 512), OBJECTIVES, "refuse").admit


def test_prompts_arriving_meanwhile_join_this_ones_batch_up_to_its_room():
    line = MODEL.prefill["prefill@cpu:0"]
    # 1000 queued: a step of 462 running (0.0562 s), then 538 tokens in a batch of 462 (0.0562 s) and one of 76 with
    # this prompt; the 0.1124 s it waits bring 112.4 tokens at 1000/s, within its room
    whole = predict_ttft(line, 1000, 100, 512)
    assert predict_ttft(line, 1000, 100, 512, arriving_tps=1000) == pytest.approx(whole + 112.4e-4)
    # 300 queued (running: 0.04 s); this one's batch has room for 362: 0.04 s x 1000/s brings 40 tokens
    assert predict_ttft(line, 300, 100, 512, arriving_tps=1000) == pytest.approx(predict_ttft(line, 300, 100, 512) + 40e-4)
    assert predict_ttft(line, 300, 100, 512, arriving_tps=1e6) == pytest.approx(predict_ttft(line, 300, 100, 512) + 362e-4)
    assert predict_ttft(line, 0, 100, 512, arriving_tps=1e6) == pytest.approx(0.01 + 100e-4)  # idle: starts at once
    # two prefill instances share the arrivals: half of them join here
    two = [Candidate("p0", "prefill@cpu:0", 300), Candidate("p1", "prefill@cpu:0", 900)]
    assert predict(MODEL, two, [], 100, 1, 512, arriving_tps=2000).ttft_s == pytest.approx(
        predict_ttft(line, 300, 100, 512, arriving_tps=1000))


def test_prompts_waiting_at_the_router_for_a_slot_are_ahead_of_a_newcomer():
    line = MODEL.prefill["prefill@cpu:0"]
    # nothing booked on the instance, 3000 prompt tokens admitted but waiting for max_inflight: they are
    # dispatched first, so the newcomer waits as behind a queue of 3000 (380 ms > 200 ms: refused)
    waited = predict(MODEL, [Candidate("p0", "prefill@cpu:0", 0)], [], 100, 1, 512, waiting=3000)
    assert waited.ttft_s == pytest.approx(predict_ttft(line, 3000, 100, 512)) and waited.prefill_queue == 3000
    assert not decide(waited, OBJECTIVES, "refuse").admit
    assert decide(predict(MODEL, [Candidate("p0", "prefill@cpu:0", 0)], [], 100, 1, 512), OBJECTIVES, "refuse").admit
    # a short wait still admits: 300 tokens ahead (0.08 s with this prompt)
    short = predict(MODEL, [Candidate("p0", "prefill@cpu:0", 0)], [], 100, 1, 512, waiting=300)
    assert short.ttft_s == pytest.approx(predict_ttft(line, 300, 100, 512)) and decide(short, OBJECTIVES, "refuse").admit


def test_waiting_prompts_fill_the_least_loaded_prefill_instances_first():
    assert least_after([600.0, 0.0], 400) == pytest.approx(400)  # all onto the idle one, still the lesser
    assert least_after([600.0, 0.0], 1000) == pytest.approx(800)  # 600 to level them, then 200 each
    assert least_after([0.0, 0.0, 900.0], 600) == pytest.approx(300)
    assert least_after([], 600) == 600
    two = [Candidate("p0", "prefill@cpu:0", 600), Candidate("p1", "prefill@cpu:0", 0)]
    got = predict(MODEL, two, [], 100, 1, 512, waiting=1000)
    line = MODEL.prefill["prefill@cpu:0"]
    assert got.ttft_s == pytest.approx(predict_ttft(line, 800, 100, 512)) and got.prefill_instance == "p1"


def test_requests_on_their_way_to_decode_count_in_the_batch_a_newcomer_joins():
    line, mix = MODEL.decode["decode@cpu:1"], Mix(100, 100)
    # 3000 prompt tokens queued at prefill and 1000 waiting at the router: 40 requests of the mix, which reach
    # decode before the newcomer: 8000 decode tokens booked ahead of it
    queued = [Candidate("p0", "prefill@cpu:0", 3000)]
    assert heading_to_decode(queued, 1000, 50, 10, mix) == pytest.approx(8000)
    got = predict(MODEL, queued, [Candidate("d0", "decode@cpu:1", 0)], 100, 100, 512, mix, waiting=1000)
    assert got.tpot_s == pytest.approx(predict_tpot(line, 8000, 100, 100, mix))
    # an empty decode instance admits, the same with the pipeline ahead of it does not (5.2 ms vs 51.2 ms > 50 ms)
    idle = predict(MODEL, [Candidate("p0", "prefill@cpu:0", 0)], [Candidate("d0", "decode@cpu:1", 0)], 100, 100, 512, mix)
    assert decide(idle, SLO(tpot=0.05), "refuse").admit
    assert not decide(got, SLO(tpot=0.05), "refuse").admit
    # spread as the dispatcher will: onto the least-loaded decode instance first
    two = [Candidate("d0", "decode@cpu:1", 6000), Candidate("d1", "decode@cpu:1", 0)]
    spread = predict(MODEL, queued, two, 100, 100, 512, mix, waiting=1000)
    assert spread.tpot_s == pytest.approx(predict_tpot(line, 7000, 100, 100, mix)) and spread.decode_instance == "d1"


def test_the_least_loaded_instance_of_each_role_is_predicted_for():
    prefill = [Candidate("busy", "prefill@cpu:0", 5000), Candidate("idle", "prefill@cpu:0", 0)]
    decode = [Candidate("d-busy", "decode@cpu:1", 9000), Candidate("d-idle", "decode@cpu:1", 200)]
    got = predict(MODEL, prefill, decode, 100, 100, 512)
    assert (got.prefill_instance, got.decode_instance) == ("idle", "d-idle")


def test_the_decision_costs_well_under_a_millisecond():
    prefill = [Candidate(f"p{i}", "prefill@cpu:0", 100.0 * i) for i in range(16)]
    decode = [Candidate(f"d{i}", "decode@cpu:1", 300.0 * i) for i in range(16)]
    costs = []
    for _ in range(2000):
        began = time.perf_counter()
        decide(predict(MODEL, prefill, decode, 200, 64, 512, Mix(200, 64), 800.0, waiting=2000), OBJECTIVES, "refuse")
        costs.append(time.perf_counter() - began)
    assert statistics.median(costs) < 1e-4  # 16 instances of each role, on a shared core


def test_slo_headers_are_milliseconds_and_bad_ones_name_the_header():
    assert requested_slo({"x-slo-ttft-ms": "250", "x-slo-tpot-ms": "40.5"}) == SLO(0.25, 0.0405)
    assert requested_slo({}) == SLO()
    assert requested_slo({"x-slo-tpot-ms": "40"}).or_defaults(default_slo(1000, 0)) == SLO(1.0, 0.04)
    for bad in ("0", "-3", "fast", "nan", "inf"):
        with pytest.raises(EngineInputError) as err:
            requested_slo({"x-slo-ttft-ms": bad})
        assert err.value.field == "x-slo-ttft-ms"
