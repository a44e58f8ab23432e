"""Flags generated from a settings class: each field once, a flag beats its DISTSERVE_* variable, an unset one
falls back to it; a boolean works bare or with a value."""

from __future__ import annotations

import argparse

import pytest

from services.common.settings_cli import add_settings_arguments, settings_values
from services.planner.config import PlannerSettings
from services.router.config import RouterSettings


def _values(cls: type, argv: list[str]) -> dict:
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, cls)
    return settings_values(parser.parse_args(argv), cls)


def _settings(cls: type, argv: list[str], **required: str):
    return cls(**required, **_values(cls, argv))


@pytest.mark.parametrize("argv, expected", [([], False), (["--allow-unauthenticated"], True),
                                             (["--allow-unauthenticated", "true"], True),
                                             (["--allow-unauthenticated", "false"], False)])
def test_a_boolean_flag_works_bare_or_with_a_value(argv: list[str], expected: bool) -> None:
    assert _settings(PlannerSettings, argv).allow_unauthenticated is expected
    router = _settings(RouterSettings, argv, model="m", redis_url="redis://h:1")
    assert router.allow_unauthenticated is expected


def test_a_flag_beats_the_environment_and_an_unset_one_falls_back_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTSERVE_PLANNER_PORT", "9100")
    monkeypatch.setenv("DISTSERVE_PLANNER_FIT_INTERVAL", "0")
    assert _settings(PlannerSettings, []).port == 9100
    got = _settings(PlannerSettings, ["--port", "9200", "--workers", "3", "--redis-url", "redis://h:1"])
    assert (got.port, got.fit_interval, got.workers, got.redis_url) == (9200, 0.0, 3, "redis://h:1")


def test_an_optional_field_takes_any_value_and_a_literal_only_its_choices() -> None:
    parser = argparse.ArgumentParser()
    add_settings_arguments(parser, RouterSettings)
    with pytest.raises(SystemExit):
        parser.parse_args(["--routing", "random"])
    assert _settings(PlannerSettings, ["--model-profile", "p.json"]).model_profile == "p.json"
