"""The router setting report_cached_tokens: off, clients are told no prompt token came from the prefix cache."""

from __future__ import annotations

from services.common.sampling import SamplingParams
from services.router.http import Batch
from services.router.request import RouterRequest


def test_usage_reports_the_cached_tokens_unless_the_router_hides_them() -> None:
    reqs = [RouterRequest("a", [1] * 40, SamplingParams(), cached_tokens=32),
            RouterRequest("b", [1] * 20, SamplingParams(), cached_tokens=16)]
    assert Batch(reqs, 1).usage(5)["prompt_tokens_details"] == {"cached_tokens": 48}
    hidden = Batch(reqs, 1, report_cached=False).usage(5)
    assert hidden["prompt_tokens_details"] == {"cached_tokens": 0} and hidden["prompt_tokens"] == 60
