"""The figures of a run: the JSON document (`results` plus derived comparisons) and a readable table."""

from __future__ import annotations

import math
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from services.bench.results import STAGES, ModeResult, names


def _finite(value):
    """JSON has no infinity: unmet quantities become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def ratios(results: list[ModeResult]) -> dict[str, dict[str, float | None]]:
    """Per workload (and settings, where they vary): disaggregated goodput per device over each other mode's with
    the same settings (None when the other is 0)."""
    out: dict[str, dict[str, float | None]] = {}
    for r, name in zip(results, names(results)):
        if r.mode == "disagg":
            continue
        base = next((d for d in results if d.mode == "disagg" and (d.workload, d.settings) == (r.workload, r.settings)),
                    None)
        if base is not None:
            value = base.goodput_per_device / r.goodput_per_device if r.goodput_per_device else None
            out.setdefault(r.workload + name.removeprefix(r.mode), {})[f"disagg/{r.mode}"] = value
    return out


def simulator_errors(results: list[ModeResult]) -> list[dict[str, float | str | None]]:
    """Predicted minus measured attainment in percentage points at every measured rate that has a prediction:
    `error_points` for the model as profiled, `calibrated_error_points` for it rescaled to served lone requests,
    `fitted_error_points` for it fitted to a calibration load's served steps with the path's overheads, and
    `replayed_error_points` for the same simulator on the point's own served step costs (no prediction: it
    separates the simulator's error from that of predicting step costs). `measured_se_points`: the measured
    attainment's binomial standard error, the noise a prediction cannot be closer than; `measured_ci` its 95%
    interval and `fitted_within_ci` whether the fitted prediction lies in it; `up_to_knee`: rate ≤ goodput."""

    def diff(predicted: float | None, measured: float) -> float | None:
        return None if predicted is None else 100 * (predicted - measured)

    def within(predicted: float | None, ci: tuple[float, float]) -> bool | None:
        return None if predicted is None else ci[0] <= predicted <= ci[1]

    return [{"mode": r.mode, "workload": r.workload, "rate": p.rate, "requests": p.requests, "measured": p.attainment,
             "measured_se_points": 100 * p.attainment_se, "measured_ci": list(p.attainment_ci),
             "up_to_knee": p.rate <= r.goodput, "fitted_within_ci": within(p.fitted_attainment, p.attainment_ci),
             "simulated": p.simulated_attainment, "error_points": diff(p.simulated_attainment, p.attainment),
             "calibrated": p.calibrated_attainment,
             "calibrated_error_points": diff(p.calibrated_attainment, p.attainment),
             "fitted": p.fitted_attainment, "fitted_error_points": diff(p.fitted_attainment, p.attainment),
             "replayed": p.replayed_attainment, "replayed_error_points": diff(p.replayed_attainment, p.attainment)}
            for r in results for p in r.points if p.simulated_attainment is not None]


def transfer_shares(results: list[ModeResult]) -> list[dict[str, float | str | None]]:
    """Mean KV transfer time over mean end-to-end latency at the goodput point (else the lowest rate)."""
    out = []
    for r in results:
        point = r.reference_point()
        if point is not None and point.transfer_share is not None:
            out.append({"mode": r.mode, "workload": r.workload, "rate": point.rate, "at_goodput": point.rate == r.goodput,
                        "transfer_s": point.stages.get("transfer"), "e2e_s": point.e2e.get("mean"),
                        "share": point.transfer_share})
    return out


def overload_ratios(results: list[ModeResult]) -> list[dict[str, float | str | None]]:
    """Per workload and multiple of the knee: goodput per device with admission on over off (None when off is 0)."""
    out = []
    for r in results:
        for on in (o for o in r.overload if o["admission"]):
            off = next(o for o in r.overload if not o["admission"] and o["multiple"] == on["multiple"])
            ratio = on["goodput_per_device"] / off["goodput_per_device"] if off["goodput_per_device"] else None
            out.append({"mode": r.mode, "workload": r.workload, "multiple": on["multiple"], "rate": on["rate"],
                        "goodput_per_device_off": off["goodput_per_device"], "goodput_per_device_on": on["goodput_per_device"],
                        "ratio": ratio, "admitted_attainment_on": on["admitted_attainment"],
                        "share_refused_on": on["share_refused"]})
    return out


def document(results: list[ModeResult], config: dict, wall_s: float) -> dict:
    return _finite({"config": config, "wall_s": wall_s, "results": [asdict(r) for r in results],
                    "ratios": ratios(results), "simulator_error": simulator_errors(results),
                    "overload_ratios": overload_ratios(results), "transfer_share": transfer_shares(results)})


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{1e3 * seconds:.0f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _points(predicted: float | None, measured: float) -> str:
    return "-" if predicted is None else f"{100 * (predicted - measured):+.1f}"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _overload_table(results: list[ModeResult], console: Console) -> None:
    """Past the knee, SLO-aware admission off and on (`--overload`)."""
    rows = [(r, o) for r in results for o in r.overload]
    if not rows:
        return
    table = Table(title="past the knee: SLO-aware admission off and on (goodput: req/s meeting both SLOs)")
    for col in ("workload", "mode", "x knee", "rate", "admission", "requests", "refused", "attainment",
                "admitted attain", "goodput/device"):
        table.add_column(col, justify="left" if col in ("workload", "mode", "admission") else "right")
    for r, o in rows:
        table.add_row(r.workload, r.mode, f"{o['multiple']:g}", f"{o['rate']:.3g}", "on" if o["admission"] else "off",
                      str(o["requests"]), _pct(o["share_refused"]), _pct(o["attainment"]),
                      _pct(o["admitted_attainment"]), f"{o['goodput_per_device']:.3f}")
    console.print(table)
    for o in overload_ratios(results):
        ratio = "undefined (no goodput off)" if o["ratio"] is None else f"{o['ratio']:.2f}x"
        console.print(f"{o['workload']} {o['mode']} at {o['multiple']:g}x the knee ({o['rate']:.3g} req/s): goodput per "
                      f"device with admission / without = {ratio}; refused {_pct(o['share_refused_on'])}, admitted "
                      f"attainment {_pct(o['admitted_attainment_on'])}")


def _live_table(results: list[ModeResult], console: Console) -> None:
    """The router's live model-error metrics per run (`--overload`): the error histograms' quantiles over the
    run, and the attainment gauges (predicted and measured, both phases) after it; an overload run's rate
    reads `rate multiple admission`."""
    rows = [(r, f"{p.rate:.3g}" + (f" run {i + 1}" if p.runs > 1 else ""), live)
            for r in results for p in r.points for i, live in enumerate(p.live)]
    rows += [(r, f"{o['rate']:.3g} {o['multiple']:g}x {'on' if o['admission'] else 'off'}", o["live"])
             for r in results for o in r.overload if o.get("live")]
    if not rows:
        return
    table = Table(title="router's live model error (measured - predicted, ms; attainment gauges after the run)")
    for col in ("workload", "mode", "rate", "n", "TTFT err p10", "p50", "p90", "TPOT err p10", "p50 ", "p90 ",
                "pred attain", "meas attain", "pred TTFT", "meas TTFT", "pred TPOT", "meas TPOT"):
        table.add_column(col, justify="left" if col in ("workload", "mode", "rate") else "right")
    for r, rate, live in rows:
        ttft, tpot, gauges = live["ttft_error_s"], live["tpot_error_s"], live["attainment"]
        table.add_row(r.workload, r.mode, rate, str(ttft["count"]), *(_ms(ttft[q]) for q in ("p10", "p50", "p90")),
                      *(_ms(tpot[q]) for q in ("p10", "p50", "p90")),
                      *(_pct(gauges.get(f"{phase}/{source}")) for phase in ("both", "ttft", "tpot")
                        for source in ("predicted", "measured")))
    console.print(table)


def _ci_lines(results: list[ModeResult], console: Console) -> None:
    """The fitted prediction against each measured point's 95% interval, at the rates up to the knee."""
    errors = [e for e in simulator_errors(results) if e["fitted_within_ci"] is not None and e["up_to_knee"]]
    for mode, workload in dict.fromkeys((e["mode"], e["workload"]) for e in errors):
        mine = [e for e in errors if (e["mode"], e["workload"]) == (mode, workload)]
        console.print(f"{workload} {mode}: fitted prediction within the measured attainment's 95% CI at "
                      f"{sum(e['fitted_within_ci'] for e in mine)} of {len(mine)} rates up to the knee")
        for e in mine:
            low, high = e["measured_ci"]
            console.print(f"  {e['rate']:.3g} req/s, {e['requests']} requests: measured {100 * e['measured']:.1f}% "
                          f"[{100 * low:.1f}, {100 * high:.1f}], fitted {100 * e['fitted']:.1f}% "
                          f"{'within' if e['fitted_within_ci'] else 'OUTSIDE'}")


