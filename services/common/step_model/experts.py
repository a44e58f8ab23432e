"""The routed experts of a mixture-of-experts model in the latency model: how many experts a batch activates,
what reading and computing them costs, and the all-to-all of expert parallelism (EP).

A batch of B tokens, each routed to k of E experts, activates E·(1 − (1 − k/E)^B) distinct experts per sparse
layer on average under uniform routing; a step reads each active expert's weights once, so a decode step's time
grows with B until every expert is active. The experts of a layer are split over the `width` GPUs of a pipeline
stage in `groups` expert groups of width/groups GPUs: each group holds E/groups experts, each of its GPUs a slice
of every one's width (1 group: every GPU a slice of every expert, TP's layout; `width` groups: whole experts, EP).
Per GPU the experts' part of a step is the larger of reading its share of the active experts and computing its
share of the tokens (a roofline: the two overlap), plus a fixed cost per expert product it runs: a GPU runs one
for each active expert of its group, so with fewer groups it reads the same bytes in more, smaller products.
Routing is not uniform: the busiest group carries more than the mean, `imbalance` times it with whole experts,
none over one group, linearly between (an assumption; its read capped by the experts it holds). With whole
experts (groups = width > 1) every sparse layer adds an all-to-all (dispatch and combine: each token's hidden
state to its k experts and back, (width − 1)/width of it to other GPUs) at the stage's link bandwidth plus a
fixed latency each; with fewer groups inside a TP instance the tokens are on every GPU already and the partial
outputs end in the all-reduce TP has anyway, which the TP fit holds.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_TO_ALL_LATENCY_S = 20e-6  # fixed cost of one dispatch or combine (an assumption of the order of NVLink's)
EXPERT_PRODUCT_S = 10e-6  # fixed cost of one expert's products in one layer (an assumption: some three launches)


def active_experts(experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts `tokens` tokens activate in one layer, each routed uniformly to `top_k` of them."""
    return experts * (1 - (1 - top_k / experts) ** tokens) if tokens > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Fabric:
    """The links an expert-parallel stage's all-to-all crosses (a cluster's, `services/planner/placement.Cluster`)."""

    gpus_per_node: int = 8
    intra_node_gbps: float = 2400.0
    inter_node_gbps: float = 200.0

    def seconds_per_byte(self, width: int) -> float:
        """Seconds per byte a GPU sends spread evenly over `width` GPUs (itself included, which costs nothing):
        the share to its node's other GPUs over NVLink, the rest over the inter-node link."""
        local = min(width, self.gpus_per_node)
        return 8e-9 * ((local - 1) / width / self.intra_node_gbps + (width - local) / width / self.inter_node_gbps)


ONE_NODE = Fabric()  # the default: a stage within one node of eight GPUs


@dataclass(frozen=True, slots=True)
class ExpertCost:
    """A model's routed experts on one kind of device: one GPU's seconds for the whole model's sparse layers."""

    experts: int  # E, routed experts per sparse layer
    top_k: int  # k, experts per token
    layers: int  # sparse layers
    read_s: float  # reading one expert's weights in every sparse layer
    token_s: float  # computing one token through one expert in every sparse layer
    token_bytes: int  # one token's hidden state as the all-to-all sends it
    imbalance: float = 1.0  # with whole experts, the busiest GPU's tokens over the mean (1: uniform routing)
    product_s: float = 0.0  # fixed cost of one expert's products in one sparse layer


@dataclass(frozen=True, slots=True)
class ExpertSpread:
    """The routed experts of one instance layout: split over `width` GPUs per stage in `groups` expert groups."""

    cost: ExpertCost
    width: int
    groups: int  # 1: every expert sliced over the width; width: whole experts (EP)
    link_s_per_byte: float = 0.0  # the all-to-all's (whole experts only)

    @property
    def skew(self) -> float:
        """The busiest group's tokens over the mean."""
        return 1.0 + (self.cost.imbalance - 1.0) * (self.groups - 1) / (self.width - 1) if self.width > 1 else 1.0

    def seconds(self, tokens: float) -> float:
        """The experts' part of a step computing `tokens` tokens (the whole model, all stages)."""
        c, skew = self.cost, self.skew
        active = min(c.experts, skew * active_experts(c.experts, c.top_k, tokens))
        read = active * c.read_s / self.width
        compute = skew * tokens * c.top_k * c.token_s / self.width
        step = max(read, compute) + c.layers * active / self.groups * c.product_s
        if self.groups == self.width > 1 and tokens > 0:
            sent = tokens / self.width * c.top_k * c.token_bytes  # per GPU, per sparse layer, each way
            step += 2 * c.layers * (sent * self.link_s_per_byte + ALL_TO_ALL_LATENCY_S)
        return step
