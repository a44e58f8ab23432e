"""Applying a placement: keep what matches, start before stopping, never double-book a GPU."""

from services.planner.actuation import (
    InstanceSpec,
    RunningInstance,
    apply_placement,
    specs_of,
)
from services.planner.placement import Cluster, Parallel, pack


class Launcher:
    """A deployment in memory: what a real launcher would start and stop, in order."""

    def __init__(self) -> None:
        self.instances: dict[str, InstanceSpec] = {}
        self.log: list[tuple[str, str]] = []

    def running(self) -> list[RunningInstance]:
        return [RunningInstance(i, spec) for i, spec in self.instances.items()]

    def start(self, spec: InstanceSpec) -> str:
        busy = {(s.node, g) for other in self.instances.values() for s in other.stages for g in s.gpus}
        assert not busy & {(s.node, g) for s in spec.stages for g in s.gpus}, "GPU already in use"
        name = f"{spec.role}-{len(self.log)}"
        self.instances[name] = spec
        self.log.append(("start", name))
        return name

    def drain(self, instance_id: str) -> None:
        self.log.append(("drain", instance_id))

    def stop(self, instance_id: str) -> None:
        del self.instances[instance_id]
        self.log.append(("stop", instance_id))


def test_first_apply_starts_every_instance():
    launcher, cluster = Launcher(), Cluster(1, 4)
    placement = pack(cluster, Parallel(2, 1), 1, Parallel(1, 1), 2)
    done = apply_placement(launcher, placement)
    assert len(done.started) == 3 and not done.stopped
    assert sorted(launcher.instances.values(), key=repr) == sorted(specs_of(placement), key=repr)


def test_scaling_out_keeps_running_instances_and_scaling_in_drains_before_stopping():
    launcher, cluster = Launcher(), Cluster(1, 8)
    apply_placement(launcher, pack(cluster, Parallel(2, 1), 1, Parallel(1, 1), 1))
    grown = apply_placement(launcher, pack(cluster, Parallel(2, 1), 2, Parallel(1, 1), 2))
    assert len(grown.kept) == 2 and len(grown.started) == 2 and not grown.stopped
    shrunk = apply_placement(launcher, pack(cluster, Parallel(2, 1), 1, Parallel(1, 1), 1))
    assert len(shrunk.kept) == 2 and len(shrunk.stopped) == 2
    for name in shrunk.stopped:
        assert launcher.log.index(("drain", name)) < launcher.log.index(("stop", name))


def test_moving_to_gpus_a_surplus_instance_holds_waits_for_it_to_stop():
    launcher, cluster = Launcher(), Cluster(1, 4)
    apply_placement(launcher, pack(cluster, Parallel(1, 1), 3, Parallel(1, 1), 1))
    done = apply_placement(launcher, pack(cluster, Parallel(2, 1), 1, Parallel(2, 1), 1))  # reuses GPUs 0-3
    assert len(done.started) == 2 and len(done.stopped) + len(done.kept) == 4
    assert len(launcher.instances) == 2


def test_an_instance_of_two_core_ranks_is_kept_only_by_one_of_the_same_cores_per_rank():
    launcher, cluster = Launcher(), Cluster(1, 4)
    apply_placement(launcher, pack(cluster, Parallel(2, 1), 1, Parallel(1, 1, threads=2), 1))
    decode = next(spec for spec in launcher.instances.values() if spec.role == "decode")
    assert (decode.tp, decode.threads, [s.gpus for s in decode.stages]) == (1, 2, [(2, 3)])
    done = apply_placement(launcher, pack(cluster, Parallel(2, 1), 1, Parallel(2, 1), 1))  # TP 2 in its place
    assert len(done.kept) == 1 and len(done.started) == 1 and len(done.stopped) == 1
    assert {(s.role, s.tp, s.threads) for s in launcher.instances.values()} == {("prefill", 2, 1), ("decode", 2, 1)}
