"""The router's live model-error metrics (docs/admission.md) as the bench reads them around each run: the error
histograms (measured − predicted TTFT and TPOT) as their difference over the run, and the predicted and measured
attainment gauges as the run leaves them (their window, the last 200 predicted requests, is a run of 200)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

HISTOGRAMS = {"ttft": "distserve_slo_ttft_error_seconds", "tpot": "distserve_slo_tpot_error_seconds"}
GAUGE = "distserve_slo_attainment"
QUANTILES = (0.1, 0.5, 0.9)


@dataclass(frozen=True, slots=True)
class Scrape:
    buckets: dict[str, dict[float, float]]  # phase → upper bound → cumulative count
    attainment: dict[str, float]  # "phase/source" → the gauge


def scrape(metrics_url: str) -> Scrape:
    return parse(httpx.get(metrics_url, timeout=10).text)


def parse(text: str) -> Scrape:
    """The error histograms' buckets and the attainment gauges of a Prometheus exposition."""
    buckets: dict[str, dict[float, float]] = {phase: {} for phase in HISTOGRAMS}
    attainment = {}
    names = {name: phase for phase, name in HISTOGRAMS.items()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.name[:-len("_bucket")] in names:
                buckets[names[sample.name[:-len("_bucket")]]][float(sample.labels["le"])] = sample.value
            elif sample.name == GAUGE:
                attainment[f"{sample.labels['phase']}/{sample.labels['source']}"] = sample.value
    return Scrape(buckets, attainment)


def quantile(cumulative: list[tuple[float, float]], q: float) -> float | None:
    """The q-quantile of a histogram's (upper bound, cumulative count) pairs, interpolated within its bucket as
    Prometheus' histogram_quantile does (the lowest bucket's lower edge taken as its bound)."""
    total = cumulative[-1][1] if cumulative else 0.0
    if total <= 0:
        return None
    rank, below, lower = q * total, 0.0, cumulative[0][0]
    for bound, count in cumulative:
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        below, lower = count, bound
    return lower


def run_errors(before: Scrape, after: Scrape) -> dict:
    """The errors of the requests finished between two scrapes, and the gauges after them."""
    out: dict = {}
    for phase in HISTOGRAMS:
        pairs = sorted((b, c - before.buckets[phase].get(b, 0.0)) for b, c in after.buckets[phase].items())
        out[f"{phase}_error_s"] = {"count": int(pairs[-1][1]) if pairs else 0,
                                   **{f"p{round(100 * q)}": quantile(pairs, q) for q in QUANTILES}}
    out["attainment"] = dict(after.attainment)
    return out
