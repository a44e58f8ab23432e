"""`--vary` runs each mode with the given settings first, then with every combination of the varied ones flipped."""

from services.bench.runner import BenchConfig, Variant, variants


def test_varied_settings_flip_in_every_combination_and_routing_only_where_it_picks():
    assert variants(BenchConfig(model="m")) == [Variant("disagg", "on", "model")]
    cfg = BenchConfig(model="m", modes=("disagg", "colocated"), prefix_caching="off", routing="queue",
                      vary=("prefix-caching", "routing"))
    assert variants(cfg) == [Variant("disagg", "off", "queue"), Variant("disagg", "off", "model"),
                             Variant("disagg", "on", "queue"), Variant("disagg", "on", "model"),
                             Variant("colocated", "off", "queue"), Variant("colocated", "on", "queue")]
