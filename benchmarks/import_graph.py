"""The import graph in three figures: rooms (the packages under `services`, and `benchmarks`), arrows running back
up (imports from a lower layer of pyproject's layers contract to a higher one, ignored imports included) and
circles (groups of modules that import each other, directly or around a loop).

    python3 -m benchmarks.import_graph [--json]
"""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def _layers() -> list[list[str]]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in doc["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    return [[part.strip() for part in layer.split("|")] for layer in contract["layers"]]


def _layer_of(module: str, layers: list[list[str]]) -> int | None:
    for index, layer in enumerate(layers):
        if any(module == name or module.startswith(name + ".") for name in layer):
            return index
    return None


def _circles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start) & modules)))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child) & modules))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    roots = ["services"] + (["benchmarks"] if (ROOT / "benchmarks" / "__init__.py").is_file() else [])
    graph = grimp.build_graph(*roots, cache_dir=None)
    modules = {m for m in graph.modules if m.split(".")[0] in roots}
    rooms = sorted(m for m in modules if (ROOT / m.replace(".", "/") / "__init__.py").is_file())
    layers = [[*(["benchmarks"] if "benchmarks" in roots else [])]] + _layers()
    upward = []
    for importer in sorted(modules):
        low = _layer_of(importer, layers)
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & modules):
            high = _layer_of(imported, layers)
            if low is not None and high is not None and high < low:
                upward.append(f"{importer} -> {imported}")
    circles = _circles(graph, modules)
    doc = {"rooms": len(rooms), "modules": len(modules), "upward_arrows": upward, "circles": circles}
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(f"rooms {len(rooms)} (packages), modules {len(modules)}, arrows running back up {len(upward)}, "
              f"circles {len(circles)}")
        for line in upward:
            print(f"  up: {line}")
        for group in circles:
            print(f"  circle: {' <-> '.join(group)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
