"""The instance roles (prefill, decode, colocated) reach the engine through AsyncEngine only: no `engine.engine`
reach-through to the LLMEngine behind it (their imports are held to the interface by an import contract)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROLES = ("prefill", "decode", "colocated")


def reach_throughs(source: str) -> list[int]:
    """Lines of `<x>.engine.engine` or `engine.engine` attribute chains."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Attribute)
            and node.attr == "engine" and (isinstance(node.value, ast.Attribute) and node.value.attr == "engine"
                                           or isinstance(node.value, ast.Name) and node.value.id == "engine"))


def test_the_roles_do_not_reach_through_async_engine() -> None:
    found = {str(p.relative_to(ROOT)): lines for role in ROLES for p in (ROOT / "services" / role).glob("*.py")
             if (lines := reach_throughs(p.read_text()))}
    assert not found, f"use AsyncEngine's methods instead: {found}"


def test_a_reach_through_is_found() -> None:
    assert reach_throughs("bs = self.engine.engine.blocks.block_size\nlay = engine.engine.layout\n") == [1, 2]
