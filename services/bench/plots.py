"""PNG figures of a run: attainment vs rate per mode with the simulator's curve, and the latency breakdown."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

from services.bench.results import STAGES, ModeResult, names  # noqa: E402

COLORS = {"disagg": "tab:blue", "colocated": "tab:orange", "chunked": "tab:green"}
VARIANT_COLORS = ("tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan", "tab:gray")


def line_colors(modes: list[str]) -> list[str]:
    """One color per result: its mode's for the mode's first result, a color of its own for each further variant."""
    spare, seen, colors = iter(VARIANT_COLORS), set(), []
    for mode in modes:
        colors.append(COLORS[mode] if mode in COLORS and mode not in seen else next(spare, "black"))
        seen.add(mode)
    return colors


def attainment_plot(results: list[ModeResult], path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for r, name, color in zip(results, names(results), line_colors([r.mode for r in results])):
        ax.plot([p.rate / r.devices for p in r.points], [100 * p.attainment for p in r.points], marker="o",
                color=color, label=f"{name} measured")
        for curve, style, kind in ((r.simulated_curve, "--", "simulated"), (r.calibrated_curve, ":", "calibrated"),
                                   (r.fitted_curve, "-.", "fitted")):
            if curve:
                ax.plot([x / r.devices for x, _ in curve], [100 * a for _, a in curve], linestyle=style, color=color,
                        label=f"{name} {kind}")
    if results:
        ax.axhline(100 * results[0].slo["target"], color="grey", linestyle=":", label="target")
    ax.set_xlabel("rate per device (req/s)")
    ax.set_ylabel("SLO attainment (%)")
    ax.set_ylim(0, 102)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def breakdown_plot(results: list[ModeResult], path: Path, title: str) -> None:
    """Stacked mean seconds per stage at each mode's goodput point (else its lowest rate)."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    labels = []
    for r, name in zip(results, names(results)):
        point = r.reference_point()
        if point is None:
            continue
        labels.append(f"{name}\n{point.rate:.3g} req/s")
        bottom = 0.0
        for j, stage in enumerate(STAGES):
            value = 1e3 * point.stages.get(stage, 0.0)
            ax.bar(len(labels) - 1, value, bottom=bottom, color=f"C{j}", label=stage if len(labels) == 1 else None)
            bottom += value
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("mean time per request (ms)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_plots(results: list[ModeResult], folder: Path) -> list[Path]:
    """One attainment and one breakdown PNG per workload."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for workload in dict.fromkeys(r.workload for r in results):
        group = [r for r in results if r.workload == workload]
        slo = group[0].slo
        title = f"{workload}: TTFT {1e3 * slo['ttft_s']:.0f} ms, TPOT {1e3 * slo['tpot_s']:.0f} ms, {100 * slo['target']:.0f}%"
        for kind, draw in (("attainment", attainment_plot), ("breakdown", breakdown_plot)):
            path = folder / f"{workload}-{kind}.png"
            draw(group, path, title)
            written.append(path)
    return written