def _ttft(stats: dict[str, float]) -> tuple[str, str]:
    return _ms(stats.get("p50")), _ms(stats.get("p90"))


def _cache_table(results: list[ModeResult], console: Console) -> None:
    """Per run: the prefix cache's hit rate, TTFT of first and follow-up turns apart, TPOT and attainment."""
    table = Table(title="prefix cache and turns per run (ms; hit rate = not computed / prompt tokens of completed "
                        "requests; decode hit = held by the decode instance, not pulled)")
    for col in ("workload", "mode", "cache", "route", "rate", "requests", "hit rate", "decode hit", "1st TTFT p50", "p90",
                "follow-up TTFT p50", "p90 ", "TPOT p50", "p90  ", "attainment [95% CI]", "goodput/device"):
        table.add_column(col, justify="left" if col in ("workload", "mode", "cache", "route") else "right")
    for r in results:
        for p in r.points:
            low, high = p.attainment_ci
            table.add_row(r.workload, r.mode, r.prefix_caching, r.routing, f"{p.rate:.3g}{'*' if p.rate == r.goodput else ''}",
                          str(p.requests), _pct(p.prefix_hit_rate), _pct(p.decode_hit_rate), *_ttft(p.first_turn_ttft), *_ttft(p.followup_ttft),
                          *_ttft(p.tpot), f"{100 * p.attainment:.0f}% [{100 * low:.0f}, {100 * high:.0f}]",
                          f"{r.goodput_per_device:.3f}")
    console.print(table)


