"""The project's configuration plumbing: one error type, one argument check, one dict round trip.

Every config dataclass (network, training, collection, evaluation, bridge ...) checks its fields
in `__post_init__` with `need`, and a user mistake surfaces as a `ConfigError` whose message says
what was wrong and what is allowed; the command line prints that one line instead of a traceback.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, ClassVar


class ConfigError(ValueError):
    """A configuration value is out of range; the message says what is allowed."""


class TrainingDiverged(RuntimeError):
    """Training stopped because its loss (training or validation) is no longer a finite number;
    the run keeps its last checkpoint and is not marked finished."""


def need(ok: bool, message: str) -> None:
    """Raise ConfigError(message) unless ok."""
    if not ok:
        raise ConfigError(message)


class ConfigDict:
    """from_dict / to_dict for the config dataclasses; an unknown key is named in the error,
    with the keys that are allowed."""

    WHAT: ClassVar[str] = "options"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        need(not unknown, f"unknown {cls.WHAT} {unknown}; allowed: {sorted(known)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]
