"""The committed stubs in distserve/v1 are exactly what scripts/gen_protos.py makes from protos/."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_stubs_are_fresh(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts/gen_protos.py"), str(tmp_path)], check=True)
    fresh = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    committed = {p.relative_to(ROOT): p.read_bytes() for p in (ROOT / "distserve").rglob("*_pb2*")}
    assert fresh.keys() == committed.keys(), "stubs missing or extra: run scripts/gen_protos.py"
    stale = [str(name) for name, data in fresh.items() if committed[name] != data]
    assert not stale, f"stale stubs {stale}: run scripts/gen_protos.py"
