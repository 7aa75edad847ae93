"""The config plumbing (nac.config): a bad value or an unknown key ends in one line saying what is allowed."""

from dataclasses import dataclass

import pytest

from nac.config import ConfigDict, ConfigError, need


@dataclass
class _Example(ConfigDict):
    WHAT = "example options"
    size: int = 2
    name: str = "a"

    def __post_init__(self) -> None:
        need(self.size >= 1, f"size must be >= 1 (got {self.size})")


def test_from_dict_round_trips_and_names_unknown_keys_with_the_allowed_ones():
    assert _Example.from_dict(_Example(size=3).to_dict()) == _Example(size=3)
    with pytest.raises(ConfigError, match=r"unknown example options \['colour'\]; allowed: \['name', 'size'\]"):
        _Example.from_dict({"colour": 1})
    with pytest.raises(ConfigError, match=r"size must be >= 1 \(got 0\)"):
        _Example.from_dict({"size": 0})
    assert issubclass(ConfigError, ValueError)  # callers that catch ValueError keep working
