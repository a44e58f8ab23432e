"""The router and kvxfer serve without loading torch: importing their servers loads no model code."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("modules", [
    "services.router.main, services.router.http, services.router.server",
    "services.kvxfer.app, services.kvxfer.core, services.kvxfer.client",
    "services.common.errors, services.common.convert, services.common.tokenizer, services.common.validation",
])
def test_importing_loads_no_torch(modules: str) -> None:
    code = f"import sys; import {modules}; assert 'torch' not in sys.modules, 'torch loaded'; " \
           "assert not any(m.startswith('services.engine') for m in sys.modules), 'engine loaded'"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
