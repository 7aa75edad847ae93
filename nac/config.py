"""The project's configuration plumbing: one error type, one argument check, one dict round trip.

Every config dataclass (network, training, collection, evaluation, bridge ...) checks its fields
in `__post_init__` with `need`, and a user mistake surfaces as a `ConfigError` whose message says
what was wrong and what is allowed; the command line prints that one line instead of a traceback.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import asdict, dataclass, fields
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


# ---------------------------------------------------------------------- numeric ranges
INT_MAX = 2**31 - 1  # the largest whole number a field takes: a seed, a count or a size fits numpy's and torch's int32
FLOAT_MAX = 1e9  # the largest number a field takes where its Range names no bound (no setting here means more)


@dataclass(frozen=True)
class Range:
    """The values a numeric config field allows, declared once in its metadata (`field(metadata=at_least(1))`): the
    config's check (`check_ranges`) and its command-line flag (scripts.options) both read it. A field that declares
    none takes `NON_NEGATIVE`: counts, seeds, sizes, weights and times are never negative. Every value is finite and
    at most INT_MAX (whole numbers) or FLOAT_MAX where the Range names no upper bound."""

    lo: float | None = 0.0  # the smallest value allowed (None: no lower bound)
    hi: float | None = None  # the largest (None: INT_MAX for whole numbers, FLOAT_MAX for others)
    lo_open: bool = False  # lo itself is not allowed (> lo)
    hi_open: bool = False  # hi itself is not allowed (< hi)

    def allows(self, value: float, whole: bool) -> bool:
        if not math.isfinite(value):
            return False
        hi = self._hi(whole)
        if self.lo is not None and (value < self.lo or (self.lo_open and value == self.lo)):
            return False
        return hi is None or (value < hi if self.hi_open else value <= hi)

    def _hi(self, whole: bool) -> float:
        return self.hi if self.hi is not None else INT_MAX if whole else FLOAT_MAX

    def describe(self, whole: bool) -> str:
        """What is allowed, in words: 'a whole number in 1..2147483647', 'a number > 0', 'a number in [0, 1)'."""
        kind = "a whole number" if whole else "a number"
        hi = self._hi(whole)
        g = (lambda v: str(int(v))) if whole else (lambda v: f"{v:g}")
        if self.lo is None:
            return f"{kind} {'<' if self.hi_open else '<='} {g(hi)}"
        if whole:
            return f"{kind} in {g(self.lo + self.lo_open)}..{g(hi - self.hi_open)}"
        return f"{kind} in {'(' if self.lo_open else '['}{g(self.lo)}, {g(hi)}{')' if self.hi_open else ']'}"


NON_NEGATIVE = Range()


def at_least(lo: float) -> dict[str, Range]:
    """A field's metadata: values >= lo."""
    return {"range": Range(lo)}


def above(lo: float) -> dict[str, Range]:
    """A field's metadata: values > lo."""
    return {"range": Range(lo, lo_open=True)}


def between(lo: float | None, hi: float | None, hi_open: bool = False, lo_open: bool = False) -> dict[str, Range]:
    """A field's metadata: values from lo to hi (None: unbounded on that side)."""
    return {"range": Range(lo, hi, lo_open, hi_open)}


def number_kind(hint: Any) -> type | None:
    """int or float for a numeric annotation (int, float, X | None, list[X], tuple[X, ...]); None for any other."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return number_kind(rest[0]) if len(rest) == 1 else None
    if origin in (list, tuple):
        return number_kind(args[0]) if args else None
    return hint if hint in (int, float) else None


def field_range(f: Any) -> Range:
    return f.metadata.get("range", NON_NEGATIVE)


@functools.cache
def _numeric_fields(cls: type) -> tuple[tuple[str, type, Range], ...]:
    """(name, int or float, its Range) for each numeric field of a config dataclass: read once per class."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, kind, field_range(f)) for f in fields(cls) if (kind := number_kind(hints[f.name])) is not None)


def check_ranges(cfg: Any) -> None:
    """Every numeric field of the config dataclass within its declared Range, or a ConfigError naming the field
    (as its flag is spelt) and what is allowed. Configs call it first in __post_init__."""
    for name, kind, rng in _numeric_fields(type(cfg)):
        value = getattr(cfg, name)
        if value is None or isinstance(value, bool):
            continue
        for v in value if isinstance(value, (list, tuple)) else [value]:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (kind is float or float(v).is_integer())
            need(ok and rng.allows(float(v), kind is int), f"{name.replace('_', '-')} must be {rng.describe(kind is int)} (got {v!r})")


SIGNED = {"range": Range(None)}  # a field's metadata: any finite number, negative ones too (a log standard deviation)
