"""CPU hosts never load cupy: the GPU path is imported only for pools registered on a cuda device."""

import subprocess
import sys


def test_kvxfer_modules_do_not_import_cupy() -> None:
    code = ("import sys, services.kvxfer.app, services.kvxfer.client, services.kvxfer.lease_keeper, "
            "services.bench.xfer; assert 'cupy' not in sys.modules, 'cupy imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
