"""The layout is legible at a glance: README's layout table names every package of services/, and services/common's
package docstring lists every module, by theme."""

from __future__ import annotations

from pathlib import Path

import services.common

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_layout_names_every_package() -> None:
    packages = {p.parent.name for p in (ROOT / "services").glob("*/__init__.py")}
    table = (ROOT / "README.md").read_text().split("## Layout", 1)[1]
    assert not {p for p in packages if f"`services/{p}/`" not in table}


def test_the_common_index_names_every_module() -> None:
    modules = {p.stem for p in Path(services.common.__file__).parent.glob("*.py")} - {"__init__"}
    index = services.common.__doc__ or ""
    assert not {m for m in modules if f"`{m}`" not in index}, "add them to services/common/__init__.py"
