"""How an instance's ranks map onto Kubernetes pods, and which pods must share a node (the plan's nodes, Alg. 2's rule).

A pod holds one node's share of an instance: a container per rank, each with its own GPU. An instance on one
node is one pod (a Deployment); one that spans nodes is a LeaderWorkerSet of one pod per node when every node
holds the same number of its ranks, else of one pod per pipeline stage (high node-affinity placements, Alg. 1,
where a stage may go anywhere).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.planner.actuation import InstanceSpec


@dataclass(frozen=True, slots=True)
class PodLayout:
    """An instance's pods: `pods` pods of `ranks` ranks each, pod k holding ranks k·ranks ... (k+1)·ranks - 1."""

    pods: int
    ranks: int
    per_node: bool  # one pod per node (the pods must land on distinct nodes), else one per stage

    @property
    def spans_nodes(self) -> bool:
        return self.pods > 1


def shares(spec: InstanceSpec) -> list[tuple[int, int]]:
    """(node, ranks) of each run of consecutive stages on one node, in rank order."""
    out: list[tuple[int, int]] = []
    for stage in spec.stages:
        if out and out[-1][0] == stage.node:
            out[-1] = (stage.node, out[-1][1] + len(stage.gpus))
        else:
            out.append((stage.node, len(stage.gpus)))
    return out


def pod_layout(spec: InstanceSpec) -> PodLayout:
    runs = shares(spec)
    nodes = [node for node, _ in runs]
    if len(runs) == 1:
        return PodLayout(1, spec.tp * spec.pp, per_node=True)
    if len(set(nodes)) == len(nodes) and len({ranks for _, ranks in runs}) == 1:
        return PodLayout(len(runs), runs[0][1], per_node=True)
    return PodLayout(spec.pp, spec.tp, per_node=False)


def node_group(spec: InstanceSpec) -> str | None:
    """The plan's nodes of the instance's pods, "0.1" for pods on nodes 0 and 1 (None: one pod per stage, which
    may go anywhere). Pods whose groups are equal and that hold the same share are placed on one node, as the plan
    places them: the prefill and decode segments of a stage, under Alg. 2."""
    return ".".join(str(node) for node, _ in shares(spec)) if pod_layout(spec).per_node else None
