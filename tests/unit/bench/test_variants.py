"""`--vary` runs each mode with the given settings first, then with every combination of the varied ones flipped."""

from services.bench.runner import BenchConfig, Variant, variants


def test_varied_settings_flip_in_every_combination_and_routing_only_where_it_picks():
    assert variants(BenchConfig(model="m")) == [Variant("disagg", "on", "model")]
    cfg = BenchConfig(model="m", modes=("disagg", "colocated"), prefix_caching="off", routing="queue",
                      vary=("prefix-caching", "routing"))
    assert variants(cfg) == [Variant("disagg", "off", "queue"), Variant("disagg", "off", "model"),
                             Variant("disagg", "on", "queue"), Variant("disagg", "on", "model"),
                             Variant("colocated", "off", "queue"), Variant("colocated", "on", "queue")]


def test_other_device_sets_repeat_every_variant_on_their_devices():
    cfg = BenchConfig(model="m", modes=("colocated",), devices=("cpu:0", "cpu:1"), other_devices=(("cpu:0-1",),))
    assert variants(cfg) == [Variant("colocated", "on", "model"), Variant("colocated", "on", "model", ("cpu:0-1",))]


def test_the_bench_flag_takes_device_sets_that_keep_core_lists_together():
    import argparse

    from services.bench import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["bench", "--start", "--compare", "colocated", "--other-devices", "cpu:0-1;cpu:0,1",
                              "--ttft", "1", "--tpot", "0.1", "--model", "tiny-llama"])
    assert cli._config(args).other_devices == (("cpu:0-1",), ("cpu:0,1",))
