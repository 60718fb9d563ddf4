"""Server settings for watching the model paths: `--watch`, poll mode and its interval."""

from __future__ import annotations

import pytest

from fnserve.config.server import ServerConfig, WatchSettings
from fnserve.errors import ModelConfigError


def test_nothing_is_watched_by_default() -> None:
    assert ServerConfig().watch_settings() is None


def test_watch_uses_native_events() -> None:
    assert ServerConfig(watch=True).watch_settings() == WatchSettings(False, 15.0)


def test_poll_mode_polls_at_its_interval_and_loads_everything() -> None:
    config = ServerConfig(model_control_mode="poll", repository_poll_secs=0.5)
    assert config.watch_settings() == WatchSettings(True, 0.5)
    assert config.startup_models() is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"watch": True, "model_control_mode": "explicit"}, "--watch cannot be combined"),
        ({"watch": True, "model_control_mode": "poll"}, "--watch cannot be combined"),
        ({"model_control_mode": "sometimes"}, "'none', 'explicit' or 'poll'"),
        ({"model_control_mode": "poll", "repository_poll_secs": 0.0}, "must be > 0"),
        ({"load_models": ("a",), "model_control_mode": "poll"}, "requires --model-control-mode"),
    ],
)
def test_conflicting_settings_are_refused(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ModelConfigError, match=message):
        ServerConfig.from_mapping(settings)


@pytest.mark.parametrize(
    ("mode", "watch", "refused"),
    [("", False, False), ("", True, False), ("explicit", False, False), ("none", False, True),
     ("none", True, True), ("poll", False, True)],
)  # fmt: skip
def test_the_repository_api_is_refused_in_a_given_none_or_poll_mode(
    mode: str, watch: bool, refused: bool
) -> None:
    """As Triton; the default (no mode given) keeps it open: fnserve's reload uses it."""
    refusal = ServerConfig(model_control_mode=mode, watch=watch).repository_api_refusal()
    assert bool(refusal) == refused
    if refused:
        assert refusal.startswith(
            "explicit model load / unload is not allowed if polling is enabled (model control "
            f"mode '{mode}'"
        )
