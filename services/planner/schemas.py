"""REST bodies of the planner API (pydantic at the boundary); internal records stay dataclasses."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClusterBody(_Body):
    nodes: int = Field(1, ge=1, le=1024, description="number of nodes")
    gpus_per_node: int = Field(4, ge=1, le=64, description="GPUs per node")
    gpu_memory_gb: float = Field(80.0, gt=0, description="memory of one GPU, GB (used where no KV table is shipped)")
    intra_node_gbps: float = Field(2400.0, gt=0, description="GPU-to-GPU bandwidth inside a node, gigabits/s")
    inter_node_gbps: float = Field(200.0, gt=0, description="bandwidth between nodes, gigabits/s")


class PrefixHitsBody(_Body):
    """The share of each prompt found in the prefix cache, by prompt length (GET /v1/workload gives the recorded
    one in this form)."""

    edges: list[int] = Field([], max_length=64, description="ascending prompt lengths bounding the bins: bin i "
                             "holds prompts of length in (edges[i-1], edges[i]]; one bin more than edges")
    quantiles: list[list[float]] = Field(
        min_length=1, max_length=65, description="per bin, the cached fraction of the prompt at probabilities "
                                                 "spread evenly over [0, 1] (non-decreasing, each in [0, 1]); one "
                                                 "value: that fraction for every prompt of the bin")

    @model_validator(mode="after")
    def _shape(self) -> PrefixHitsBody:
        if any(b <= a for a, b in zip(self.edges, self.edges[1:])) or any(e < 1 for e in self.edges):
            raise ValueError("prefix_hits.edges: positive and strictly ascending")
        if len(self.quantiles) != len(self.edges) + 1:
            raise ValueError("prefix_hits.quantiles: one list per bin, len(edges) + 1")
        for q in self.quantiles:
            if not 1 <= len(q) <= 101 or any(not 0 <= f <= 1 for f in q) or any(b < a for a, b in zip(q, q[1:])):
                raise ValueError("prefix_hits.quantiles: 1 to 101 non-decreasing fractions in [0, 1] per bin")
        return self


class WorkloadBody(_Body):
    name: Literal["chatbot", "code", "summarization"] | None = Field(
        None, description="synthetic workload: chatbot (ShareGPT-like), code (HumanEval-like), summarization "
                          "(LongBench-like)")
    input_len: int | None = Field(None, ge=1, description="fixed prompt length (with output_len)")
    output_len: int | None = Field(None, ge=1, description="fixed output length (with input_len)")
    lengths: list[tuple[int, int]] | None = Field(None, min_length=1, description="recorded (prompt, output) pairs")
    arrival_cv: float = Field(1.0, gt=0, le=10, description="CV of inter-arrival gaps: 1 Poisson, else gamma")
    prefix_hits: PrefixHitsBody | None = Field(
        None, description="prompt tokens found in the prefix cache, which prefill does not compute; none: no hits")

    @model_validator(mode="after")
    def _one_form(self) -> WorkloadBody:
        forms = [self.name is not None, self.input_len is not None or self.output_len is not None,
                 self.lengths is not None]
        if sum(forms) != 1:
            raise ValueError("workload: give exactly one of name, input_len + output_len, lengths")
        if forms[1] and (self.input_len is None or self.output_len is None):
            raise ValueError("workload: input_len and output_len go together")
        if self.lengths is not None and any(p < 1 or o < 1 for p, o in self.lengths):
            raise ValueError("workload.lengths: every prompt and output length must be ≥ 1")
        return self


class SLOBody(_Body):
    ttft: float = Field(0.2, gt=0, description="time-to-first-token objective, s")
    tpot: float = Field(0.1, gt=0, description="time-per-output-token objective, s")
    attainment: float = Field(0.9, gt=0, le=1, description="share of requests that must meet both")


class _Common(_Body):
    model: str = Field(description="a preset name (opt-13b, opt-66b, opt-175b, ...) or a model folder")
    hardware: str = Field("a100-80gb", description="a shipped coefficient set (a100-80gb), a profile file, or "
                          "several (comma-separated or a folder: TP/PP layouts, CPU instances of several cores)")
    cluster: ClusterBody = Field(default_factory=ClusterBody)
    slo: SLOBody = Field(default_factory=SLOBody)
    num_requests: int = Field(2000, ge=50, le=20000, description="requests per simulation (at least)")
    seed: int = Field(0, ge=0, description="seed of the request sample")
    launchable: bool = Field(False, description="only layouts distserve's engine launches: a mixture-of-experts "
                                                "model's experts within each instance's TP ranks (ep dividing tp; "
                                                "there is no DP attention). Replanning with an actuator sets it")


class PlanRequest(_Common):
    workload: WorkloadBody = Field(description="request lengths and arrival burstiness")
    algorithm: Literal["high-affinity", "low-affinity"] = Field(
        "high-affinity", description="Alg. 1 (fast cross-node links) or Alg. 2 (prefill and decode share nodes)")
    rate: float | None = Field(None, gt=0, description="request rate to serve, req/s; none: best goodput per GPU")


class ReplanRequest(_Common):
    algorithm: Literal["high-affinity", "low-affinity"] = "high-affinity"
    rate: float | None = Field(None, gt=0, description="rate to serve; none: the recorded rate")
    max_records: int = Field(2000, ge=10, le=100000, description="most recent request records to fit")


class PhaseBody(_Body):
    tp: int = Field(1, ge=1, le=64, description="tensor-parallel degree")
    pp: int = Field(1, ge=1, le=128, description="pipeline-parallel degree")
    ep: int = Field(1, ge=1, le=1024, description="expert-parallel degree: 1 (experts sliced over tp), a divisor of "
                                                  "tp (expert groups of tp / ep GPUs, each expert sliced over its "
                                                  "group), or a multiple of tp: each stage's GPUs, holding the "
                                                  "routed experts whole")
    threads: int = Field(1, ge=1, le=256, description="CPU cores per rank, each running an intra-op thread (a "
                                                     "profiled count: the hardware's profile files)")
    replicas: int = Field(1, ge=1, le=1024, description="number of instances")


class PlacementBody(_Body):
    prefill: PhaseBody
    decode: PhaseBody


class SimulateRequest(_Common):
    placement: PlacementBody
    workload: WorkloadBody
    rate: float = Field(gt=0, description="request rate, req/s")
    num_requests: int = Field(1000, ge=1, le=200000, description="requests to simulate")
