"""Fetch into .whl/ the wheels the GPU machine's image lacks, for its Python 3.12 and CUDA 13, before
`scripts/gpu_check.sh` runs there (that machine reaches no package index).

Run here: `python3 scripts/gpu_wheels.py`; then the device tool's run with carry [".whl"] and the command
`bash scripts/gpu_check.sh`. What travels with a run is capped at 64 MiB, so UCX's wheel is slimmed to what
kvxfer loads: its static archives, perftest libraries and tools are dropped (42 MB -> 18 MB), the headers kept
(ucp_iov.c is compiled against them there).
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".whl"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")
# The image has torch (cu130), cupy-cuda13x, numpy, pytest, pytest-timeout, rich, prometheus-client, cuda-core
# and nvidia-ml-py. The UCX stack is the CUDA 13 build of what CI installs; the rest is what CI installs.
PINS = ("ucxx-cu13==0.52.0", "libucxx-cu13==0.52.0", "libucx-cu13==1.21.0", "librmm-cu13==26.10.0",
        "rapids-logger==0.3.0", "grpcio==1.85.3", "grpcio-health-checking==1.85.1", "grpcio-reflection==1.85.1",
        "protobuf==7.36.2", "pydantic==2.13.4", "pydantic-core==2.46.4", "pydantic-settings==2.14.1",
        "python-dotenv==1.2.2", "annotated-types==0.7.0", "typing-inspection==0.4.2", "pytest-asyncio==1.5.0")
NOT_LOADED = re.compile(r"\.a$|/bin/|perftest")


def slim(wheel: Path) -> None:
    """Rewrite the wheel without the members kvxfer never loads (and their RECORD lines)."""
    slimmed = wheel.with_suffix(".slim")
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(slimmed, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            if NOT_LOADED.search(item.filename):
                continue
            data = zin.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines()
                data = "\n".join(x for x in lines if not NOT_LOADED.search(x.split(",")[0])).encode() + b"\n"
            zout.writestr(item, data)
    slimmed.replace(wheel)


def main() -> int:
    WHEELS.mkdir(exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(WHEELS), *PINS],
                   check=True)
    for wheel in WHEELS.glob("libucx_cu13-*.whl"):
        slim(wheel)
    total = sum(w.stat().st_size for w in WHEELS.glob("*.whl"))
    print(f"{len(list(WHEELS.glob('*.whl')))} wheels, {total / 2**20:.1f} MiB in {WHEELS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
