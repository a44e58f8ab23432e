"""Test hook, loaded by every Python process started with this folder on PYTHONPATH: where the environment names
DISTSERVE_TEST_CRASH_TOKENS, an engine step whose batch holds a prompt with those ids aborts its process (the
supervision tests' fatal request). It wraps the model runner when that module is first imported, so processes
that never load the engine (router, kvxfer) load nothing more."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

RUNNER = "services.engine.model_runner"


def _contains(ids: list[int], part: tuple[int, ...]) -> bool:
    return any(tuple(ids[i:i + len(part)]) == part for i in range(len(ids) - len(part) + 1))


class _WrapRunner(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, crash: tuple[int, ...]) -> None:
        self.crash = crash

    def find_spec(self, name, path, target=None):
        if name != RUNNER:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        self.real = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module) -> None:
        self.real.exec_module(module)
        execute = module.ModelRunner.execute
        crash = self.crash

        def crashing(runner, batch):
            if any(_contains(it.seq.prompt_ids, crash) for it in batch.items):
                os.abort()
            return execute(runner, batch)

        module.ModelRunner.execute = crashing


if os.environ.get("DISTSERVE_TEST_CRASH_TOKENS"):
    sys.meta_path.insert(0, _WrapRunner(tuple(int(t) for t in os.environ["DISTSERVE_TEST_CRASH_TOKENS"].split(","))))
