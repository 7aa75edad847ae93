"""The suite's time limits. A test waits for a condition (polling), never for a guessed time; where it must give up,
its limit goes through `seconds`, which scales it by NACDRIVE_TEST_SLOWDOWN (default 1): `pytest --load N` runs the
suite beside N CPU-bound processes and sets it (tests/conftest.py), so a loaded machine is slower, not failing."""

from __future__ import annotations

import os


def slowdown() -> float:
    return float(os.environ.get("NACDRIVE_TEST_SLOWDOWN") or 1.0)


def seconds(limit: float) -> float:
    """A limit that holds on an idle machine (stated generously), scaled for a loaded one."""
    return limit * slowdown()
