"""Compiles a C kernel for this host on first use, cached by source, compiler flags and CPU."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CACHE_DIR = Path(os.environ.get("DISTSERVE_KERNEL_CACHE", Path.home() / ".cache" / "distserve" / "kernels"))
Kernel = Callable[..., Any]  # a compiled C function, its argtypes and restype set (ctypes converts the arguments)

FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-shared", "-fPIC")  # simd: vectorised reductions (`#pragma omp simd`)


def _cpu_signature() -> str:
    """The host's CPU flags (what -march=native compiles for), so a shared cache never serves another CPU's build."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.cache
def kernel_function(name: str, symbol: str, argtypes: tuple, restype: object,
                    folder: Path, flags: tuple[str, ...] = ()) -> Kernel | None:
    """`symbol` of the compiled `folder/name.c`, typed; None where load_kernel gives none (its caller then falls back
    to Python or torch)."""
    lib = load_kernel(name, folder, flags)
    if lib is None:
        return None
    fn = getattr(lib, symbol)
    fn.argtypes, fn.restype = list(argtypes), restype
    return fn


def why_not_buildable() -> str | None:
    """Why C kernels cannot be built on this host (kernels switched off, no C compiler), or None where they must
    build: a kernel that then loads as None failed to compile."""
    if os.environ.get("DISTSERVE_CPU_KERNELS", "1") == "0":
        return "C kernels are off (DISTSERVE_CPU_KERNELS=0)"
    return None if _compiler() else "no C compiler on this host (CC, cc, gcc)"


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def load_kernel(name: str, folder: Path, flags: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    """The compiled `folder/name.c` (`flags`: extra compiler and linker flags), or None where C kernels are off
    (`DISTSERVE_CPU_KERNELS=0`), no C compiler exists or the build failed (logged)."""
    if os.environ.get("DISTSERVE_CPU_KERNELS", "1") == "0":
        return None
    source = folder / f"{name}.c"
    compiler = _compiler()
    if compiler is None:
        log.warning("no C compiler: %s is not used", name)
        return None
    headers = [h.read_text() for h in sorted(folder.glob("*.h"))]  # what the source may include
    parts = [source.read_text(), *headers, compiler, *FLAGS, *flags, _cpu_signature()]
    key = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    target = CACHE_DIR / f"{name}-{key}.so"
    if not target.exists():
        try:
            _compile(compiler, source, target, flags)
        except (OSError, subprocess.SubprocessError) as exc:
            stderr = getattr(exc, "stderr", b"") or b""
            log.warning("building %s failed (%s %s): it is not used", name, exc, stderr.decode()[-500:])
            return None
    return ctypes.CDLL(str(target))


def _compile(compiler: str, source: Path, target: Path, flags: tuple[str, ...]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so", delete=False) as tmp:
        partial = Path(tmp.name)
    try:
        subprocess.run([compiler, *FLAGS, str(source), "-o", str(partial), *flags], check=True, capture_output=True,
                       timeout=120)
        os.replace(partial, target)  # atomic: processes building at once each install a complete file
    finally:
        partial.unlink(missing_ok=True)
