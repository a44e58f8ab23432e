"""Discrete-event simulation of a disaggregated deployment: every request's TTFT and TPOT.

Requests go to the prefill instance with the fewest pending prompt tokens to compute (a prompt's tokens found in
the prefix cache, `cached`, are not); at the first token the KV cache moves (prompt tokens × KV bytes per token
over NVLink when both instances share their nodes, else over the inter-node link, stages in parallel; only the
uncached tokens where the decode instance holds the prefix) to the decode instance with the fewest reserved KV
tokens, which holds the whole context.
TTFT = prefill end − arrival; TPOT = (finish − first token) / (output − 1), 0 for single-token outputs.
With `serving` (the overheads of a served stack, `serving.py`) the hops are added where they fall.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from services.common.slo import SLO
from services.common.step_model.latency import LatencyModel, TPCoefficients
from services.common.step_model.shape import ModelShape
from services.planner.instances import INF, DecodeInstance, PrefillInstance
from services.planner.placement import Cluster, Instance, Placement
from services.planner.serving import ServingOverheads


@dataclass(slots=True)
class SimResult:
    ttft: np.ndarray
    tpot: np.ndarray

    def attainment(self, slo: SLO) -> float:
        """Share of requests meeting both TTFT and TPOT."""
        return float(np.mean((self.ttft <= slo.ttft) & (self.tpot <= slo.tpot)))

    def summary(self, slo: SLO) -> dict:
        """Attainment, and mean / p50 / p90 / p99 of TTFT and TPOT in seconds."""
        out: dict = {"attainment": self.attainment(slo)}
        for key, values in (("ttft", self.ttft), ("tpot", self.tpot)):
            p50, p90, p99 = np.percentile(values, [50, 90, 99])
            out[key] = {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}
        return out


def simulate_prefill(coeffs: TPCoefficients, pp: int, max_batch_tokens: int, prompts: np.ndarray,
                     arrivals: np.ndarray, cached: np.ndarray | None = None,
                     shape: ModelShape | None = None) -> np.ndarray:
    """TTFT of each request on one prefill instance (`cached`: its prompt tokens found in the prefix cache;
    `shape`: the model's, whose sliding layers attend to their window only)."""
    prompt, done = prompts.tolist(), [0.0] * len(prompts)
    inst = PrefillInstance(coeffs, pp, max_batch_tokens, prompt, done, None if cached is None else cached.tolist(),
                           shape)
    for rid, t in enumerate(arrivals.tolist()):
        inst.advance(t)
        inst.enqueue(rid, t)
    inst.advance(INF)
    return np.array(done) - arrivals


def simulate_decode(coeffs: TPCoefficients, pp: int, capacity: int, prompts: np.ndarray, outputs: np.ndarray,
                    arrivals: np.ndarray, tpot_slo: float = INF, max_misses: int | None = None,
                    shape: ModelShape | None = None) -> np.ndarray:
    """TPOT of each request on one decode instance, counted from its arrival there. With `max_misses`, the run
    stops once more requests than that missed `tpot_slo`; the unfinished ones get an infinite TPOT. `shape`: the
    model's, for the K/V a request holds and what its sliding layers attend to (`DecodeInstance`)."""
    n = len(prompts)
    start, finish = [0.0] * n, [INF] * n
    output, arrival = outputs.tolist(), arrivals.tolist()
    misses = [0]

    def count(rid: int, end: float) -> None:
        if end - arrival[rid] > tpot_slo * (output[rid] - 1):
            misses[0] += 1

    inst = DecodeInstance(coeffs, pp, capacity, prompts.tolist(), output, start, finish,
                          count if max_misses is not None else None, shape=shape)
    for rid, t in enumerate(arrival):
        inst.advance(t)
        if max_misses is not None and misses[0] > max_misses:
            break
        inst.enqueue(rid, t)
    else:
        inst.advance(INF)
    return per_output_token(np.array(finish) - arrivals, outputs)


def per_output_token(decode_time: np.ndarray, outputs: np.ndarray) -> np.ndarray:
    """TPOT: the time after the first token over the tokens after it (0 for single-token outputs)."""
    return np.where(outputs > 1, decode_time / np.maximum(outputs - 1, 1), 0.0)


def at_client(arrivals: np.ndarray, first: list[float], finish: list[float], outputs: np.ndarray,
              hop: ServingOverheads) -> SimResult:
    """TTFT and TPOT as the client sees them, from when each request's first and last tokens were computed."""
    first_token = np.array(first) + hop.first_token
    return SimResult(ttft=first_token - arrivals, tpot=per_output_token(np.array(finish) + hop.token - first_token, outputs))


def transfer_seconds(tokens: int, kv_bytes_per_token: int, src: Instance, dst: Instance, cluster: Cluster) -> float:
    """KV of `tokens` tokens from a prefill to a decode instance; stage pairs move their layers in parallel."""
    gbps = cluster.intra_node_gbps if src.nodes == dst.nodes else cluster.inter_node_gbps
    parallel = min(len(src.stages), len(dst.stages))
    return tokens * kv_bytes_per_token * 8 / (gbps * 1e9 * parallel)


def simulate(model: LatencyModel, placement: Placement, cluster: Cluster, prompts: np.ndarray,
             outputs: np.ndarray, arrivals: np.ndarray, max_batch_tokens: int | None = None,
             serving: ServingOverheads | None = None, *, cached: np.ndarray | None = None,
             decode_holds_prefix: bool = False) -> SimResult:
    """Run the whole placement on one request sequence (arrivals ascending); `cached`: each prompt's tokens found
    in the prefix cache; `decode_holds_prefix`: the decode instance holds them too, so only the rest moves."""
    hop = serving or ServingOverheads()
    n = len(prompts)
    prompt, output = prompts.tolist(), outputs.tolist()
    hit = [0] * n if cached is None else cached.tolist()
    moved = [p - c for p, c in zip(prompt, hit)] if decode_holds_prefix else prompt
    pre, dec = placement.prefill, placement.decode
    p_coeffs = model.at(pre.tp, pre.pp, pre.ep, cluster.fabric, pre.threads)
    d_coeffs = model.at(dec.tp, dec.pp, dec.ep, cluster.fabric, dec.threads)
    lm = max_batch_tokens or p_coeffs.saturation_tokens()
    capacity = model.kv_capacity(dec.tp, dec.pp, dec.ep, dec.threads)
    first, start, finish, owner = [0.0] * n, [0.0] * n, [0.0] * n, [0] * n

    prefills = [PrefillInstance(p_coeffs, placement.prefill.pp, lm, prompt, first, hit, model.shape)
                for _ in range(placement.n_prefill)]
    for rid, t in enumerate((arrivals + hop.to_prefill).tolist()):
        for inst in prefills:
            inst.advance(t)
        owner[rid] = min(range(len(prefills)), key=lambda i: (prefills[i].load(t), i))
        prefills[owner[rid]].enqueue(rid, t)
    for inst in prefills:
        inst.advance(INF)

    decodes = [DecodeInstance(d_coeffs, placement.decode.pp, capacity, prompt, output, start, finish, join_s=hop.join,
                              shape=model.shape)
               for _ in range(placement.n_decode)]
    p_inst, d_inst = placement.of_role("prefill"), placement.of_role("decode")
    kv_bytes = model.shape.kv_bytes_per_token()
    in_flight = [0] * len(decodes)  # KV tokens on their way to each decode instance
    events = [(first[rid] + hop.to_decode, 0, rid, -1) for rid in range(n)]  # (time, 0 dispatch / 1 arrival, rid, target)
    heapq.heapify(events)
    while events:
        t, kind, rid, target = heapq.heappop(events)
        for inst in decodes:
            inst.advance(t)
        if kind == 0:
            target = min(range(len(decodes)), key=lambda d: (decodes[d].load(t) + in_flight[d], d))
            in_flight[target] += decodes[target].need(rid)
            delay = transfer_seconds(model.shape.kv_tokens(moved[rid]), kv_bytes, p_inst[owner[rid]], d_inst[target],
                                     cluster)
            delay += hop.reserve + hop.admit
            heapq.heappush(events, (t + delay, 1, rid, target))
        else:
            in_flight[target] -= decodes[target].need(rid)
            decodes[target].enqueue(rid, t)
    for inst in decodes:
        inst.advance(INF)

    return at_client(arrivals, first, finish, outputs, hop)
