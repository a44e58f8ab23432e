"""`resolve_model`: turns `--model` into a folder, a preset (preset_configs.py) being made on first use."""

from __future__ import annotations

import json
from pathlib import Path

from services.engine.preset_configs import DEFAULT_PRESET, PRESET_FILE, PRESETS

__all__ = ["PRESETS", "resolve_model"]  # PRESETS re-exported: `--model` choices and the planner's shapes read it here

DEFAULT_MODEL_DIR = Path.home() / ".cache" / "distserve" / "models"


def resolve_model(model: str | None) -> str:
    """A model folder, or a preset name (made on first use under ~/.cache/distserve/models)."""
    name = model or DEFAULT_PRESET
    if Path(name).is_dir():
        return str(Path(name))
    if name not in PRESETS:
        raise SystemExit(f"--model: {name!r} is neither a model folder nor a preset ({', '.join(PRESETS)})")
    folder = DEFAULT_MODEL_DIR / name
    # the preset a folder was made from; folders made before PRESET_FILE existed hold it as their config.json
    made = folder / PRESET_FILE if (folder / PRESET_FILE).exists() else folder / "config.json"
    if not made.exists() or json.loads(made.read_text()) != PRESETS[name]:  # missing, or made from an older preset
        from services.engine.make_model import make_model

        make_model(name, folder)
    return str(folder)
