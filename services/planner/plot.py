"""Attainment vs rate of a placement, swept in the whole-system simulation, as a PNG."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)
import numpy as np  # noqa: E402

from services.planner.goodput import Scenario  # noqa: E402
from services.planner.placement import Placement  # noqa: E402


def attainment_curve(scn: Scenario, placement: Placement, goodput: float, points: int = 12) -> tuple[list, list]:
    """Rates from 0.25× to 2× the goodput, and the SLO attainment at each."""
    rates = np.linspace(0.25, 2.0, points) * max(goodput, 0.01)
    return rates.tolist(), [scn.attainment(placement, float(rate)) for rate in rates]


def write_plot(path: str, rates: list[float], attainment: list[float], target: float, goodput: float,
               title: str) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(rates, [100 * a for a in attainment], marker="o", label="simulated")
    ax.axhline(100 * target, color="grey", linestyle="--", label=f"target {100 * target:.0f}%")
    ax.axvline(goodput, color="tab:red", linestyle=":", label=f"goodput {goodput:.2f} req/s")
    ax.set_xlabel("rate (req/s)")
    ax.set_ylabel("SLO attainment (%)")
    ax.set_ylim(0, 102)
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
