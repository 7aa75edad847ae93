"""The NAC logit ODE and its three solutions (NAC.md section 2).

    d a / dt = -omega_tau * a + phi,   a(0) = 0                                 (Eq. 1)

exact:  a(t) = phi / omega_tau * (1 - exp(-omega_tau * t))                       (Eq. 3/17)
euler:  a <- a + h * (-omega_tau * a + phi), n steps of size h                  (Eq. 2)
steady: a = phi / omega_tau                                                      (Eq. 18)
"""

from __future__ import annotations

from typing import Literal

import torch

Mode = Literal["exact", "euler", "steady"]
MODES: tuple[str, ...] = ("exact", "euler", "steady")


def solve(
    phi: torch.Tensor,
    omega_tau: torch.Tensor,
    t: torch.Tensor | float,
    mode: str = "exact",
    euler_steps: int = 6,
    euler_step_size: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """State of Eq. 1 at horizon `t` (all arguments broadcast together).

    In `euler` mode the step size is `euler_step_size` when given (horizon
    `euler_steps * euler_step_size`, the authors' fixed-step scheme), else `t / euler_steps`
    (the same horizon as `exact`). Explicit Euler is stable only while step * omega_tau < 2.
    """
    if mode == "steady":
        return phi / omega_tau
    if mode == "exact":
        return phi / omega_tau * (-torch.expm1(-omega_tau * t))  # expm1: accurate for small w*t
    if mode == "euler":
        h = t / euler_steps if euler_step_size is None else euler_step_size
        a = torch.zeros_like(phi * omega_tau)
        for _ in range(euler_steps):
            a = a + h * (phi - omega_tau * a)
        return a
    raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
