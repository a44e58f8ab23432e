"""How long a local tiny-llama stack takes to start (and stop) when the launcher's readiness waits dial with
gRPC's default reconnect backoff, against POLL_OPTIONS (launcher/health.py); runs alternate, on a private Redis.

    python3 -m benchmarks.startup_waits [--mode disagg] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from services.common.redis_server import EmbeddedRedis
from services.engine.make_model import make_model
from services.launcher import health
from tests.e2e.helpers import running_stack


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", default="disagg", choices=("disagg", "colocated", "chunked"))
    parser.add_argument("--runs", type=int, default=3, help="stack starts per setting")
    args = parser.parse_args()
    model = str(make_model("tiny-llama", Path(tempfile.mkdtemp())))
    redis = EmbeddedRedis().start()
    settings = {"grpc default backoff": (), "POLL_OPTIONS": health.POLL_OPTIONS}
    starts: dict[str, list[float]] = {name: [] for name in settings}
    try:
        for _ in range(args.runs):
            for name, options in settings.items():
                health.POLL_OPTIONS = options
                began = time.monotonic()
                with running_stack(model, redis.url, mode=args.mode):
                    up = time.monotonic()
                starts[name].append(up - began)
                print(f"{name:21s} start {up - began:6.2f} s  stop {time.monotonic() - up:5.2f} s", flush=True)
    finally:
        redis.stop()
    for name, values in starts.items():
        print(f"{name:21s} median start {statistics.median(values):6.2f} s over {len(values)} runs")


if __name__ == "__main__":
    main()
