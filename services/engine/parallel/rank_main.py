"""Entry point of a rank process (1..N-1): build its part, report ready, then run the plans rank 0 broadcasts."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from dataclasses import replace

import torch.distributed as dist

from services.common.model_config import ModelConfig
from services.engine.device import keep_freed_memory, setup_device
from services.engine.parallel.comm import TIMEOUT, connect, make_groups
from services.engine.parallel.plan import StepPlan
from services.engine.parallel.procs import ipc_key, kvxfer_key, ready_key, spec_key
from services.engine.parallel.rank import RankRunner, RankSpec
from services.engine.parallel.shard import shard_for

log = logging.getLogger(__name__)


def _exit_with_parent(parent: int) -> None:
    """Exits this process when the instance's process is gone (no orphan rank, whatever killed it)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _unpin() -> None:
    """Leaves the core the instance's process is pinned to (inherited), so that `cpu:N` can pin this rank to N."""
    try:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))  # the kernel keeps what the cpuset allows
    except OSError:
        pass


def serve_rank(spec: RankSpec, store: dist.Store) -> int:
    """Builds the rank's part, reports ready, then runs the plans rank 0 broadcasts until it says stop."""
    _unpin()
    device = setup_device(spec.device)
    if device.type == "cpu":
        keep_freed_memory()
    config = ModelConfig.from_folder(spec.model_dir)
    shard = shard_for(config, spec.tp, spec.pp, spec.rank, spec.ep)
    groups = make_groups(spec.rank, spec.tp, spec.pp)
    runner = RankRunner(spec, config, shard, groups, device)
    try:
        if (ipc := runner.pool.site.cuda_ipc) is not None:  # rank 0 registers this GPU pool with kvxfer by it
            store.set(ipc_key(spec.rank), ipc.to_json())
        store.set(ready_key(spec.rank), "1")
        connect(groups, store, device)
        while isinstance(plan := groups.world.broadcast_object(), StepPlan):  # None: stop
            runner.run(plan)
    finally:
        runner.close()
    return 0


def main(arg: str) -> int:
    """A rank the instance's process started (its spec in `arg`, JSON); it exits with that process."""
    args = json.loads(arg)
    spec = RankSpec(**args["spec"])
    _exit_with_parent(args["parent"])
    store = dist.TCPStore(args["host"], args["port"], spec.tp * spec.pp, is_master=False, timeout=TIMEOUT)
    return serve_rank(spec, store)


def join(rendezvous: str, rank: int, device: str, model_dir: str = "", kvxfer: str = "") -> int:
    """A rank started on its own (`distserve rank`: a compose service): its spec comes from rank 0 at `rendezvous`,
    its device (and model folder, where given) as this host sees them; `kvxfer`: this host's, where it is not
    rank 0's (rank 0 then registers this rank's pool there, and leases its blocks there)."""
    host, _, port = rendezvous.rpartition(":")
    store = dist.TCPStore(host, int(port), None, is_master=False, timeout=TIMEOUT)
    spec = RankSpec(**json.loads(store.get(spec_key(rank))))
    if kvxfer:
        store.set(kvxfer_key(rank), kvxfer)  # before serve_rank says ready: rank 0 reads it once all are
    return serve_rank(replace(spec, device=device, model_dir=model_dir or spec.model_dir), store)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rank %(process)d %(levelname)s %(message)s")
    sys.exit(main(sys.argv[1]))
