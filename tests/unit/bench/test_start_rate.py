"""The search's default first rate: half the simulated disaggregated goodput, with the hits the cache will find."""

from services.bench.runner import Bench, BenchConfig


def test_shared_prompts_start_higher_with_the_cache_on(profile_path: str) -> None:
    def start(caching: str) -> float:
        cfg = BenchConfig(model="small-llama", modes=("disagg",), workloads=("shared-prompt",),
                          devices=("cpu:0", "cpu:1"), prefix_caching=caching, ttft=1.0, tpot=0.1,
                          profile=profile_path)
        return Bench(cfg).start_rates["shared-prompt"]

    assert start("on") > 2 * start("off")
