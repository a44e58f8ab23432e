"""The image installs distserve with the README's install script (a CUDA torch, the `gpu` extra), runs as a
non-root user, and its build context holds what that script needs."""

from __future__ import annotations

import fnmatch
import re
import shlex

from tests.unit.deploy.deploy_cases import ROOT

DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_image_installs_with_the_readme_install_script() -> None:
    runs = [args for op, args in instructions() if op == "RUN"]
    (install,) = [args for args in runs if "scripts/install.sh" in args]
    words = shlex.split(install)
    env = dict(w.split("=", 1) for w in words[:words.index("bash")])
    assert env["TORCH_SPEC"] == "torch" and "gpu" in env["EXTRAS"].split(",")
    assert not any("pip" in args for args in runs if args != install), "install steps outside scripts/install.sh"
    script = (ROOT / "scripts" / "install.sh").read_text()
    assert all(f"${{{name}" in script for name in env), "the script no longer reads what the Dockerfile sets"
    assert "scripts/install.sh" in (ROOT / "README.md").read_text()
    assert "scripts/install.sh" in (ROOT / "deploy" / "README.md").read_text()


def test_the_image_is_cuda_based_and_runs_as_a_non_root_user() -> None:
    ops = instructions()
    assert next(args for op, args in ops if op == "FROM").startswith("nvidia/cuda:")
    user = [args for op, args in ops if op == "USER"][-1]
    assert user not in ("root", "0")


def test_the_build_context_keeps_what_the_install_needs() -> None:
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip() and p[0] != "#"]
    needed = ["pyproject.toml", "README.md", "scripts/install.sh", "services/cli.py", "distserve/v1/router_pb2.py"]
    for path in needed:
        parts = path.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        hit = [p for p in patterns for prefix in prefixes if fnmatch.fnmatch(prefix, p.removeprefix("**/"))]
        assert not hit, f".dockerignore {hit} drops {path}"