def print_tables(results: list[ModeResult], console: Console) -> None:
    """Goodput per mode and workload, the points of each, and the comparisons."""
    summary = Table(title="goodput per device (req/s per device; attainment target met)")
    for col in ("workload", "mode", "devices", "TTFT SLO ms", "TPOT SLO ms", "goodput/device", "simulated",
                "calibrated", "fitted", "lone TTFT ms", "lone TPOT ms"):
        summary.add_column(col, justify="right" if col not in ("workload", "mode") else "left")
    for r, name in zip(results, names(results)):
        summary.add_row(r.workload, name, str(r.devices), _ms(r.slo["ttft_s"]), _ms(r.slo["tpot_s"]),
                        f"{r.goodput_per_device:.2f}", _num(r.simulated_goodput_per_device),
                        _num(r.calibrated_goodput_per_device), _num(r.fitted_goodput_per_device),
                        _ms(r.lone.get("ttft_s")), _ms(r.lone.get("tpot_s")))
    console.print(summary)
    for r in results:
        if r.fitted_knee:
            console.print(f"{r.workload} {r.mode}: rates measured around the fitted simulator's knee, "
                          f"{r.fitted_knee:.3g} req/s")
        elif r.fitted_knee is not None:
            console.print(f"{r.workload} {r.mode}: the fitted simulator meets the target at no rate; rates measured "
                          "around the start rate")

    points = Table(title="points (latencies in ms; stages are means of the router's records)")
    cols = ("workload", "mode", "rate", "runs", "attain", "sim", "err pp", "cal", "cal err", "fit", "fit err", "replay err",
            "TTFT p90", "TPOT p90", "1st gap p90", "min scale",
            *STAGES, "xfer share")
    for col in cols:
        points.add_column(col, justify="left" if col in ("workload", "mode") else "right")
    for r, name in zip(results, names(results)):
        for p in r.points:
            sim, cal, fit = p.simulated_attainment, p.calibrated_attainment, p.fitted_attainment
            scale = "-" if not math.isfinite(p.tightest_slo_scale) else f"{p.tightest_slo_scale:.2f}"
            mark = "*" if p.rate == r.goodput else ""
            points.add_row(r.workload, name, f"{p.rate:.3g}{mark}", str(p.runs), _pct(p.attainment), _pct(sim),
                           _points(sim, p.attainment), _pct(cal), _points(cal, p.attainment), _pct(fit),
                           _points(fit, p.attainment), _points(p.replayed_attainment, p.attainment),
                           _ms(p.ttft.get("p90")), _ms(p.tpot.get("p90")), _ms(p.first_gap.get("p90")), scale,
                           *(_ms(p.stages.get(s)) for s in STAGES),
                           "-" if p.transfer_share is None else f"{100 * p.transfer_share:.2f}%")
    console.print(points)
    _cache_table(results, console)
    _ci_lines(results, console)
    _live_table(results, console)
    _overload_table(results, console)
    for workload, by in ratios(results).items():
        console.print(f"{workload}: " + ", ".join(f"{k} = {'undefined (no goodput)' if v is None else f'{v:.2f}x'}"
                                                  for k, v in by.items()))
    errors = simulator_errors(results)
    for mode in dict.fromkeys(e["mode"] for e in errors):
        for key, name in (("error_points", "as profiled"), ("calibrated_error_points", "calibrated"),
                          ("fitted_error_points", "fitted to served steps"),
                          ("replayed_error_points", "on each point's own served steps")):
            values = [abs(e[key]) for e in errors if e["mode"] == mode and e[key] is not None]
            if values:
                within = sum(v <= 2.0 for v in values)
                console.print(f"{mode}: simulator ({name}) vs measured attainment: mean |error| "
                              f"{sum(values) / len(values):.1f} points, worst {max(values):.1f} points over "
                              f"{len(values)} rates, {within} within 2 points")
    if errors:
        noise = [e["measured_se_points"] for e in errors]
        console.print(f"measured attainment's own standard error (binomial, one run): mean {sum(noise) / len(noise):.1f} "
                      f"points, up to {max(noise):.1f}")
    for t in transfer_shares(results):
        console.print(f"{t['workload']} {t['mode']}: KV transfer {_ms(t['transfer_s'])} ms = {100 * t['share']:.2f}% "
                      f"of end-to-end at {t['rate']:.3g} req/s" + ("" if t["at_goodput"] else " (no goodput point)"))
