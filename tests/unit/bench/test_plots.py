"""The attainment plot tells a mode's variants apart."""

from services.bench.plots import COLORS, line_colors


def test_each_mode_keeps_its_color_and_each_further_variant_gets_its_own() -> None:
    colors = line_colors(["disagg", "disagg", "colocated", "disagg", "colocated"])
    assert colors[0] == COLORS["disagg"] and colors[2] == COLORS["colocated"]
    assert len(set(colors)) == 5


def test_the_first_variant_takes_the_first_spare_color() -> None:
    assert line_colors(["disagg", "disagg"])[1] == "tab:red"
