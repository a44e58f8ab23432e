"""A digest of the engine's code and torch version: what a recorded latency profile is only valid for."""

from __future__ import annotations

import functools
import hashlib
from importlib.metadata import version
from pathlib import Path

ENGINE_DIR = Path(__file__).parent


@functools.cache
def engine_fingerprint() -> str:
    digest = hashlib.sha256(version("torch").encode())  # the distribution's: no torch import
    for path in sorted(p for p in ENGINE_DIR.rglob("*") if p.suffix in (".py", ".c")):
        digest.update(path.relative_to(ENGINE_DIR).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
